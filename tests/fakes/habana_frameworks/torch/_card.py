"""TEST DOUBLE of the bridge's device acquisition: one card per process, for its whole life.

Not bridge API (the bridge does this in C++); the double's ``hpu`` module and its device
extension call :func:`acquire` wherever the bridge reaches its lazy init.

Sources (gaudi-pytorch-bridge @ 5a56187, the 1.19.0 release):

- ``python_packages/habana_frameworks/torch/hpu/__init__.py``: ``_lazy_init()`` calls
  ``_hpu_C.init()`` (``hpu_init`` in ``hpu/csrc/bindings.cpp``: a device guard and
  ``HPUDeviceContext::get_device()``, which acquires). ``get_device_name``,
  ``current_device``, ``synchronize``, ``get_device_capability``,
  ``get_device_properties`` call ``_lazy_init()``; every function of ``hpu/memory.py``
  (``memory_stats``, ``memory_allocated``, ``max_memory_allocated``,
  ``reset_peak_memory_stats``, ``mem_get_info``) calls ``hpu.init()``. The first HPU tensor
  reaches the same device through the allocator. ``is_available``, ``device_count`` and
  ``is_bf16_supported`` read ``_hpu_C.device_count()`` (``get_total_device_count``), which
  does not acquire; ``set_device`` only reads and writes ``HLS_MODULE_ID``.
- ``backend/synapse_helpers/device.cpp:384-492``: with ``HLS_MODULE_ID`` set, acquire that
  module; if that fails and ``HABANA_VISIBLE_MODULES`` is unset and the device count is at
  least ``WORLD_SIZE`` (or ``OMPI_COMM_WORLD_SIZE``, default 1), fall back to any free
  device; without ``HLS_MODULE_ID``, acquire any free device (the driver shows only
  ``HABANA_VISIBLE_MODULES``). Failure: "Device acquire failed." with the synapse status;
  a device held by another process is synStatus 20, "Device already acquired"
  (huggingface/tgi-gaudi#93, huggingface/optimum-habana#288 show the message users see).

Emulation: module ``m`` is the file ``$FAKE_HPU_DEV_DIR/accel{minor}`` (the driver's
``/dev/accel/accel{minor}``; ``minor`` is ``m`` unless ``FAKE_HPU_LAYOUT`` says otherwise,
``habana_frameworks/_layout.py``); acquiring it takes an exclusive ``flock`` on it, kept until the
process exits (the kernel drops it then, as the driver frees a card when its owner dies).
"""

import fcntl
import os
import tempfile
from pathlib import Path

from habana_frameworks._layout import cards, minor_of

ALREADY_ACQUIRED = "synStatus=20 [Device already acquired] Device acquire failed."
NO_DEVICE = "synStatus=8 [Device not found] Device acquire failed. No devices found."
_held: dict[str, int] = {}  # {"module": id, "fd": fd} once this process owns a card


def count() -> int:
    """The number of cards this process sees (``synDeviceGetCount``): the node's
    (``FAKE_HPU_COUNT``, default 8), or a container's (``FAKE_HPU_MODULES``, _layout.py)."""
    return len(cards())


def present() -> list[int]:
    """The module ids of the cards this process sees."""
    return [module for _, _, module in cards()]


def dev_dir() -> Path:
    """Where the cards' device files live (``FAKE_HPU_DEV_DIR``, default under the tmp dir)."""
    default = Path(tempfile.gettempdir(), "fake-hpu-accel")
    return Path(os.environ.get("FAKE_HPU_DEV_DIR") or default)


def held() -> int | None:
    """The module id this process owns, or None before :func:`acquire`."""
    return _held.get("module")


def _visible() -> list[int]:
    env = os.environ.get("HABANA_VISIBLE_MODULES")
    if env:
        return [int(m) for m in env.split(",") if m.strip()]
    return sorted(present())


def _try(module: int) -> int | None:
    """Lock card ``module``'s device file; the open fd, or None if another process holds it."""
    folder = dev_dir()
    folder.mkdir(parents=True, exist_ok=True)
    # the module's device file is accel<minor> (the node's layout, habana_frameworks/_layout.py)
    fd = os.open(folder / f"accel{minor_of(module)}", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _by_type(candidates: list[int]) -> tuple[int, int] | None:
    for module in candidates:
        fd = _try(module)
        if fd is not None:
            return module, fd
    return None


def acquire() -> int:
    """Take this process's card (once; later calls return the same module id).

    Raises RuntimeError with the bridge's message when the card is held by another process
    or no card is free.
    """
    if "module" in _held:
        return _held["module"]
    candidates = [m for m in _visible() if m in present()]
    if not candidates:
        raise RuntimeError(NO_DEVICE)
    got = None
    module_env = os.environ.get("HLS_MODULE_ID")
    if module_env not in (None, ""):
        module = int(module_env)
        fd = _try(module) if module in present() else None
        got = (module, fd) if fd is not None else None
        world = os.environ.get("WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or "1"
        fallback = "HABANA_VISIBLE_MODULES" not in os.environ and count() >= int(world)
        if got is None and fallback:  # device.cpp:433: "Proceeding without moduleid."
            got = _by_type(candidates)
    else:
        got = _by_type(candidates)
    if got is None:
        raise RuntimeError(ALREADY_ACQUIRED)
    _held["module"], _held["fd"] = got
    return got[0]
