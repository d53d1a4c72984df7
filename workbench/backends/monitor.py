"""Device readings for the side panel: utilisation, memory, power and temperature, per device.

One small reader per backend kind, each through the vendor's management library, never
through torch (a panel that polls every few seconds must not load a framework, nor touch
a device a training process is using): HLML (``pyhlml``, PyPI ``habana-pyhlml``) on
Gaudi, NVML (``pynvml``, PyPI ``nvidia-ml-py``) on NVIDIA GPUs, psutil on the CPU.

Each reader returns one dict per device with the keys in ``FIELDS``; a metric a device
does not report is None. A reader that cannot run here raises ``Unavailable`` with the
reason and the fix. The management libraries are started once per process (starting
one loads a driver library), the first time a reader needs them.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import platform
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FIELDS = ("kind", "index", "name", "util_pct", "mem_used", "mem_total", "power_w", "temp_c")
HLML_TEMPERATURE_ON_AIP = 0  # the chip's own sensor: pyhlml_types_generated.py HLML_TEMPERATURE_SENSORS
NVML_TEMPERATURE_GPU = 0  # the GPU die: nvidia-ml-py pynvml.py NVML_TEMPERATURE_GPU

# module name -> (the module object started, or the Unavailable it raised): one start per process
_started: dict[str, tuple[Any, Any]] = {}


class Unavailable(RuntimeError):
    """A device kind cannot be read here; ``why`` says why and how to fix it."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def reading(kind: str, index: int, name: str, util_pct: float | None = None, mem_used: int | None = None,
            mem_total: int | None = None, power_w: float | None = None, temp_c: float | None = None) -> dict[str, Any]:
    """One device's reading as the panel receives it (floats, bytes as ints, None where unknown)."""
    def num(v, cast):
        return None if v is None else cast(v)

    return {"kind": kind, "index": int(index), "name": str(name), "util_pct": num(util_pct, float),
            "mem_used": num(mem_used, int), "mem_total": num(mem_total, int),
            "power_w": num(power_w, float), "temp_c": num(temp_c, float)}


def _text(value: Any) -> str:
    """A name from a management library: bytes (HLML, older NVML bindings) or str."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _optional(call: Callable[[], Any], error: type[BaseException]) -> Any:
    """``call()``, or None where the device does not support that metric (the library's error)."""
    try:
        return call()
    except error:
        return None


# --------------------------------------------------------------------------- cpu
def cpu_name(index: int = 0) -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "cpu"


def _cpu_temperature() -> float | None:
    """The package temperature where the OS exposes one (psutil: Linux and FreeBSD only)."""
    import psutil

    try:
        sensors = psutil.sensors_temperatures()
    except (AttributeError, OSError):  # no such function on this platform, or no /sys access
        return None
    for chip in ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "acpitz"):
        if sensors.get(chip):
            return float(sensors[chip][0].current)  # coretemp's first entry is the whole package
    return None


def read_cpu() -> list[dict[str, Any]]:
    """The CPU as one device: system-wide utilisation since the previous call, system memory."""
    import psutil

    memory = psutil.virtual_memory()
    # interval=None: the utilisation since the last call, without blocking (0.0 on the first)
    return [reading("cpu", 0, cpu_name(), util_pct=psutil.cpu_percent(interval=None),
                    mem_used=memory.used, mem_total=memory.total, temp_c=_cpu_temperature())]


# --------------------------------------------------------------------------- libraries
def _start(v: Vendor) -> Any:
    """The vendor's management library, started once per process (and again only when a
    different module object is installed under that name, as tests do)."""
    module = v.module
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # pyhlml 1.24 imports its own deprecated module
            lib = importlib.import_module(module)
    except ImportError:
        raise Unavailable(f"{v.package} not installed: pip install 'gaudi-workbench[{v.extra}]'") from None
    cached = _started.get(module)
    if cached is not None and cached[0] is lib:
        if isinstance(cached[1], Unavailable):
            raise cached[1]
        return lib
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):  # pyhlml prints "Failed to load libhlml"
            getattr(lib, f"{v.prefix}Init")()
    except (getattr(lib, v.error), OSError) as e:  # OSError: a driver library that would not load
        said = printed.getvalue().strip()
        failure = Unavailable(f"{v.library} could not start: {e}{f' ({said})' if said else ''} "
                              f"(no {v.driver} driver here?)")
        _started[module] = (lib, failure)
        raise failure from None
    _started[module] = (lib, None)
    return lib


def clear_cache() -> None:
    """Forget which management libraries were started (tests that swap them)."""
    _started.clear()


# --------------------------------------------------------------------------- hpu, cuda
@dataclass(frozen=True)
class Vendor:
    """A management library that mirrors NVML's API (HLML is NVML's counterpart for Gaudi):
    ``<prefix>Init``, ``<prefix>DeviceGetCount``, ``<prefix>DeviceGetHandleByIndex``, and per
    handle ``GetName``, ``GetUtilizationRates``, ``GetMemoryInfo``, ``GetPowerUsage``
    (milliwatts) and ``GetTemperature(handle, sensor)``."""

    kind: str
    module: str
    package: str  # on PyPI
    extra: str  # gaudi-workbench's extra that installs it
    library: str
    driver: str
    prefix: str
    error: str  # the library's exception class
    util_field: str  # the utilisation struct's percent field
    sensor: int  # the temperature sensor asked for
    what: str  # the devices, in a message
    fallback_name: str


VENDORS = {
    "hpu": Vendor("hpu", "pyhlml", "pyhlml", "gaudi", "HLML", "Gaudi", "hlml", "HLMLError", "aip",
                  HLML_TEMPERATURE_ON_AIP, "Gaudi cards", "Gaudi"),
    "cuda": Vendor("cuda", "pynvml", "nvidia-ml-py", "cuda", "NVML", "NVIDIA", "nvml", "NVMLError", "gpu",
                   NVML_TEMPERATURE_GPU, "GPUs", "NVIDIA GPU"),
}


def read_vendor(v: Vendor) -> list[dict[str, Any]]:
    """Every device the library sees (all of them: NVML ignores CUDA_VISIBLE_DEVICES, HLML
    lists every card, not only this process's one)."""
    lib = _start(v)
    error = getattr(lib, v.error)

    def call(name: str, *args):  # None where the device does not support that metric
        return _optional(lambda: getattr(lib, f"{v.prefix}Device{name}")(*args), error)

    try:
        count = getattr(lib, f"{v.prefix}DeviceGetCount")()
        handles = [getattr(lib, f"{v.prefix}DeviceGetHandleByIndex")(i) for i in range(count)]
    except error as e:
        raise Unavailable(f"{v.library} started but could not list the {v.what}: {e}") from None
    out = []
    for i, h in enumerate(handles):
        util, memory, power = call("GetUtilizationRates", h), call("GetMemoryInfo", h), call("GetPowerUsage", h)
        out.append(reading(
            v.kind, i, _text(call("GetName", h) or v.fallback_name),
            # habana-pyhlml 1.24 returns the c_hlml_utilization struct (percent in .aip);
            # the archived GitHub release (6bf4f63) returned that field as an int
            util_pct=util if isinstance(util, int) else getattr(util, v.util_field, None),
            mem_used=getattr(memory, "used", None), mem_total=getattr(memory, "total", None),
            power_w=None if power is None else power / 1000,
            temp_c=call("GetTemperature", h, v.sensor)))
    return out


def read_hpu() -> list[dict[str, Any]]:
    """Every Gaudi card, through HLML."""
    return read_vendor(VENDORS["hpu"])


def read_cuda() -> list[dict[str, Any]]:
    """Every NVIDIA GPU, through NVML."""
    return read_vendor(VENDORS["cuda"])


READERS: dict[str, Callable[[], list[dict[str, Any]]]] = {"hpu": read_hpu, "cuda": read_cuda, "cpu": read_cpu}


def read(kind: str) -> list[dict[str, Any]]:
    """The current reading of every device of ``kind`` (``"hpu"``, ``"cuda"`` or ``"cpu"``).

    Returns
    -------
    list of dict
        One dict per device with the keys ``kind``, ``index``, ``name``, ``util_pct``
        (percent), ``mem_used`` and ``mem_total`` (bytes), ``power_w`` (watts) and
        ``temp_c`` (degrees Celsius); a metric the device does not report is None.

    Raises
    ------
    Unavailable
        The kind cannot be read here (library not installed, no driver); ``.why`` says
        why and how to fix it.
    """
    try:
        reader = READERS[kind]
    except KeyError:
        raise ValueError(f"unknown device {kind!r}; known: {', '.join(READERS)}") from None
    return reader()
