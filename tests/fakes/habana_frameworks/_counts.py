"""TEST DOUBLE (not bridge API): what the emulated device counts, read as the bridge would.

The C++ side (``_device/op_counts.cpp``) counts every op that reaches the device's CPU
fallback by operator name, the user's device-to-host copies, and in lazy mode the distinct
graph signatures between flushes. This module turns them into what the bridge reports:

- **CPU fallbacks** (``cpu_fallback`` metric): the ops among them with no HPU kernel on a
  Gaudi, per ``hpu/metrics/op_support.txt`` (the 1.19 source's op table and ``hpu_op.yaml``).
  On the bridge every op without an HPU kernel runs through its boxed fallback, which emits
  CPU_FALLBACK with the op's name (hpu_ops/cpu_fallback.cpp:90-96 @ 5a56187).
- **Host syncs** (no bridge metric: a test hook): device-to-host copies made by the user's
  code (``.cpu()``, ``.to("cpu")``, ``.numpy()`` through it, printing a tensor), the ops in
  ``SYNC_OPS`` (their result, or its size, is needed on the host), ``torch.hpu.synchronize``,
  and each CPU fallback (``cpu_fallback``: its inputs are copied to the host; in lazy mode
  the graph so far runs first: hpu_ops/cpu_fallback.cpp, habana_kernels/fallback_helper.h:50
  @ 5a56187).
- **Lazy graphs** (part of ``graph_compilation``): a distinct graph signature run at a flush.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

# Ops whose result the host must wait for. ``aten::_local_scalar_dense`` is Tensor.item()
# (and bool(), int(), float() of a one-element tensor): the value is copied to the host.
# The others return a tensor whose size depends on the values, so the host must read them
# before it can allocate the output (torch's nonzero docs: it "causes host-device
# synchronization" on an accelerator; masked_select and unique have the same data-dependent
# size); equal returns a Python bool. Intel's "Detect Dynamic Shapes" article (intel.com,
# developer/articles/training/detecting-dynamic-shapes) names such ops, "whose output shape
# depends on the actual input data", as a cause of recompiles; the double counts them as
# syncs and, in lazy mode, cuts the graph there.
SYNC_OPS = (
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::unique_dim_consecutive",
    "aten::equal",
)
_synchronize_calls = [0]


@lru_cache(maxsize=1)
def op_support() -> dict[str, str]:
    """Op name -> "hpu" (an HPU kernel), "cpu" (none: falls back), "composite"."""
    path = Path(__file__).parent / "torch" / "hpu" / "metrics" / "op_support.txt"
    rows = (ln.split() for ln in path.read_text().splitlines() if ln and not ln.startswith("#"))
    return {name: where for name, where in rows}


def configure(ext, lazy: bool) -> None:
    """Tell the device the mode (fixed when the bridge loads), the ops that sync, and the ops
    with no HPU kernel (the only ones PT_HPU_PLACE_ON_CPU can refuse: _device/op_counts.cpp)."""
    ext.counts_configure(lazy, list(SYNC_OPS))
    ext.counts_no_kernel(sorted(name for name, where in op_support().items() if where == "cpu"))


def flush() -> None:
    """mark_step / synchronize: the accumulated lazy graph runs."""
    ext = _ext()
    if ext is not None:
        ext.counts_flush()


@contextmanager
def kernel():
    """Inside: the double's Python emulation of one fused HPU kernel (hpex's FusedAdamW,
    FusedClipNorm: hpu::optimizer_adamw and friends, habana_eager/eager_custom_op_register.cpp
    :2376 @ 5a56187): its host ops and copies are not the user's, and are not counted."""
    ext = _ext()
    if ext is not None:
        ext.counts_enter_kernel()
    try:
        yield
    finally:
        if ext is not None:
            ext.counts_exit_kernel()


def synchronized() -> None:
    _synchronize_calls[0] += 1
    flush()


def _ext():
    import sys

    hpu = sys.modules.get("habana_frameworks.torch.hpu")
    return getattr(hpu, "_ext", None)


def raw() -> dict:
    """The device's counts now (zeros without the emulated device)."""
    ext = _ext()
    got = ext.counts() if ext is not None else {"ops": {}, "device_to_host": 0, "cpu_fallback": 0,
                                                 "lazy_graphs": 0}
    return {**got, "synchronize": _synchronize_calls[0]}


def fallbacks(ops: dict[str, int]) -> dict[str, int]:
    """The ops (by name, with counts) that have no HPU kernel on a Gaudi."""
    table = op_support()
    return {name: n for name, n in sorted(ops.items()) if table.get(name) == "cpu"}


def unlisted(ops: dict[str, int]) -> dict[str, int]:
    """Ops the table does not list (newer than its torch): the double cannot tell."""
    table = op_support()
    return {name: n for name, n in sorted(ops.items()) if name not in table}


def host_syncs(counts: dict | None = None) -> dict[str, int]:
    """Host syncs so far by cause: device-to-host copies, CPU fallbacks' round trips, sync ops
    by name, synchronize."""
    c = counts or raw()
    out = {"device_to_host": c["device_to_host"], "cpu_fallback": c["cpu_fallback"],
           "synchronize": c["synchronize"]}
    out.update({name: n for name, n in c["ops"].items() if name in SYNC_OPS})
    return out
