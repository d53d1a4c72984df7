"""Real Unix users for the tests that need more than one (the classroom, hold records): made
with ``useradd`` (root only), and this venv's Python where they can run it."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
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
    interpreter, its standard library and headers, with a venv over this venv's site-packages,
    etc and share (a teacher installs Python where every user can read it). Kept between runs
    in /var/tmp (the emulated device is built for it there too)."""
    real = Path(os.path.realpath(sys.executable))
    if reachable(real) and reachable(Path(sys.base_prefix) / "lib"):
        return Path(sys.executable), {}
    base, ver = Path(sys.base_prefix), f"python{sys.version_info[0]}.{sys.version_info[1]}"
    key = hashlib.sha256(f"{real}|{sys.version}|{sys.prefix}".encode()).hexdigest()[:12]
    home = Path("/var/tmp") / f"wb-classroom-python-{key}"
    py, venv = home / "python", home / "venv"
    if not (home / "done").exists():
        shutil.rmtree(home, ignore_errors=True)
        (py / "bin").mkdir(parents=True)
        shutil.copy2(real, py / "bin" / ver)
        shutil.copytree(base / "lib" / ver, py / "lib" / ver,
                        ignore=shutil.ignore_patterns("site-packages", "test"))
        shutil.copytree(base / "include", py / "include")  # Python.h: the device's build
        for lib in (base / "lib").glob("libpython*"):
            shutil.copy2(lib, py / "lib" / lib.name)
        (venv / "bin").mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text(f"home = {py / 'bin'}\ninclude-system-site-packages = false\n")
        (venv / "bin" / "python").symlink_to(py / "bin" / ver)
        (venv / "lib" / ver).mkdir(parents=True)
        (venv / "lib" / ver / "site-packages").symlink_to(Path(sys.prefix) / "lib" / ver / "site-packages")
        for name in ("etc", "share"):
            (venv / name).symlink_to(Path(sys.prefix) / name)
        for p in [home, *home.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | 0o755 if p.is_dir() else p.stat().st_mode | 0o444)
        (home / "done").touch()
    return venv / "bin" / "python", {"LD_LIBRARY_PATH": str(py / "lib")}
