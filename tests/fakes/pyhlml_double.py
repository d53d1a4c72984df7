"""TEST DOUBLE of ``pyhlml`` (PyPI ``habana-pyhlml``), Intel's Python binding of HLML.

Not Intel's software: it implements only the functions ``workbench.backends.monitor`` calls, with
the types, units and errors of habana-pyhlml 1.24.2.481 (the version constraints.txt
pins; its ``pyhlml/main.py``, ``hlml_lib.py``, ``hlml_error.py`` and
``pyhlml_types_generated.py``, cited by line below as ``main.py:N``). The archived GitHub
repository HabanaAI/pyhlml (last commit 6bf4f6310c37, 2025-02-03) differs in one place the
monitor reads: its ``hlmlDeviceGetUtilizationRates`` returned the percentage as an int
(``UTILIZATION_AS_INT`` switches the double to that). Return codes follow Habana's HLML C
API reference (docs.habana.ai, "HLML C API": ``hlml_return_t``); exception classes its
"Python APIs" page (one ``HLMLError_<Name>`` subclass per code).

A test loads a fresh copy, sets ``CARDS`` (and ``DRIVER_LOADED``) and installs it with
``monkeypatch.setitem(sys.modules, "pyhlml", double)``. Test hooks (not pyhlml API):
``Card``, ``CARDS``, ``DRIVER_LOADED``, ``UTILIZATION_AS_INT``, ``CALLS``, ``PRODUCTS``,
``emulate()`` (the cards of the emulated node; the package ``tests/fakes/pyhlml`` installs
the double under its real name with them, for subprocesses and the ``fake_hpu`` fixture).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

# ---------------------------------------------------------------- test hooks
DRIVER_LOADED = True  # False: libhlml.so cannot be loaded (no Gaudi driver on the machine)
UTILIZATION_AS_INT = False  # True: the archived GitHub release's return type
CALLS: list[str] = []  # every API function called, in order


@dataclass
class Card:
    """One Gaudi card as HLML would report it; a name in ``unsupported`` makes that call fail
    with HLML_ERROR_NOT_SUPPORTED (e.g. ``{"hlmlDeviceGetPowerUsage"}``)."""

    name: bytes = b"HL-225"
    aip_pct: int = 0  # percent over the past second
    memory_pct: int = 0
    mem_used: int = 0  # bytes
    mem_total: int = 96 * 2**30
    power_mw: int = 0  # milliwatts
    temp_aip_c: int = 0  # Celsius, sensor HLML_TEMPERATURE_ON_AIP
    temp_board_c: int = 0  # Celsius, sensor HLML_TEMPERATURE_ON_BOARD
    device_file: str | None = None  # emulated node: used = nearly the HBM while it is held
    module_id: int | None = None  # the module id; None: the card's index
    minor: int | None = None  # /dev/accel/accel<minor>; None: the card's index
    unsupported: set[str] = field(default_factory=set)


CARDS: list[Card] = []

# The product name HLML reports per generation (Intel's product names: HL-205 is the first
# Gaudi's mezzanine card, HL-225 the Gaudi 2 OAM, HL-325L the Gaudi 3 OAM).
PRODUCTS = {"1": b"HL-205", "2": b"HL-225", "3": b"HL-325L"}


# HBM per generation (Intel's product briefs: 32, 96 and 128 GB), what HLML's total reports;
# the allocator's pool (the bridge double's memory_stats "Limit") is smaller.
HBM = {"1": 32 * 2**30, "2": 96 * 2**30, "3": 128 * 2**30}
# What HLML's "used" shows once a process holds a card: nearly the whole HBM, because the
# bridge reserves its pool when it acquires the device (shared/HPU_FACTS.md, "What changed
# after 1.19"; Intel's docs say hl-smi memory does not reflect tensor allocations). The
# double leaves 512 MiB of the HBM unreserved: the exact figure is not published.
UNRESERVED = 512 * 2**20


def _held(path: str) -> bool:
    """Whether a process holds the emulated card whose device file is ``path`` (the bridge
    double's ``_card.py`` keeps an exclusive flock on it for the holder's life)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops this probe's own shared lock


def emulate() -> None:
    """Fill ``CARDS`` with the emulated node of the bridge double (``tests/fakes/
    habana_frameworks``): ``FAKE_HPU_COUNT`` cards (default 8) of ``FAKE_HPU_GENERATION``
    (default 2) with the generation's HBM each; each card's module id, minor and device file
    ``accel<minor>`` by the node's layout (``FAKE_HPU_LAYOUT``, ``habana_frameworks/_layout.py``:
    by default card i is module i and accel{i}; a container given some modules,
    ``FAKE_HPU_MODULES``, sees only those); a card's "used" memory is nearly its HBM while a
    process holds it."""
    from habana_frameworks._layout import cards, dev_dir

    gen = os.environ.get("FAKE_HPU_GENERATION", "2")
    CARDS[:] = [Card(name=PRODUCTS.get(gen, b"HL-225"), mem_total=HBM.get(gen, HBM["2"]),
                     device_file=os.path.join(dev_dir(), f"accel{minor}"), module_id=module,
                     minor=minor)
                for _, minor, module in cards()]


# ---------------------------------------------------------------- errors (hlml_error.py)
class HLMLError(Exception):
    """hlml_error.py: ``HLMLError(value)`` maps the code to its subclass; ``.value`` is the
    code; ``str()`` is "HLML Error with code N"."""

    _by_code: dict[int, type] = {}

    def __new__(cls, value):
        if cls is HLMLError:
            cls = HLMLError._by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value=None):
        super().__init__(self.value)

    def __str__(self):
        return f"HLML Error with code {self.value}"


def _error_class(name: str, code: int) -> type:
    cls = type(f"HLMLError_{name}", (HLMLError,), {})
    HLMLError._by_code[code] = cls
    return cls


# hlml_return_t codes (HLML C API reference; pyhlml_types_generated.py HLML_RETURN)
HLML_SUCCESS, HLML_ERROR_UNINITIALIZED, HLML_ERROR_INVALID_ARGUMENT, HLML_ERROR_NOT_SUPPORTED = 0, 1, 2, 3
HLMLError_Uninitialized = _error_class("Uninitialized", HLML_ERROR_UNINITIALIZED)
HLMLError_InvalidArgument = _error_class("InvalidArgument", HLML_ERROR_INVALID_ARGUMENT)
HLMLError_NotSupported = _error_class("NotSupported", HLML_ERROR_NOT_SUPPORTED)


# ---------------------------------------------------------------- structs (pyhlml_types_generated.py)
class c_hlml_utilization(ctypes.Structure):
    """pyhlml_types_generated.py: percentages over the past second."""

    _fields_ = [("aip", ctypes.c_uint), ("memory", ctypes.c_uint)]


class c_hlml_memory(ctypes.Structure):
    """pyhlml_types_generated.py; main.py hlmlDeviceGetMemoryInfo: "total, used, and free memory in bytes"."""

    _fields_ = [("free", ctypes.c_ulonglong), ("total", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


# ---------------------------------------------------------------- the library's state
class _Lib:
    """hlml_lib.py LibHLML: the loaded libhlml.so; ``initialized`` is the C library's own state."""

    def __init__(self):
        if not DRIVER_LOADED:
            # hlml_lib.py _load_lib: CDLL fails -> prints this line and raises Uninitialized
            print("Failed to load libhlml")
            raise HLMLError(HLML_ERROR_UNINITIALIZED)
        self.initialized = False
        self.ref_count = 0
        self.handles: dict[int, int] = {}  # handle address -> card index


_hlmlOBJ: _Lib | None = None  # main.py:11: None until hlmlInit loads the library


def _lib(name: str) -> _Lib:
    """What every API function does first (main.py: ``_hlmlOBJ.get_func_ptr(...)``)."""
    CALLS.append(name)
    if _hlmlOBJ is None:  # before any hlmlInit the module object is None: main.py raises this
        raise AttributeError("'NoneType' object has no attribute 'get_func_ptr'")
    if not _hlmlOBJ.initialized:  # loaded, but hlml_init not called or hlml_shutdown called
        raise HLMLError(HLML_ERROR_UNINITIALIZED)
    return _hlmlOBJ


def _card(name: str, device) -> Card:
    """The card behind a handle; anything but a handle this library returned is refused."""
    lib = _lib(name)
    # main.py: handles are HLML_DEVICE.TYPE, i.e. ctypes.c_void_p (hlml_types.py HLML_DEVICE)
    if not isinstance(device, ctypes.c_void_p) or device.value not in lib.handles:
        raise HLMLError(HLML_ERROR_INVALID_ARGUMENT)
    card = CARDS[lib.handles[device.value]]
    if name in card.unsupported:
        raise HLMLError(HLML_ERROR_NOT_SUPPORTED)
    return card


# ---------------------------------------------------------------- API (main.py)
def hlmlInit() -> None:
    """main.py:24: loads the library (a failure raises from LibHLML), then hlml_init."""
    global _hlmlOBJ
    CALLS.append("hlmlInit")
    _hlmlOBJ = _Lib()  # _wrapperInit: a new LibHLML every call
    _hlmlOBJ.initialized = True
    _hlmlOBJ.ref_count += 1


def hlmlShutdown() -> None:
    """main.py:51: hlml_shutdown; the library object stays (later calls: Uninitialized)."""
    lib = _lib("hlmlShutdown")
    lib.initialized = False
    lib.ref_count = 0


def hlmlDeviceGetCount() -> int:
    """main.py:63: number of Habana devices in the system."""
    _lib("hlmlDeviceGetCount")
    return len(CARDS)


def hlmlDeviceGetHandleByIndex(index: int) -> ctypes.c_void_p:
    """main.py:95: a ``ctypes.c_void_p`` handle; an index past the count is an invalid argument."""
    lib = _lib("hlmlDeviceGetHandleByIndex")
    if not isinstance(index, int) or not 0 <= index < len(CARDS):
        raise HLMLError(HLML_ERROR_INVALID_ARGUMENT)
    address = 0x1000 + 0x100 * index
    lib.handles[address] = index
    return ctypes.c_void_p(address)


def hlmlDeviceGetName(device) -> bytes:
    """main.py:127: the name as bytes (``create_string_buffer(...).value``)."""
    return bytes(_card("hlmlDeviceGetName", device).name)


def hlmlDeviceGetUtilizationRates(device):
    """main.py:216: ``c_hlml_utilization`` (percent in ``.aip``); an int at GitHub 6bf4f63."""
    card = _card("hlmlDeviceGetUtilizationRates", device)
    if UTILIZATION_AS_INT:
        return card.aip_pct
    return c_hlml_utilization(aip=card.aip_pct, memory=card.memory_pct)


def hlmlDeviceGetMemoryInfo(device) -> c_hlml_memory:
    """main.py:248: ``c_hlml_memory`` in bytes."""
    card = _card("hlmlDeviceGetMemoryInfo", device)
    used = card.mem_used
    if card.device_file is not None and _held(card.device_file):
        used = card.mem_total - UNRESERVED
    return c_hlml_memory(free=card.mem_total - used, total=card.mem_total, used=used)


def hlmlDeviceGetTemperature(device, sensor_type) -> int:
    """main.py:264: Celsius of sensor 0 (HLML_TEMPERATURE_ON_AIP) or 1 (ON_BOARD); the
    generated enum has more sensors, which these cards do not report."""
    card = _card("hlmlDeviceGetTemperature", device)
    if sensor_type == 0:
        return card.temp_aip_c
    if sensor_type == 1:
        return card.temp_board_c
    if isinstance(sensor_type, int) and 2 <= sensor_type <= 5:
        raise HLMLError(HLML_ERROR_NOT_SUPPORTED)
    raise HLMLError(HLML_ERROR_INVALID_ARGUMENT)


def hlmlDeviceGetPowerUsage(device) -> int:
    """main.py:351: "power usage for the device in mW" (an int)."""
    return _card("hlmlDeviceGetPowerUsage", device).power_mw


def hlmlDeviceGetMinorNumber(device) -> int:
    """main.py:474: the minor number ("maps to device node file at /sys/class/accel/accel[minor]")."""
    card = _card("hlmlDeviceGetMinorNumber", device)
    return _hlmlOBJ.handles[device.value] if card.minor is None else card.minor


def hlmlDeviceGetModuleID(device) -> int:
    """main.py:625: the module id configured on the device (HABANA_VISIBLE_MODULES' numbers)."""
    card = _card("hlmlDeviceGetModuleID", device)
    return _hlmlOBJ.handles[device.value] if card.module_id is None else card.module_id
