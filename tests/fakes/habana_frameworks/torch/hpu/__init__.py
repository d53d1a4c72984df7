"""TEST DOUBLE of ``torch.hpu`` (habana_frameworks/torch/hpu): device and memory API."""

import os

CALLS: list[str] = []
_GiB = 1024**3
_state = {"in_use": 0, "max_in_use": 0, "num_allocs": 0}


def _count() -> int:
    return int(os.environ.get("FAKE_HPU_COUNT", "8"))


def is_available() -> bool:
    return _count() > 0


def device_count() -> int:
    return _count()


def current_device() -> int:
    return 0


def set_device(index: int) -> None:
    CALLS.append(f"set_device({index})")


def get_device_name(index: int = 0) -> str:
    gen = os.environ.get("FAKE_HPU_GENERATION", "2")
    return "GAUDI" if gen == "1" else f"GAUDI{gen}"


def is_bf16_supported() -> bool:
    return True


def synchronize() -> None:
    CALLS.append("synchronize")


def fake_allocate(nbytes: int) -> None:
    """Test hook (not bridge API): pretend tensors of ``nbytes`` were allocated."""
    _state["in_use"] += nbytes
    _state["max_in_use"] = max(_state["max_in_use"], _state["in_use"])
    _state["num_allocs"] += 1


def memory_stats(device=None) -> dict:
    return {
        "Limit": int(os.environ.get("FAKE_HPU_MEMORY", str(96 * _GiB))),
        "InUse": _state["in_use"],
        "MaxInUse": _state["max_in_use"],
        "NumAllocs": _state["num_allocs"],
    }


def memory_allocated(device=None) -> int:
    return _state["in_use"]


def max_memory_allocated(device=None) -> int:
    return _state["max_in_use"]


def reset_peak_memory_stats(device=None) -> None:
    _state["max_in_use"] = _state["in_use"]


def mem_get_info(device=None) -> tuple[int, int]:
    s = memory_stats()
    return s["Limit"] - s["InUse"], s["Limit"]


from .graphs import wrap_in_hpu_graph  # noqa: E402,F401  (the bridge exports it here too)
