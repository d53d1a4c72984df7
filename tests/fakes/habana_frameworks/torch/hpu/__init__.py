"""TEST DOUBLE of ``torch.hpu`` (habana_frameworks/torch/hpu): devices, memory, random, graphs.

Sources: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpu/__init__.py,
hpu/_utils.py, hpu/memory.py, hpu/random.py @ 5a56187, and the device guard
backend/habana_device/HPUGuardImpl.h @ 5a56187. Nothing here holds a tensor: the double
emulates the device with a C++ extension (``habana_frameworks/torch/_device``): HPU tensors
whose storage is host memory (see tests/fakes/README.md).
"""

import os
import warnings

import torch

from habana_frameworks import _counts, _device, _release
from habana_frameworks.torch import _card
from habana_frameworks.torch.utils.internal import is_lazy

from .metrics import (  # noqa: F401  (hpu/__init__.py: from .metrics import *)
    MetricNotFound,
    metric_global,
    metric_localcontext,
    metrics_dump,
)
from .random import (  # noqa: F401
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (  # noqa: F401  (hpu/__init__.py: from .streams import *)
    Event,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

# HPU graphs: 1.19 exports them only in lazy mode (`if is_lazy(): from .graphs import *` in
# hpu/__init__.py @ 5a56187): in eager mode `from ...hpu import wrap_in_hpu_graph` fails.
# Current bridges import them in every mode (`from .graphs import *`, hpu/__init__.py
# @ ea38cef) and refuse the capture itself outside lazy mode (graphs.py, see there).
if is_lazy() or _release.current():
    from .graphs import HPUGraph, graph, wrap_in_hpu_graph  # noqa: F401

_GiB = 1024**3
HABANA_VISIBLE_MODULES_VAR = "HABANA_VISIBLE_MODULES"
HLS_MODULE_ID_VAR = "HLS_MODULE_ID"
CALLS: list[str] = []
# the allocator's counters without the device (see below), as the pool allocator keeps them
# (synapse_helpers MemoryStats, backend/synapse_helpers/device_mem_stats.h @ 5a56187)
_state = {"in_use": 0, "max_in_use": 0, "num_allocs": 0, "num_frees": 0, "max_alloc": 0,
          "total_allocs": 0, "total_frees": 0}
# The emulated device is loaded with the bridge (its plugin library). FAKE_HPU_DEVICE=0 (test
# hook) leaves it out: the pytest process itself must not get an "hpu" accelerator, so tests
# there see the Python API only, and any HPU tensor fails as on a CPU build of torch.
# The allocator's pool ("Limit") is smaller than the card's HBM (which HLML reports): about
# 94.6 GiB on a Gaudi 2 and 29.9 GiB on a first Gaudi, as the bridge logs them
# (shared/HPU_FACTS.md). Gaudi 3's is not published: the double assumes 126 GiB of 128.
# FAKE_HPU_MEMORY overrides it.
_LIMITS = {"1": int(29.9 * _GiB), "2": int(94.6 * _GiB), "3": 126 * _GiB}


def _limit() -> int:
    gen = os.environ.get("FAKE_HPU_GENERATION", "2")
    return int(os.environ.get("FAKE_HPU_MEMORY") or _LIMITS.get(gen, _LIMITS["2"]))


_ext = _device.load() if os.environ.get("FAKE_HPU_DEVICE", "1") != "0" else None
if _ext is not None:
    os.environ.setdefault("FAKE_HPU_MEMORY", str(_limit()))  # the extension reads the variable
    _ext.set_bridge_loaded(True)
    _counts.configure(_ext, is_lazy())  # the metrics' counts (habana_frameworks/_counts.py)


def _count() -> int:
    return _card.count()  # the cards this process sees (a container's, _layout.py)


def _get_device_index(device=None, optional: bool = False) -> int:
    """An int from a device, string or int; ``"hpu"`` / None: the current device (hpu/_utils.py)."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "hpu":
            raise ValueError(f"Expected a hpu device, but got: {device}")
        device = device.index
    if device is None:
        if not optional:
            raise ValueError("Expected a torch.device with a specified index or an integer")
        return current_device()
    return int(device)


def _check_index(device) -> int:
    """The memory and name APIs accept any index below device_count() (memory.py @ 5a56187)."""
    index = _get_device_index(device, optional=True)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    return index


def _guard(device) -> int:
    """What the device guard does when a tensor op runs on ``device``.

    HABANAGuardImpl::exchangeDevice fails for any index other than 0: each process drives
    one device, chosen through HLS_MODULE_ID (backend/habana_device/HPUGuardImpl.h @ 5a56187;
    its deviceCount() is 1).
    """
    index = _get_device_index(device, optional=True)
    if index != 0:
        raise RuntimeError(f"habana active device: {index} != 0")
    return index


_initialized = False


def init() -> None:
    """Acquire this process's card (``_lazy_init`` -> ``_hpu_C.init()``, hpu/__init__.py)."""
    _lazy_init()


def _lazy_init() -> None:
    """The bridge's lazy init: acquires the card (bindings.cpp ``hpu_init``). torch calls it
    too before the first HPU tensor of a process (torch/csrc/utils/device_lazy_init)."""
    global _initialized
    if not _initialized:
        _card.acquire()  # raises the bridge's "Device acquire failed" when the card is taken
        _initialized = True


def is_initialized() -> bool:
    return _initialized


def is_available() -> bool:
    return _count() > 0


def device_count() -> int:
    return _count()


def current_device() -> int:
    _lazy_init()  # hpu/__init__.py: current_device() calls _lazy_init()
    return 0


def set_device(device) -> None:
    """hpu/__init__.py @ 5a56187: without HLS_MODULE_ID and HABANA_VISIBLE_MODULES on a
    machine of fewer than 8 devices, only index 0 is accepted; otherwise the index picks the
    module (HLS_MODULE_ID), and the guard still runs every op on index 0."""
    index = _get_device_index(device, optional=True)
    modules = [int(m) for m in os.environ.get(HABANA_VISIBLE_MODULES_VAR, "0,1,2,3,4,5,6,7").split(",")]
    if index not in modules and index > len(modules):
        raise AssertionError(f"Trying to open device with idx={index} when only {modules} are avaliable)")
    module_id = int(os.environ.get(HLS_MODULE_ID_VAR, "-1") or -1)
    if module_id == -1 and HABANA_VISIBLE_MODULES_VAR not in os.environ and device_count() < 8:
        assert index == 0, f"As {HABANA_VISIBLE_MODULES_VAR} is not provided, the only supported device idx is 0."
    elif module_id == -1:
        os.environ[HLS_MODULE_ID_VAR] = str(modules[index])
    CALLS.append(f"set_device({index})")


class device:  # noqa: N801 (the bridge's name)
    """Context manager: index 0 or the module in HLS_MODULE_ID, nothing else (hpu/__init__.py)."""

    def __init__(self, device):
        index = _get_device_index(device, optional=True)
        module_id = int(os.environ.get(HLS_MODULE_ID_VAR, "-1") or -1)
        if index != 0 and index != module_id:
            raise AssertionError(f"Requested device_id={index} is different from env_device_id={module_id}")
        self.idx = module_id

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def get_device_name(device=None) -> str:
    _lazy_init()  # hpu/__init__.py: get_device_name() calls _lazy_init()
    _check_index(device)
    gen = os.environ.get("FAKE_HPU_GENERATION", "2")
    return "GAUDI" if gen == "1" else f"GAUDI{gen}"


def is_bf16_supported() -> bool:
    return is_available()


def synchronize() -> None:
    _lazy_init()  # hpu/__init__.py: synchronize() calls _lazy_init()
    CALLS.append("synchronize")
    _counts.synchronized()  # the host waits for the device (lazy: the graph so far runs)


def fake_allocate(nbytes: int) -> None:
    """Test hook (not bridge API): pretend tensors of ``nbytes`` were allocated (only
    without the emulated device, whose allocator counts real tensors)."""
    if _ext is not None:
        raise RuntimeError("fake_allocate: the emulated device counts its own allocations")
    _state["in_use"] += nbytes
    _state["max_in_use"] = max(_state["max_in_use"], _state["in_use"])
    _state["num_allocs"] += 1
    _state["total_allocs"] += 1
    _state["max_alloc"] = max(_state["max_alloc"], nbytes)


def memory_stats(device=None) -> dict:
    """The allocator's statistics, the ten keys of the bridge's ``get_mem_stats`` in its order
    (python_packages/habana_frameworks/torch/hpu/csrc/bindings.cpp:211-227 @ 5a56187, the same
    in the newer copy ea38cef): ``ActiveAllocs`` is ``NumAllocs - NumFrees`` and
    ``TotalActiveAllocs`` is ``TotalSystemAllocs - TotalSystemFrees``, computed, not counted,
    so after ``reset_accumulated_memory_stats`` ``ActiveAllocs`` goes negative as tensors from
    before it are freed, while the ``TotalSystem*`` counters are never reset. ``Limit`` is the
    allocator's pool, less than the HBM (FAKE_HPU_MEMORY sets it). Every function of memory.py
    calls hpu.init() and checks the index."""
    init()
    _check_index(device)
    if _ext is not None:
        return _ext.memory_stats()
    s = _state
    return {
        "Limit": _limit(),
        "InUse": s["in_use"],
        "MaxInUse": s["max_in_use"],
        "NumAllocs": s["num_allocs"],
        "NumFrees": s["num_frees"],
        "ActiveAllocs": s["num_allocs"] - s["num_frees"],
        "MaxAllocSize": s["max_alloc"],
        "TotalSystemAllocs": s["total_allocs"],
        "TotalSystemFrees": s["total_frees"],
        "TotalActiveAllocs": s["total_allocs"] - s["total_frees"],
    }


def memory_allocated(device=None) -> int:
    return memory_stats(device)["InUse"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["MaxInUse"]


def memory_reserved(device=None) -> int:
    """The pool the allocator manages: ``Limit``, reserved whole when the card is taken, so
    it never changes and is never below ``memory_allocated`` (memory.py @ 5a56187 and
    @ ea38cef: ``memory_reserved`` returns ``memory_stats(device)["Limit"]``)."""
    return memory_stats(device)["Limit"]


def max_memory_reserved(device=None) -> int:
    """Also ``Limit`` (memory.py @ 5a56187 and @ ea38cef): the pool never grows."""
    return memory_stats(device)["Limit"]


def memory_cached(device=None) -> int:
    """The old name of ``memory_reserved``: warns and answers it (memory.py:165-168 @ 5a56187)."""
    # the bridge passes no stacklevel (1: the warning points here)
    warnings.warn("torch.hpu.memory_cached has been renamed to torch.hpu.memory_reserved", FutureWarning,
                  stacklevel=1)
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """The old name of ``max_memory_reserved`` (memory.py:171-174 @ 5a56187)."""
    warnings.warn("torch.hpu.max_memory_cached has been renamed to torch.hpu.max_memory_reserved",
                  FutureWarning, stacklevel=1)
    return max_memory_reserved(device)


def reset_peak_memory_stats(device=None) -> None:
    """``_hpu_C.reset_peak_memory_stats`` (memory.py:55-63 @ 5a56187), which sets the pool's
    peak to 0 (CoalescedStringentPooling::reset_peak_mem_stats,
    CoalescedStringentPoolAllocator.cpp:1352-1355), not to what is in use as torch.cuda does:
    ``MaxInUse`` reads 0, below ``InUse``, until the next allocation raises it to ``InUse``
    (device_mem_stats.h:135-141)."""
    init()  # memory.py: hpu.init()
    _check_index(device)
    if _ext is not None:
        _ext.reset_peak_memory_stats()
        return
    _state["max_in_use"] = 0


def reset_accumulated_memory_stats(device=None) -> None:
    """``_hpu_C.clear_memory_stats`` (memory.py @ 5a56187 and @ ea38cef), which clears the pool
    allocator's accumulated counters (CoalescedStringentPooling::clear_stats,
    backend/synapse_helpers/pool_allocator/CoalescedStringentPoolAllocator.cpp:1342 @ 5a56187,
    the same @ ea38cef): ``NumAllocs`` and ``NumFrees`` to 0, ``MaxInUse`` to ``InUse``,
    ``MaxAllocSize`` to 0. ``InUse``, ``Limit`` and the ``TotalSystem*`` counters stay."""
    init()  # memory.py: hpu.init()
    _check_index(device)
    if _ext is not None:
        _ext.clear_memory_stats()
        return
    _state.update(num_allocs=0, num_frees=0, max_in_use=_state["in_use"], max_alloc=0)


def memory_summary(device=None) -> str:
    """A printable summary (memory.py @ 5a56187 and @ ea38cef): a three-line header naming the
    device index, then the bridge's ``get_mem_stat_summary`` (hpu/csrc/bindings.cpp:102-130
    @ 5a56187): seven lines, each label left-aligned in 19 columns after two spaces and its
    value right-aligned in 20, Limit also in GB and InUse, MaxInUse and MaxAllocSize in MB (two
    decimals), and an empty line at the end."""
    init()  # memory.py: hpu.init()
    index = _check_index(device)
    header = "".join(f"|{line}|\n" for line in (
        "=" * 52, f" {'':5} PyTorch HPU memory summary, device ID {index:<6d} ", "-" * 52))
    s = memory_stats(index)
    gb, mb = 1024**3, 1024**2
    rows = [("Limit", s["Limit"], f" ({s['Limit'] / gb:.2f} GB)"),
            ("InUse", s["InUse"], f" ({s['InUse'] / mb:.2f} MB)"),
            ("MaxInUse", s["MaxInUse"], f" ({s['MaxInUse'] / mb:.2f} MB)"),
            ("NumAllocs", s["NumAllocs"], ""),
            ("NumFrees", s["NumFrees"], ""),
            ("MaxAllocSize", s["MaxAllocSize"], f" ({s['MaxAllocSize'] / mb:.2f} MB)"),
            ("ActiveAllocs", s["ActiveAllocs"], "")]
    body = "".join(f"  {label + ':':<19}{value:>20}{unit}\n" for label, value, unit in rows)
    return header + body + "\n"


def mem_get_info(device=None) -> tuple[int, int]:
    s = memory_stats(device)
    return s["Limit"] - s["InUse"], s["Limit"]
