"""TEST DOUBLE of ``torch.hpu`` (habana_frameworks/torch/hpu): devices, memory, random, graphs.

Sources: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/hpu/__init__.py,
hpu/_utils.py, hpu/memory.py, hpu/random.py @ 5a56187, and the device guard
backend/habana_device/HPUGuardImpl.h @ 5a56187. Nothing here holds a tensor: the double
emulates the device with a C++ extension (``habana_frameworks/torch/_device``): HPU tensors
whose storage is host memory (see tests/fakes/README.md).
"""

import os

import torch

from habana_frameworks import _counts, _device, _release
from habana_frameworks.torch import _card
from habana_frameworks.torch.utils.internal import is_lazy

from .metrics import metric_global  # noqa: F401  (hpu/__init__.py re-exports hpu.metrics)
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
_state = {"in_use": 0, "max_in_use": 0, "num_allocs": 0}  # without the device (see below)
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
    return int(os.environ.get("FAKE_HPU_COUNT", "8"))


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


def memory_stats(device=None) -> dict:
    # keys and meaning from hpu/memory.py @ 5a56187; "Limit" is the allocator's pool, less
    # than the HBM (FAKE_HPU_MEMORY sets it); every function of memory.py calls hpu.init()
    init()
    _check_index(device)
    if _ext is not None:
        return _ext.memory_stats()
    return {
        "Limit": _limit(),
        "InUse": _state["in_use"],
        "MaxInUse": _state["max_in_use"],
        "NumAllocs": _state["num_allocs"],
    }


def memory_allocated(device=None) -> int:
    return memory_stats(device)["InUse"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["MaxInUse"]


def reset_peak_memory_stats(device=None) -> None:
    init()  # memory.py: hpu.init()
    _check_index(device)
    if _ext is not None:
        _ext.reset_peak_memory_stats()
    _state["max_in_use"] = _state["in_use"]


def mem_get_info(device=None) -> tuple[int, int]:
    s = memory_stats(device)
    return s["Limit"] - s["InUse"], s["Limit"]
