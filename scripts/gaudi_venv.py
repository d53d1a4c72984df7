"""`make`'s venv on Gaudi (docs/gaudi.md, "Install shapes"), made by the Python that imports
Intel's torch and bridge, with the standard library only: ``python scripts/gaudi_venv.py VENV``.

The venv sees the base's site-packages (``--system-site-packages``) and, through a .pth file,
wherever else that Python found torch and ``habana_frameworks``: the user site, where Intel's
bare-metal installer puts them, or the venv its ``--venv`` makes (a venv drops the user site, and
its "system" is the base interpreter, never another venv). Where the base has no ``ensurepip``
(Intel's Ubuntu images install ``python3`` with get-pip.py, not ``python3-venv``), the venv is
made without pip and uses the pip it sees, the image's; with none, this stops with the fix."""

import importlib.util
import os
import subprocess
import sys
import venv

PACKAGES = ("torch", "habana_frameworks")
PTH = "_gaudi_site.pth"
WHERE = ("import importlib.util as u, os, sys\n"
         "for n in sys.argv[1:]:\n"
         "    s = u.find_spec(n)\n"
         "    print(os.path.realpath(os.path.dirname(list(s.submodule_search_locations)[0])) if s else '')")


def ask(python, code, *args):
    """What `python` prints running `code` (its stdout, stripped)."""
    return subprocess.run([python, "-c", code, *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def main(target):
    homes = ask(sys.executable, WHERE, *PACKAGES).splitlines()
    with_pip = importlib.util.find_spec("ensurepip") is not None
    venv.EnvBuilder(system_site_packages=True, with_pip=with_pip, symlinks=True).create(target)
    python = os.path.join(target, "bin", "python")
    pth = os.path.join(ask(python, "import sysconfig; print(sysconfig.get_path('purelib'))"), PTH)
    if os.path.exists(pth):  # a venv remade: its own view, without the last run's additions
        os.remove(pth)
    seen = {os.path.realpath(p) for p in ask(python, "import sys; print('\\n'.join(sys.path))").split("\n")}
    extra = sorted({home for home in homes if home and home not in seen})
    if extra:  # addsitedir, not a bare path: it also reads the .pth files there, as site does
        with open(pth, "w") as out:
            out.writelines(f"import site; site.addsitedir({home!r})\n" for home in extra)
    got = ask(python, WHERE, *PACKAGES).splitlines()
    if got != homes:
        sys.exit(f"{target}: the venv finds {dict(zip(PACKAGES, got))}, {sys.executable} "
                 f"{dict(zip(PACKAGES, homes))}: report it, with where Intel's installer put them")
    if not with_pip and subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode:
        v = "{}.{}".format(*sys.version_info[:2])
        sys.exit(f"{sys.executable} has no ensurepip and no pip that a venv sees (Debian and "
                 f"Ubuntu ship ensurepip in python{v}-venv): run `apt-get install python{v}-venv` "
                 f"(or bootstrap pip with get-pip.py, as Intel's images do), then make again")
    print(f"{target}: torch and habana_frameworks from {', '.join(sorted(set(homes)))}"
          + ("" if with_pip else " (no ensurepip: the venv uses the base's pip)"))


if __name__ == "__main__":
    main(sys.argv[1])
