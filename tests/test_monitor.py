"""Device readings for the side panel: HLML and NVML through their test doubles
(tests/fakes/pyhlml_double.py, pynvml_double.py), the real libraries as installed here
(no driver on this machine), the CPU through psutil."""

from __future__ import annotations

import importlib.util
import os
import pwd
import sys
import uuid

import psutil
import pytest

from workbench.backends import chips, hpu, monitor
from workbench.backends import cpu as cpu_backend
from workbench.backends.monitor import Unavailable
from workbench.backends.registry import BACKENDS, backend, monitor_all

from conftest import FAKES

GiB = 2**30


@pytest.fixture(autouse=True)
def fresh_monitor():
    monitor.clear_cache()
    yield
    monitor.clear_cache()


def _double(name: str, monkeypatch):
    """A fresh copy of the test double ``tests/fakes/<name>.py`` (its state starts empty)."""
    unique = f"{name}_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(unique, FAKES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, unique, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def hlml(monkeypatch):
    double = _double("pyhlml_double", monkeypatch)
    double.CARDS[:] = [
        double.Card(name=b"HL-225", aip_pct=37, mem_used=12 * GiB, mem_total=96 * GiB, power_mw=412_500,
                    temp_aip_c=41, temp_board_c=30),
        double.Card(name=b"HL-225", aip_pct=0, mem_used=1 * GiB, mem_total=96 * GiB, power_mw=97_000,
                    temp_aip_c=29, unsupported={"hlmlDeviceGetPowerUsage"}),
    ]
    monkeypatch.setitem(sys.modules, "pyhlml", double)
    return double


@pytest.fixture
def nvml(monkeypatch):
    double = _double("pynvml_double", monkeypatch)
    double.GPUS[:] = [
        double.Gpu(name="NVIDIA H100 80GB HBM3", gpu_pct=88, mem_used=70 * GiB, mem_total=80 * GiB,
                   power_mw=612_345, temp_c=67),
        double.Gpu(name="NVIDIA H100 80GB HBM3", gpu_pct=3, mem_used=GiB // 2, mem_total=80 * GiB,
                   power_mw=71_000, temp_c=35, unsupported={"nvmlDeviceGetTemperature"}),
    ]
    monkeypatch.setitem(sys.modules, "pynvml", double)
    return double


# ------------------------------------------------------------------- hpu
def test_hpu_reads_every_card_in_the_panels_units(hlml):
    cards = backend("hpu").monitoring.monitor()
    pool = chips.match("HL-225", "hpu").usable  # the allocator's Limit on a Gaudi 2, not the HBM
    # no "used": HLML's is nearly the whole HBM once a process holds the card (the panel takes
    # the holder's allocator figure from its run instead)
    assert cards == [
        {"kind": "hpu", "index": 0, "name": "HL-225", "util_pct": 37.0, "mem_used": None,
         "mem_total": pool, "power_w": 412.5, "temp_c": 41.0},  # mW -> W; the chip's own sensor
        {"kind": "hpu", "index": 1, "name": "HL-225", "util_pct": 0.0, "mem_used": None,
         "mem_total": pool, "power_w": None, "temp_c": 29.0},  # power not supported -> None
    ]
    assert pool < 96 * GiB and all(type(c["util_pct"]) is float for c in cards)


def test_hpu_starts_hlml_once_per_process(hlml):
    backend("hpu").monitoring.monitor()
    hlml.CARDS[0].aip_pct = 99
    assert backend("hpu").monitoring.monitor()[0]["util_pct"] == 99.0  # read again, not cached
    assert hlml.CALLS.count("hlmlInit") == 1


def test_hpu_reads_the_archived_releases_int_utilisation(hlml):
    hlml.UTILIZATION_AS_INT = True  # HabanaAI/pyhlml at 6bf4f63 returned .aip as an int
    assert [c["util_pct"] for c in backend("hpu").monitoring.monitor()] == [37.0, 0.0]


def test_hpu_without_a_driver_says_so_once(hlml, capsys):
    hlml.DRIVER_LOADED = False
    for _ in range(2):
        with pytest.raises(Unavailable) as e:
            backend("hpu").monitoring.monitor()
        assert e.value.why == ("HLML could not start: HLML Error with code 1 (Failed to load libhlml) "
                               "(no Gaudi driver here?)")
    assert hlml.CALLS.count("hlmlInit") == 1  # the failure is remembered, not retried every poll
    assert capsys.readouterr().out == ""  # pyhlml's print does not reach the server's output


def test_the_hlml_double_is_as_strict_as_pyhlml(hlml):
    with pytest.raises(AttributeError):  # pyhlml before hlmlInit: its module object is still None
        hlml.hlmlDeviceGetCount()
    hlml.hlmlInit()
    with pytest.raises(hlml.HLMLError_InvalidArgument):
        hlml.hlmlDeviceGetName(0)  # an int is not a handle
    with pytest.raises(hlml.HLMLError_InvalidArgument):
        hlml.hlmlDeviceGetHandleByIndex(2)  # two cards
    hlml.hlmlShutdown()
    with pytest.raises(hlml.HLMLError_Uninitialized):
        hlml.hlmlDeviceGetCount()


# ------------------------------------------------------------------- cuda
def test_cuda_reads_every_gpu_in_the_panels_units(nvml):
    assert backend("cuda").monitoring.monitor() == [
        {"kind": "cuda", "index": 0, "name": "NVIDIA H100 80GB HBM3", "util_pct": 88.0, "mem_used": 70 * GiB,
         "mem_total": 80 * GiB, "power_w": 612.345, "temp_c": 67.0},
        {"kind": "cuda", "index": 1, "name": "NVIDIA H100 80GB HBM3", "util_pct": 3.0, "mem_used": GiB // 2,
         "mem_total": 80 * GiB, "power_w": 71.0, "temp_c": None},  # no temperature sensor -> None
    ]
    backend("cuda").monitoring.monitor()
    assert nvml.CALLS.count("nvmlInit") == 1


def test_cuda_without_a_driver_names_nvmls_error(nvml):
    nvml.DRIVER_LOADED = False
    with pytest.raises(Unavailable, match=r"^NVML could not start: NVML Shared Library Not Found "
                                          r"\(no NVIDIA driver here\?\)$"):
        backend("cuda").monitoring.monitor()


def test_the_nvml_double_is_as_strict_as_pynvml(nvml):
    with pytest.raises(nvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetPowerUsage(0)
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(5)
    assert nvml.nvmlDeviceGetPowerUsage(nvml.nvmlDeviceGetHandleByIndex(0)) == 612_345  # milliwatts
    nvml.nvmlShutdown()
    with pytest.raises(nvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


# ------------------------------------------------------------------- the real libraries
@pytest.mark.parametrize("kind, library, driver", [("hpu", "HLML", "Gaudi"), ("cuda", "NVML", "NVIDIA")])
def test_the_installed_libraries_say_why_they_cannot_start(kind, library, driver):
    """pyhlml and pynvml as installed here: this machine has neither driver."""
    try:
        found = backend(kind).monitoring.monitor()
    except Unavailable as e:
        assert e.why.startswith(f"{library} could not start: ")
        assert e.why.endswith(f"(no {driver} driver here?)")
    else:  # a machine with the driver: the real library reads real devices
        assert found and {d["kind"] for d in found} == {kind}


@pytest.mark.parametrize("kind, module, fix", [
    ("hpu", "pyhlml", "habana-pyhlml not installed: pip install 'gaudi-workbench[gaudi]'"),
    ("cuda", "pynvml", "nvidia-ml-py not installed: pip install 'gaudi-workbench[cuda]'"),
])
def test_a_missing_library_names_the_extra_that_installs_it(kind, module, fix, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(Unavailable) as e:
        backend(kind).monitoring.monitor()
    assert e.value.why == fix


# ------------------------------------------------------------------- cpu and the table
def test_cpu_is_one_device_with_system_numbers():
    psutil.cpu_percent(interval=None)  # the utilisation is measured between two calls
    [cpu] = backend("cpu").monitoring.monitor()
    assert cpu["kind"] == "cpu" and cpu["index"] == 0 and cpu["name"] == cpu_backend.name()
    assert 0.0 <= cpu["util_pct"] <= 100.0
    assert cpu["mem_total"] == psutil.virtual_memory().total and 0 < cpu["mem_used"] < cpu["mem_total"]
    assert cpu["power_w"] is None
    assert cpu["temp_c"] is None or -40 < cpu["temp_c"] < 150


def test_an_unknown_kind_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown device 'tpu'; known: hpu, cuda, cpu"):
        backend("tpu").monitoring.monitor()


def test_monitor_all_reads_every_backend_of_the_table_and_notes_the_missing(hlml, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert BACKENDS["hpu"].monitoring.monitor is hpu.monitor
    snap = monitor_all()
    assert [d["kind"] for d in snap["devices"]] == ["hpu", "hpu", "cpu"]
    assert snap["notes"] == [{"kind": "cuda", "title": "NVIDIA GPU",
                              "why": "nvidia-ml-py not installed: pip install 'gaudi-workbench[cuda]'"}]
    assert isinstance(snap["time"], float)


def test_nvidia_cards_and_their_holders_come_from_nvmls_process_list(nvml):
    """NVML's running-process list names who uses each GPU (no CUDA context is made)."""
    nvml.GPUS[1].pids = [os.getpid()]
    cards = backend("cuda").monitoring.cards()
    assert [c.title for c in cards] == ["GPU 0", "GPU 1"] and cards[0].free
    me = pwd.getpwuid(os.getuid()).pw_name
    assert cards[1].describe() == f"GPU 1: held by pid {os.getpid()} ({me}), this process"
    assert cards[1].path == "/dev/nvidia1" and cards[1].total_memory == 80 * GiB
    assert backend("cuda").deploy.visible_env is None, "GPUs are shared: launches are not placed"


def test_gaudi_cards_carry_hlmls_module_ids(hlml, monkeypatch, tmp_path):
    hlml.CARDS[0].module_id, hlml.CARDS[1].module_id = 3, 1
    monkeypatch.setenv("WORKBENCH_HPU_DEVICE_FILES", str(tmp_path / "accel*"))
    cards = backend("hpu").monitoring.cards()
    assert [(c.title, c.free) for c in cards] == [("Gaudi 0 (module 3)", True),
                                                 ("Gaudi 1 (module 1)", True)]
    assert cards[0].path is None, "no device file: no holder can be read"
