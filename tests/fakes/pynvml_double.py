"""TEST DOUBLE of ``pynvml`` (PyPI ``nvidia-ml-py``), NVIDIA's Python binding of NVML.

Not NVIDIA's software: it implements only the functions ``workbench.backends.monitor`` calls, with
the types, units and errors of nvidia-ml-py 13.615.71 (the version constraints.txt pins;
its ``pynvml.py``, cited as ``pynvml.py:N``) and of the NVML API reference
(https://docs.nvidia.com/deploy/nvml-api/, "Device Queries" and "Initialization and
Cleanup"): every query returns NVML_ERROR_UNINITIALIZED before ``nvmlInit``,
NVML_ERROR_INVALID_ARGUMENT for a bad index or handle, NVML_ERROR_NOT_SUPPORTED where
the device lacks the feature; power is in milliwatts, memory in bytes, utilisation in
percent over the last sample period, temperature in degrees Celsius.

A test loads a fresh copy, sets ``GPUS`` (and ``DRIVER_LOADED``) and installs it with
``monkeypatch.setitem(sys.modules, "pynvml", double)``. Test hooks (not pynvml API):
``Gpu``, ``GPUS``, ``DRIVER_LOADED``, ``CALLS``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

# ---------------------------------------------------------------- test hooks
DRIVER_LOADED = True  # False: libnvidia-ml.so.1 cannot be loaded (no NVIDIA driver)
CALLS: list[str] = []


@dataclass
class Gpu:
    """One GPU as NVML would report it; a function name in ``unsupported`` makes that call
    fail with NVML_ERROR_NOT_SUPPORTED (e.g. ``{"nvmlDeviceGetPowerUsage"}``)."""

    name: str = "NVIDIA H100 80GB HBM3"
    gpu_pct: int = 0
    memory_pct: int = 0
    mem_used: int = 0  # bytes
    mem_total: int = 80 * 2**30
    power_mw: int = 0  # milliwatts
    temp_c: int = 0
    pids: list[int] = field(default_factory=list)  # processes running compute work on it
    unsupported: set[str] = field(default_factory=set)


GPUS: list[Gpu] = []

# ---------------------------------------------------------------- constants (pynvml.py:82, :224-235)
NVML_TEMPERATURE_GPU = 0
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12


# ---------------------------------------------------------------- errors (pynvml.py:1037-1112)
class NVMLError(Exception):
    """``NVMLError(value)`` becomes the code's subclass (``NVMLError_NotSupported``, ...);
    ``.value`` is the code, ``str()`` its description."""

    _by_code: dict[int, type] = {}
    _text = {NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
             NVML_ERROR_NOT_SUPPORTED: "Not Supported",
             NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found"}

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value=None):
        super().__init__(self.value)

    def __str__(self):
        return NVMLError._text.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, code: int) -> type:
    cls = type(f"NVMLError_{name}", (NVMLError,), {})
    NVMLError._by_code[code] = cls
    return cls


NVMLError_Uninitialized = _error_class("Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_LibraryNotFound = _error_class("LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)


# ---------------------------------------------------------------- structs and handles
class c_nvmlUtilization_t(ctypes.Structure):
    """pynvml.py:1500: percent of the last sample period."""

    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class c_nvmlMemory_t(ctypes.Structure):
    """pynvml.py:1386: bytes."""

    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class struct_c_nvmlDevice_t(ctypes.Structure):
    """pynvml.py:1273: the opaque device struct; a handle is a pointer to one (pynvml.py:1275)."""

    _fields_ = [("index", ctypes.c_uint)]  # the double's own content: NVML's struct is opaque


c_nvmlDevice_t = ctypes.POINTER(struct_c_nvmlDevice_t)

_loaded = False  # pynvml.py:917 nvmlLib: loaded by the first nvmlInit, never unloaded
_refcount = 0  # pynvml.py:919: nvmlInit adds one, nvmlShutdown takes one; NVML runs while > 0


def _check(name: str) -> None:
    CALLS.append(name)
    if not _loaded:  # pynvml.py:1121 _nvmlGetFunctionPointer: no library yet
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if _refcount == 0:  # the library's own answer once shut down (API reference)
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _gpu(name: str, handle) -> Gpu:
    _check(name)
    if not isinstance(handle, c_nvmlDevice_t) or not handle or not 0 <= handle.contents.index < len(GPUS):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = GPUS[handle.contents.index]
    if name in gpu.unsupported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu


# ---------------------------------------------------------------- API
def nvmlInit() -> None:
    """pynvml.py:3161 -> nvmlInitWithFlags(0): load the library (LibraryNotFound if it cannot), init."""
    global _loaded, _refcount
    CALLS.append("nvmlInit")
    if not DRIVER_LOADED:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)  # pynvml.py:3165 _LoadNvmlLibrary
    _loaded = True
    _refcount += 1


def nvmlShutdown() -> None:
    """pynvml.py:3199: the library stays loaded; the count of inits drops by one."""
    global _refcount
    _check("nvmlShutdown")
    _refcount -= 1


def nvmlDeviceGetCount() -> int:
    """pynvml.py:3372."""
    _check("nvmlDeviceGetCount")
    return len(GPUS)


def nvmlDeviceGetHandleByIndex(index: int):
    """pynvml.py:3379: a ``c_nvmlDevice_t``; valid indexes are below the count (API reference)."""
    _check("nvmlDeviceGetHandleByIndex")
    if not isinstance(index, int) or not 0 <= index < len(GPUS):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return ctypes.pointer(struct_c_nvmlDevice_t(index))


def nvmlDeviceGetName(handle) -> str:
    """pynvml.py:3431: str (the ``convertStrBytes`` decorator decodes the C bytes)."""
    return _gpu("nvmlDeviceGetName", handle).name


def nvmlDeviceGetUtilizationRates(handle) -> c_nvmlUtilization_t:
    """pynvml.py:4079."""
    gpu = _gpu("nvmlDeviceGetUtilizationRates", handle)
    return c_nvmlUtilization_t(gpu=gpu.gpu_pct, memory=gpu.memory_pct)


def nvmlDeviceGetMemoryInfo(handle, version=None) -> c_nvmlMemory_t:
    """pynvml.py:3993 (the v1 struct; ``version`` selects v2, which the monitor never asks for)."""
    gpu = _gpu("nvmlDeviceGetMemoryInfo", handle)
    if version:
        raise NotImplementedError("the double has only the v1 memory struct")
    return c_nvmlMemory_t(total=gpu.mem_total, free=gpu.mem_total - gpu.mem_used, used=gpu.mem_used)


def nvmlDeviceGetPowerUsage(handle) -> int:
    """pynvml.py:3962: milliwatts (API reference: "power usage ... in milliwatts")."""
    return _gpu("nvmlDeviceGetPowerUsage", handle).power_mw


def nvmlDeviceGetTemperature(handle, sensor) -> int:
    """pynvml.py:3876: Celsius; NVML_TEMPERATURE_GPU is the only sensor NVML defines here."""
    gpu = _gpu("nvmlDeviceGetTemperature", handle)
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpu.temp_c


def nvmlDeviceGetMinorNumber(handle) -> int:
    """pynvml.py:3580: the minor of /dev/nvidia<N> (the double: the index)."""
    _gpu("nvmlDeviceGetMinorNumber", handle)
    return handle.contents.index


class _ProcessInfo:
    """pynvml.py:4193 nvmlStructToFriendlyObject(c_nvmlProcessInfo_v3_t): ``.pid``,
    ``.usedGpuMemory`` (None where not available), ``.gpuInstanceId``, ``.computeInstanceId``."""

    def __init__(self, pid: int):
        self.pid, self.usedGpuMemory = pid, None
        self.gpuInstanceId = self.computeInstanceId = 0xFFFFFFFF


def nvmlDeviceGetComputeRunningProcesses(handle) -> list:
    """pynvml.py:4228 (-> _v3, :4193): the processes with a compute context on the GPU; an
    empty list when there are none."""
    return [_ProcessInfo(pid) for pid in _gpu("nvmlDeviceGetComputeRunningProcesses", handle).pids]
