"""Real Unix users for the tests that need more than one (the classroom, hold records): made
with ``useradd`` (root only), and this venv's Python where they can run it."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def users(n: int, home_root: Path) -> list[str]:
    """``n`` new system users, their homes under ``home_root``."""
    tag = secrets.token_hex(3)
    names = [f"wbc{tag}s{i}" for i in range(n)]
    for name in names:
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home_root / name),
                        "--shell", "/bin/sh", name], check=True, capture_output=True)
    return names


def remove(names: list[str]) -> None:
    for name in names:
        subprocess.run(["userdel", "--force", name], capture_output=True)


def reachable(path: Path) -> bool:
    """Whether every folder above ``path`` lets other users through."""
    return all(p.stat().st_mode & 0o001 for p in path.parents)


def python() -> tuple[Path, dict[str, str]]:
    """This venv's Python as the students can run it, and the variables it needs. Where its
    interpreter sits under a private folder (this machine's pyenv under /root), a copy of the
    interpreter, its standard library and headers (a teacher installs Python where every user
    can read it), and in it a venv over this venv's site-packages, etc and share. Kept between
    runs in /var/tmp: one copy of each interpreter (171 MB), shared by every checkout's venv
    (a few links each); the venvs of checkouts since removed go when another is made."""
    real = Path(os.path.realpath(sys.executable))
    if reachable(real) and reachable(Path(sys.base_prefix) / "lib"):
        return Path(sys.executable), {}
    base, ver = Path(sys.base_prefix), f"python{sys.version_info[0]}.{sys.version_info[1]}"
    home = Path("/var/tmp") / f"wb-classroom-python-{_digest(real, sys.version)}"
    py = home / "python"
    if not home.exists():
        def copy(new: Path) -> None:
            (new / "python" / "bin").mkdir(parents=True)
            shutil.copy2(real, new / "python" / "bin" / ver)
            shutil.copytree(base / "lib" / ver, new / "python" / "lib" / ver,
                            ignore=shutil.ignore_patterns("site-packages", "test"))
            shutil.copytree(base / "include", new / "python" / "include")  # the device's build
            for lib in (base / "lib").glob("libpython*"):
                shutil.copy2(lib, new / "python" / "lib" / lib.name)
            (new / "venvs").mkdir()
        _made_whole(home, copy)
    site = Path(sys.prefix) / "lib" / ver / "site-packages"
    for old in (home / "venvs").iterdir():  # a removed checkout's venv: its link leads nowhere
        if not (old / "lib" / ver / "site-packages").exists():
            shutil.rmtree(old, ignore_errors=True)
    venv = home / "venvs" / _digest(sys.prefix)

    def link(new: Path) -> None:
        (new / "bin").mkdir(parents=True)
        (new / "pyvenv.cfg").write_text(f"home = {py / 'bin'}\ninclude-system-site-packages = false\n")
        (new / "bin" / "python").symlink_to(py / "bin" / ver)
        (new / "lib" / ver).mkdir(parents=True)
        (new / "lib" / ver / "site-packages").symlink_to(site)
        for name in ("etc", "share"):
            (new / name).symlink_to(Path(sys.prefix) / name)

    if not venv.exists():
        _made_whole(venv, link)
    return venv / "bin" / "python", {"LD_LIBRARY_PATH": str(py / "lib")}


def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12]


def _made_whole(path: Path, make) -> None:
    """``make(folder)`` in a new folder beside ``path``, readable by everyone, then renamed to
    ``path``: a run beside this one (another checkout's) sees it whole or not at all, and a
    copy cut short is never ``path``. Where another run renamed first, its copy stays."""
    new = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        make(new)
        for p in [new, *new.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | 0o755 if p.is_dir() else p.stat().st_mode | 0o444)
        try:
            new.rename(path)
        except OSError:  # another run's copy is there now
            pass
    finally:
        shutil.rmtree(new, ignore_errors=True)
