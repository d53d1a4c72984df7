"""Device readings for the side panel: utilisation, memory, power and temperature, per device.

One reader for the NVML-shaped management libraries (HLML on Gaudi, NVML on NVIDIA), driven by
each backend's ``Vendor`` record; never torch (a panel polling every few seconds must not load
a framework nor touch a device in use). Each reading has the keys in ``FIELDS`` (None: not
reported); a reader that cannot run raises ``Unavailable`` with the reason and the fix.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import shutil
import subprocess
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FIELDS = ("kind", "index", "name", "util_pct", "mem_used", "mem_total", "power_w", "temp_c")

# module name -> (the module object started, or the Unavailable it raised): one start per process
_started: dict[str, tuple[Any, Any]] = {}


class Unavailable(RuntimeError):
    """A device kind cannot be read here; ``why`` says why and how to fix it."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def reading(
    kind: str,
    index: int,
    name: str,
    util_pct: float | None = None,
    mem_used: int | None = None,
    mem_total: int | None = None,
    power_w: float | None = None,
    temp_c: float | None = None,
) -> dict[str, Any]:
    """One device's reading as the panel receives it (floats, bytes as ints, None where unknown)."""

    def num(v, cast):
        return None if v is None else cast(v)

    return {
        "kind": kind,
        "index": int(index),
        "name": str(name),
        "util_pct": num(util_pct, float),
        "mem_used": num(mem_used, int),
        "mem_total": num(mem_total, int),
        "power_w": num(power_w, float),
        "temp_c": num(temp_c, float),
    }


def _text(value: Any) -> str:
    """A name from a management library: bytes (HLML, older NVML bindings) or str."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _optional(call: Callable[[], Any], error: type[BaseException]) -> Any:
    """``call()``, or None where the device does not support that metric (the library's error)."""
    try:
        return call()
    except error:
        return None


# --------------------------------------------------------------------------- libraries
def _start(v: Vendor) -> Any:
    """The vendor's management library, started once per process (and again only when a
    different module object is installed under that name, as tests do)."""
    module = v.module
    try:
        with warnings.catch_warnings():
            # pyhlml 1.24 imports its own deprecated module
            warnings.simplefilter("ignore", DeprecationWarning)
            lib = importlib.import_module(module)
    except ImportError:
        raise Unavailable(
            f"{v.package} not installed: pip install 'gaudi-workbench[{v.extra}]'"
        ) from None
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
        failure = Unavailable(
            f"{v.library} could not start: {e}{f' ({said})' if said else ''} "
            f"(no {v.driver} driver here?)"
        )
        _started[module] = (lib, failure)
        raise failure from None
    _started[module] = (lib, None)
    return lib


def clear_cache() -> None:
    """Forget which management libraries were started (tests that swap them)."""
    _started.clear()


# --------------------------------------------------------------------------- hpu, cuda
@dataclass(frozen=True, kw_only=True)
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
    driver_call: str  # the library's function that returns the driver's version
    module_call: str | None = None  # per handle: the module id (HLML; NVML has none)
    minor_call: str | None = None  # per handle: the device file's minor number
    processes_call: str | None = None  # per handle: the processes using it (NVML's list)


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
        util, memory = call("GetUtilizationRates", h), call("GetMemoryInfo", h)
        power = call("GetPowerUsage", h)
        out.append(
            reading(
                v.kind,
                i,
                _text(call("GetName", h) or v.fallback_name),
                # habana-pyhlml 1.24 returns the c_hlml_utilization struct (percent in .aip);
                # the archived GitHub release (6bf4f63) returned that field as an int
                util_pct=util if isinstance(util, int) else getattr(util, v.util_field, None),
                mem_used=getattr(memory, "used", None),
                mem_total=getattr(memory, "total", None),
                power_w=None if power is None else power / 1000,
                temp_c=call("GetTemperature", h, v.sensor),
            )
        )
    return out


def inventory(v: Vendor) -> list[dict[str, Any]]:
    """Every device the library lists, as the probe needs it and without taking any: index,
    name, memory total (bytes), module id and device-file minor number (None where the
    library or the device does not say), and the pids the library says use it (NVML)."""
    lib = _start(v)
    error = getattr(lib, v.error)

    def call(name: str | None, h):
        if name is None:
            return None
        return _optional(lambda: getattr(lib, name)(h), error)

    try:
        count = getattr(lib, f"{v.prefix}DeviceGetCount")()
        handles = [getattr(lib, f"{v.prefix}DeviceGetHandleByIndex")(i) for i in range(count)]
    except error as e:
        raise Unavailable(f"{v.library} started but could not list the {v.what}: {e}") from None
    out = []
    for i, h in enumerate(handles):
        memory = call(f"{v.prefix}DeviceGetMemoryInfo", h)
        out.append(
            {
                "index": i,
                "name": _text(call(f"{v.prefix}DeviceGetName", h) or v.fallback_name),
                "total": int(getattr(memory, "total", 0) or 0),
                "module": call(v.module_call, h),
                "minor": call(v.minor_call, h),
                "pids": [int(p.pid) for p in call(v.processes_call, h) or []],
            }
        )
    return out


def driver_from_tool(command: tuple[str, ...], v: Vendor) -> tuple[str | None, str]:
    """(driver version or None, where it was read or why not): the vendor's command-line tool
    when it is on PATH, else the management library."""
    if shutil.which(command[0]):
        try:
            out = subprocess.run(list(command), capture_output=True, text=True, timeout=20)
            first = out.stdout.split("\n")[0].strip()
            if first:
                return first, command[0]
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        lib = _start(v)
    except Unavailable as e:
        return None, f"not read: no {command[0]} on PATH, {v.module}: {e.why}"
    try:
        return _text(getattr(lib, v.driver_call)()), v.module
    except Exception as e:  # a library without that call, or a driver that does not answer
        return None, f"not read: no {command[0]} on PATH, {v.module} failed ({e})"
