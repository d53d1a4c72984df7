"""The install shapes Intel ships (issue 54; docs/gaudi.md, "Install shapes"), each met by the
Makefile's Gaudi venv step alone (``make .venv/torch-pin.txt``: scripts/gaudi_venv.py, then the
pins), not by a whole setup: the container rehearsal (tests/test_rehearsal.py) runs that once.

The image is a copy of this machine's interpreter whose stdlib is linked and whose own
site-packages start empty (scripts/rehearse.sh makes its image the same way); Intel's torch is a
stand-in (a package and its .dist-info with an Intel-like version) and the bridge the test
double (tests/fakes), both installed as distributions where each shape puts them. HOME is a
temporary directory: the machine's user site and the checkout's .venv are never touched."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

BASE = Path(sys.base_prefix)
PYV = "python{}.{}".format(*sys.version_info[:2])
TORCH = "2.7.1+hpu.synapse.v1.22.0"  # the form of Intel's torch version (a local label)
FAKES = ROOT / "tests" / "fakes"
# the variables Intel's PyTorch image sets (Setup_and_Install dockerfiles/base/Dockerfile.ubuntu24.04
# and dockerfiles/pytorch/Dockerfile.ubuntu @ b626de8, 1.22.0); tcmalloc is not on this machine,
# so the loader warns that it cannot preload it and goes on, as on a host without it
IMAGE_ENV = {"PYTHONPATH": "{tmp}/root:{tmp}/usr/lib/habanalabs/", "PIP_NO_CACHE_DIR": "on",
             "PIP_DISABLE_PIP_VERSION_CHECK": "1",
             "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
             "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": "7516192768"}
WHERE = "import importlib.util as u, os; print([os.path.realpath(list(u.find_spec(n).submodule_search_locations)[0]) for n in ('torch', 'habana_frameworks')])"


def image(tmp, pip=True):
    """A Python like Intel's Ubuntu images': this interpreter's binary, its stdlib linked but
    for ensurepip (Debian's python3-venv, not installed), its own site-packages holding pip (as
    get-pip.py leaves it) or nothing. (An image with ensurepip is the rehearsal's.)"""
    root = tmp / "image"
    lib = root / "lib" / PYV
    (root / "bin").mkdir(parents=True)
    lib.mkdir(parents=True)
    shutil.copy2(BASE / "bin" / PYV, root / "bin" / PYV)
    (root / "bin" / "python3").symlink_to(PYV)
    for entry in (BASE / "lib" / PYV).iterdir():
        if entry.name not in ("site-packages", "dist-packages", "ensurepip"):
            (lib / entry.name).symlink_to(entry)
    python = root / "bin" / "python3"
    site = Path(ask(python, "import site; print(site.getsitepackages()[0])"))
    site.mkdir(parents=True)
    if pip:
        import pip as ours  # the checkout's venv's pip, linked in as a distribution
        here = Path(ours.__file__).parent
        for entry in (here, *here.parent.glob("pip-*.dist-info")):
            (site / entry.name).symlink_to(entry)
    return python, site


def install_torch_and_bridge(site):
    """Intel's torch (stand-in) and the bridge's double, installed as distributions in `site`."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(f'"""Stand-in for Intel\'s torch (tests)."""\n__version__ = "{TORCH}"\n')
    info = site / f"torch-{TORCH}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {TORCH}\n")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(FAKES / "habana_frameworks", site / "habana_frameworks", ignore=ignore)
    shutil.copytree(FAKES / "habana_frameworks_double-0.0.0.dist-info",
                    site / "habana_frameworks_double-0.0.0.dist-info")
    return site


def ask(python, code, env=None):
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def make(tmp, python, target=".venv/torch-pin.txt", **extra):
    """The Makefile's step for `target` (under tmp), PYTHON=python, HOME=tmp/home, no
    variables of this session's (PYTHONPATH, a venv, an outer make)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp / "home"), "LANG": "C.UTF-8",
           **{k: v.format(tmp=tmp) for k, v in extra.items()}}
    venv = tmp / ".venv"
    done = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), f"PYTHON={python}",
                           f"VENV={venv}", str(tmp / target)],
                          capture_output=True, text=True, env=env, timeout=300)
    return done, venv, env


def assert_sees_the_same(done, venv, python, env):
    assert done.returncode == 0, done.stdout + done.stderr
    assert "include-system-site-packages = true" in (venv / "pyvenv.cfg").read_text()
    assert ask(venv / "bin" / "python", WHERE, env) == ask(python, WHERE, env)
    pins = (venv / "torch-pin.txt").read_text().splitlines()
    assert pins[0] == f"torch=={TORCH}"
    assert not any(p.startswith("deepspeed==") for p in pins)  # none here: upstream's stays out
    return ask(venv / "bin" / "python", "import pip; print(pip.__file__)", env)


@pytest.mark.slow  # 1-3 s each alone: make and a few Pythons start
@pytest.mark.parametrize("variables", ["plain", "image"], ids=["no-ensurepip", "no-ensurepip+image-env"])
def test_an_image_without_ensurepip_gets_a_venv_that_uses_its_pip(tmp_path, variables):
    # Intel's Ubuntu images: python3 and python3-dev from apt, pip from get-pip.py, no
    # python3-venv, so `python3 -m venv` fails (no ensurepip); the image's torch and bridge in
    # its site-packages; with the image's variables set or not
    python, site = image(tmp_path)
    install_torch_and_bridge(site)
    for d in ("root", "usr/lib/habanalabs"):
        (tmp_path / d).mkdir(parents=True)
    done, venv, env = make(tmp_path, python, **(IMAGE_ENV if variables == "image" else {}))
    pip = assert_sees_the_same(done, venv, python, env)
    assert pip.startswith(str(site))  # the image's pip (a venv has no pip of its own)
    assert "no ensurepip: the venv uses the base's pip" in done.stdout


@pytest.mark.slow
def test_an_image_without_ensurepip_or_pip_stops_with_the_command_that_fixes_it(tmp_path):
    python, site = image(tmp_path, pip=False)
    install_torch_and_bridge(site)
    done, venv, _ = make(tmp_path, python)
    assert done.returncode != 0
    assert f"apt-get install {PYV}-venv" in done.stderr, done.stdout + done.stderr
    assert not (venv / "torch-pin.txt").exists()


@pytest.mark.slow
def test_torch_in_the_user_site_is_seen_by_the_venv(tmp_path):
    # Intel's bare-metal installer without --venv: the PyTorch packages in
    # $HOME/.local/lib/<python>/site-packages, which a venv never reads
    python, _ = image(tmp_path)
    user = install_torch_and_bridge(tmp_path / "home" / ".local" / "lib" / PYV / "site-packages")
    done, venv, env = make(tmp_path, python)
    assert_sees_the_same(done, venv, python, env)
    assert str(user) in ask(venv / "bin" / "python", WHERE, env)


@pytest.mark.slow
def test_torch_in_intels_venv_is_seen_by_the_venv_made_from_it(tmp_path):
    # The installer with --venv: the PyTorch packages in $HOME/habanalabs-venv, a venv of the
    # system Python, whose venvs see the system's site-packages, never that venv's
    python, _ = image(tmp_path)
    habana = tmp_path / "home" / "habanalabs-venv"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(habana)], check=True)
    install_torch_and_bridge(Path(ask(habana / "bin" / "python", "import sysconfig; print(sysconfig.get_path('purelib'))")))
    # make with the system Python (no bridge there) stops and names the Python to pass ...
    done, venv, _ = make(tmp_path, python, ".venv/.installed")
    assert done.returncode != 0 and not venv.exists()
    assert f"PYTHON={habana}/bin/python" in done.stdout, done.stdout + done.stderr
    # ... with which the venv sees Intel's venv's packages
    done, venv, env = make(tmp_path, habana / "bin" / "python")
    assert_sees_the_same(done, venv, habana / "bin" / "python", env)
    assert str(habana) in ask(venv / "bin" / "python", WHERE, env)
