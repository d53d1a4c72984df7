"""Shared fixtures: no network, the HPU test double, hardware-gated markers."""

from __future__ import annotations

import atexit
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKES = Path(__file__).parent / "fakes"

# No test reaches a model or dataset hub: the libraries are told so, and a fixture below
# refuses every non-loopback connection.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.pop("WORKBENCH_DEVICE", None)
# Every test session builds the bundled datasets afresh in its own cache, and keeps the
# Hugging Face caches out of the user's home.
_CACHE = Path(tempfile.mkdtemp(prefix="wb-test-cache-"))
# a script that imports a test module (tests/test_attach.py's scripts, for its own Trainer)
# imports this file outside pytest, where no pytest_unconfigure removes it: its exit does
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["WORKBENCH_CACHE"] = str(_CACHE / "workbench")
os.environ["HF_HOME"] = str(_CACHE / "hf")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# DeepSpeed JIT-builds its CPU ops into torch's extension cache, guarded by a lock file that a
# build killed half-way leaves behind, and the next build then waits on it forever: the tests
# build into their own directory instead of depending on the state of ~/.cache.
# One intra-op thread for torch here and in every kernel and worker the tests start: the tiny
# models gain nothing from a second thread, and on a 2-core machine with the other core busy
# (a browser, a second rank, CI's neighbour) OpenMP's spinning threads stall each other
# (a 1000-step notebook took 12 minutes instead of 50 s).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The pytest-xdist workers of one run share it (a build takes about a minute and a half: once
# per run, not once per worker); torch's own lock file serialises builds inside it.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
_SHARED_BUILD = "wb-test-torch-extensions-{run}"  # under the temporary directory, per run
_EXTENSIONS = Path(tempfile.gettempdir()) / _SHARED_BUILD.format(run=_RUN) if _RUN else _CACHE / "torch_extensions"
os.environ["TORCH_EXTENSIONS_DIR"] = str(_EXTENSIONS)


def pytest_configure(config):
    # An xdist run's controller names the run itself (xdist names it otherwise, in a
    # NodeManager made later, out of a conftest's reach), so that it can remove the build
    # its workers shared once they are done
    if (not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None)
            and getattr(config.option, "testrunuid", None) is None):
        config.option.testrunuid = uuid.uuid4().hex


def pytest_unconfigure(config):
    # What this process made under the temporary directory goes with it (66 MB of datasets a
    # process: 180 runs' worth, 12 GB, had gathered in one machine's /tmp); the workers' shared
    # extension build goes with the controller, after the last worker
    shutil.rmtree(_CACHE, ignore_errors=True)
    if not hasattr(config, "workerinput") and (run := getattr(config.option, "testrunuid", None)):
        shutil.rmtree(Path(tempfile.gettempdir()) / _SHARED_BUILD.format(run=run), ignore_errors=True)


def pytest_report_header(config):
    from workbench.backends.registry import devices

    found = [f"{d.kind} x{d.count} ({d.name})" for d in devices() if d.available]
    return [f"workbench devices: {', '.join(found)}"]


# The fast tier (`make check`, `-m "not slow"`) leaves out every end-to-end run. A test is
# marked `slow` where it is written (a decorator: a notebook under papermill, a torchrun
# launch, a benchmark, a run in a subprocess, a training that takes more than a few seconds),
# and here by what it asks for, so that a new test of that kind is slow without being told:
SLOW_FIXTURES = {
    "on_hpu": "trains in a fresh Python on the emulated Gaudi (torch, the double, a C++ device)",
    "lab": "starts a JupyterLab server and drives it from Chromium",
    "browser": "drives headless Chromium",
}
# A hang is reported in minutes: pyproject's `timeout` holds for the fast tier; a slow test
# (notebooks, launches and benchmarks of 40-110 s on CI's two cores, more on a busy
# machine) gets this many seconds unless it names its own with @pytest.mark.timeout.
SLOW_TIMEOUT_S = 600


def pytest_collection_modifyitems(config, items):
    from workbench.backends.registry import BACKENDS

    have = {k: BACKENDS[k].calls.available() for k in ("hpu", "cuda")}
    for item in items:
        for kind in ("hpu", "cuda"):
            if item.get_closest_marker(f"requires_{kind}") and not have[kind]:
                item.add_marker(pytest.mark.skip(reason=f"needs a real {kind} device"))
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("browser") or fixtures & SLOW_FIXTURES.keys():
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
    # The longest test, the container rehearsal (minutes), starts first: pytest-xdist hands each
    # worker a run of the list in order, so the other worker takes the rest beside it instead
    # of the run waiting on it at its end
    items.sort(key=lambda item: item.path.name != "test_rehearsal.py")


class NetworkRefused(OSError):
    pass


def _is_local(address) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(scope="session")
def ipython():
    """IPython's test shell, shared by the tests that need one: IPython keeps one shell a
    process (a singleton), and ``start_ipython`` makes it only on its first call."""
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    return start_ipython() or get_ipython()


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Refuse every connection that leaves this machine."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guard(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
            raise NetworkRefused(f"test tried to reach the network: {address!r}")

    def connect(sock, address):
        guard(sock, address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        guard(sock, address)
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield


def _drop_fake_modules():
    import torch

    profiler = sys.modules.get("habana_frameworks.torch.activity_profiler.activity_profiler")
    if profiler is not None:  # the double replaced torch.profiler's enum and profile: undo it
        profiler.undo()
    overwrites = sys.modules.get("habana_frameworks.torch.core.torch_overwrites")
    if overwrites is not None:  # in lazy mode it wrapped torch.save, torch.load, nn.Module's
        overwrites.undo()
    for name in [m for m in sys.modules if m == "habana_frameworks" or m.startswith("habana_frameworks.")]:
        del sys.modules[name]
    if hasattr(torch, "hpu") and getattr(torch.hpu, "__file__", "").startswith(str(FAKES)):
        del torch.hpu
    if getattr(sys.modules.get("torch.hpu"), "__file__", "").startswith(str(FAKES)):
        del sys.modules["torch.hpu"]  # the double registers itself there, as the bridge does
    # transformers and accelerate keep their "is there an HPU" answer for the process (a
    # bridge never unloads): forget the one given while the double was loaded, or a later
    # test's Trainer calls torch.hpu (transformers' set_seed) after it is gone
    for module, name in (("transformers.utils.import_utils", "is_torch_hpu_available"),
                         ("accelerate.utils.imports", "is_hpu_available")):
        cached = getattr(sys.modules.get(module), name, None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


@pytest.fixture
def fake_hpu(monkeypatch, tmp_path_factory):
    """Put the Habana bridge TEST DOUBLE (tests/fakes) on the path for one test.

    Its cards' device files go in a fresh folder, so no card is held by an earlier test
    (a reloaded double would otherwise find this process's own lock on card 0)."""
    from workbench.backends.registry import clear_cache

    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("FAKE_HPU_GENERATION", "2")
    monkeypatch.setenv("FAKE_HPU_COUNT", "8")
    dev_dir = tmp_path_factory.mktemp("accel")
    monkeypatch.setenv("FAKE_HPU_DEV_DIR", str(dev_dir))
    # the workbench finds the emulated cards' device files there (docs/devices.md), and HLML
    # (the pyhlml double, tests/fakes/pyhlml) lists the same FAKE_HPU_COUNT cards
    monkeypatch.setenv("WORKBENCH_HPU_DEVICE_FILES", str(dev_dir / "accel*"))
    # the holds its processes record for other users (backends/holds.py) stay in the test's
    monkeypatch.setenv("WORKBENCH_HOLDS", str(tmp_path_factory.mktemp("holds") / "holds"))
    monkeypatch.delitem(sys.modules, "pyhlml", raising=False)
    # the Python API only: the emulated device would make "hpu" this process's accelerator
    # for every later test (tests/fakes/README.md); tests that need it use a subprocess
    monkeypatch.setenv("FAKE_HPU_DEVICE", "0")
    # the torch of Intel's container is Intel's build, which current bridges need for lazy
    # mode (tests/fakes/README.md); tests of the refusal unset it
    monkeypatch.setenv("FAKE_HPU_INTEL_TORCH", "1")
    for name in ("PT_HPU_LAZY_MODE", "PT_HPU_RECIPE_CACHE_CONFIG", "HLS_MODULE_ID",
                 "HABANA_VISIBLE_MODULES"):
        monkeypatch.setitem(os.environ, name, "")  # the workbench and the double set them:
        del os.environ[name]  # restored after the test, also where they were unset
    _drop_fake_modules()
    clear_cache()
    # What `import workbench` does in a kernel with the bridge installed (this process
    # imported workbench before the double was on the path)
    from workbench.backends.hpu import prepare_recipe_cache

    prepare_recipe_cache()
    yield FAKES
    _drop_fake_modules()
    clear_cache()


@pytest.fixture
def fake_env(tmp_path_factory):
    """Environment for a subprocess that should see the HPU test double (its cards' device
    files in a fresh folder)."""
    env = dict(os.environ)
    env["FAKE_HPU_DEV_DIR"] = str(tmp_path_factory.mktemp("accel"))
    env["WORKBENCH_HPU_DEVICE_FILES"] = os.path.join(env["FAKE_HPU_DEV_DIR"], "accel*")
    env["WORKBENCH_HOLDS"] = str(tmp_path_factory.mktemp("holds") / "holds")
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["FAKE_HPU_INTEL_TORCH"] = "1"  # as in Intel's container (see fake_hpu)
    return env


@pytest.fixture
def on_hpu(tmp_path):
    """``on_hpu(body, **env)``: run ``body`` on the emulated Gaudi in a fresh Python (never in
    this process: the device would stay its accelerator); the dict it leaves in ``out``."""
    from emulated_hpu import run_on_hpu

    count = iter(range(1000))
    return lambda body, **env: run_on_hpu(tmp_path / f"hpu-{next(count)}", body, **env)


# ---------------------------------------------------------------- run directories
@pytest.fixture
def runs_in_tmp(tmp_path, monkeypatch):
    """This test's runs go under ``tmp_path/runs`` (``WORKBENCH_RUNS``), and it works in
    ``tmp_path``: a module opts in with ``pytestmark = pytest.mark.usefixtures("runs_in_tmp")``."""
    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


@pytest.fixture
def make_run():
    """``make_run(root, name, ...)``: a run directory as the writer leaves it, without training.

    The spec is a whole one (the model's and the data's specs, every run argument with its
    default unless ``args`` says otherwise); ``summary`` is written as given, after it.
    """
    from workbench.catalog.modelspec import model as as_model
    from workbench.data.dataset import dataset as as_dataset
    from workbench.runargs import RunArgs
    from workbench.rundir.run import write_json

    def make(root: Path, name: str, *, model="gpt2-tiny", data="docstrings-lm", args=None,
             summary=None, **extra) -> Path:
        path = Path(root) / name
        path.mkdir(parents=True)
        spec = {"model": as_model(model).to_dict(), "data": as_dataset(data).to_dict(),
                "args": RunArgs.from_options(dict(args or {})).to_dict(), **extra}
        write_json(path / "spec.json", spec)
        write_json(path / "summary.json", {"status": "completed", "error": None, **(summary or {})})
        return path

    return make


# ---------------------------------------------------------------- helpers for tests
def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll ``predicate`` until it returns something true and return that; fail after
    ``timeout`` seconds with an error naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class RecordingFrontend:
    """The live dashboard's front end, as a test double: takes a widget's comm, records
    every message the kernel sends to the view, and answers like the view ("ready", "stop")."""

    def __init__(self):
        self.comm_id = uuid.uuid4().hex
        self.messages: list[tuple[dict, list[bytes]]] = []
        self._handler = None

    def on_msg(self, callback) -> None:
        self._handler = callback

    def send(self, data=None, metadata=None, buffers=None) -> None:
        self.messages.append((data, [bytes(b) for b in (buffers or [])]))

    def close(self, *args, **kwargs) -> None:
        pass

    def answer(self, content: dict) -> None:
        """Deliver a custom message from the 'front end' to the kernel-side widget."""
        self._handler({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})

    @property
    def deltas(self) -> list[tuple[dict, list[bytes]]]:
        return [(d["content"], b) for d, b in self.messages
                if d.get("method") == "custom" and d["content"].get("type") == "delta"]


class SmallDisk:
    """A real tmpfs of ``mb`` megabytes mounted at ``path``: a disk that fills for real.

    ``fill(leave)`` writes a filler file until ``leave`` bytes are free (0: until the kernel
    refuses another byte), so a test can make the next write the one that runs out;
    ``make_room(mb)`` deletes the filler and grows the mount, as a user freeing space would.
    """

    def __init__(self, path: Path, mb: int):
        self.path, self.mb = path, mb
        self.filler = path / "filler"

    @property
    def free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        with open(self.filler, "ab", buffering=0) as f:
            try:
                while self.free > leave:
                    f.write(b"\0" * min(self.free - leave, 1 << 20))
            except OSError:  # ENOSPC: full to the last page
                pass

    def make_room(self, mb: int = 64) -> None:
        self.filler.unlink(missing_ok=True)
        subprocess.run(["mount", "-o", f"remount,size={mb}m", str(self.path)], check=True)
        self.mb = mb


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(mb)``: a fresh tmpfs of ``mb`` MB for this test (root only), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the tests of a full disk fill a real one)")
    mounted: list[Path] = []

    def mount(mb: int, options: str = "") -> SmallDisk:
        path = tmp_path / f"disk{len(mounted)}-{mb}m"
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mb}m{options}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(path)
        return SmallDisk(path, mb)

    yield mount
    for path in reversed(mounted):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], check=False)  # a file still open: detach it
