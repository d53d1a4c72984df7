"""The one module that imports the Habana bridge (``habana_frameworks``), never at module import
time: the bridge loads on the first probe (``bridge()``), after the execution mode and the
recipe cache have been chosen.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from .. import settings
from .devicefiles import device_files

MODES = ("eager", "lazy", "compile")


def _torch() -> Any:  # Any: the bridge adds torch.hpu at run time, torch's stubs lack it
    import torch  # imported on first use, never at `import workbench`

    return torch


@cache
def has_bridge() -> bool:
    """True when ``habana_frameworks`` can be imported; looks without importing it."""
    try:
        return importlib.util.find_spec("habana_frameworks") is not None
    except (ImportError, ValueError):
        return False


# --------------------------------------------------------------------------- mode
def loaded() -> bool:
    """Whether the bridge is in this process already (imported, or autoloaded by torch)."""
    return "habana_frameworks.torch" in sys.modules


def holds_card() -> bool:
    """Whether this process has taken its Gaudi already (the bridge's lazy init ran); asks
    without taking one."""
    if not loaded():
        return False
    try:
        return bool(_torch().hpu.is_initialized())
    except Exception:
        return False


def hpu_mode() -> str | None:
    """The HPU execution mode of this process, ``"lazy"`` or ``"eager"``, as the bridge
    reports it (``utils.internal.is_lazy()``: it reads ``PT_HPU_LAZY_MODE`` once, so the
    variable can disagree later); None without a bridge."""
    if bridge() is None:
        return None
    return "lazy" if _is_lazy() else "eager"


def _is_lazy() -> bool:
    """The loaded bridge's answer (``utils.internal.is_lazy``), else its rule for the variable."""
    try:
        return bool(importlib.import_module("habana_frameworks.torch.utils.internal").is_lazy())
    except Exception:  # unreadable: the variable, as bridge() sets it before loading one
        return settings.get("PT_HPU_LAZY_MODE", "0") != "0"


def mode_env(mode: str) -> dict[str, str]:
    """The environment that starts a new process in ``mode`` (``PT_HPU_LAZY_MODE``)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    return {"PT_HPU_LAZY_MODE": "1" if mode == "lazy" else "0"}


def set_hpu_mode(mode: str) -> None:
    """Choose Gaudi's execution mode for this process, before the bridge loads: ``lazy`` sets
    ``PT_HPU_LAZY_MODE=1``; ``eager`` and ``compile`` set 0. The bridge fixes the mode as it
    loads (current bridges on ``import torch``): another mode afterwards raises, saying to
    restart.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    want = "lazy" if mode == "lazy" else "eager"
    if loaded():
        have = hpu_mode()
        if have != want:
            raise RuntimeError(
                f"the Habana bridge is already loaded in {have} mode and the mode is fixed per "
                f"process (current bridges load at `import torch` unless PT_HPU_LAZY_MODE=1). "
                f"Fixes: train in a worker, a new process in mode {mode!r}: "
                f"wb.launch(model, data, devices=1, mode={mode!r}); or restart the kernel and "
                f"ask for mode={mode!r} before importing torch or anything that touches the "
                f"HPU; or set PT_HPU_LAZY_MODE={int(want == 'lazy')} before starting Python"
            )
        return
    os.environ["PT_HPU_LAZY_MODE"] = "1" if want == "lazy" else "0"


@contextmanager
def mode_for_probe(mode: str | None) -> Iterator[None]:
    """Gaudi's execution mode ``mode`` (None: as it is) for the device probe in the block.

    The bridge reads ``PT_HPU_LAZY_MODE`` once, as it loads: where the block loaded it the
    variable stays, else it is put back. Not accelerate's ``patch_environment``: importing
    accelerate imports torch, which loads the bridge in eager mode before the variable is set.
    """
    if mode is None or loaded():
        if mode is not None:
            set_hpu_mode(mode)  # checks the name; writes nothing to a loaded bridge
        yield
        return
    before = settings.get("PT_HPU_LAZY_MODE")
    set_hpu_mode(mode)
    kept = False
    try:
        yield
        kept = loaded()
    finally:
        if not kept:
            os.environ.pop("PT_HPU_LAZY_MODE", None)
            if before is not None:
                os.environ["PT_HPU_LAZY_MODE"] = before


def recipe_cache() -> Path:
    """Where compiled HPU graphs (recipes) are kept between runs and processes."""
    return settings.cache_root() / "hpu-recipes"


RECIPE_VARIABLE = "PT_HPU_RECIPE_CACHE_CONFIG"
_CACHE_OFF = (
    "the HPU recipe cache is off in this process: the Habana bridge loaded before {variable} "
    "was set (in eager mode `import torch` loads it), and the bridge reads it as it loads, so "
    "every graph compiles again in each new process. Import workbench before torch, or set "
    "{variable}={value} before Python starts."
)


def _recipe_value() -> str:
    # path, keep what is there (false), at most 4096 MB: the three fields Intel's Runtime
    # Flags page documents and the 1.19 bridge accepts (recipe_cache_config.cpp asserts 1 to 3)
    return f"{recipe_cache()},false,4096"


def prepare_recipe_cache() -> None:
    """Keep compiled HPU graphs (recipes) on disk between runs and processes: set
    ``PT_HPU_RECIPE_CACHE_CONFIG`` (unless set) where a bridge is installed and not loaded yet.
    ``import workbench`` calls this: the bridge reads the variable as it loads, which in eager
    mode ``import torch`` does. Workers inherit the variable, so all ranks share one cache.
    """
    if not has_bridge() or settings.is_set(RECIPE_VARIABLE):
        return
    if loaded():  # too late: say so now rather than run without the cache in silence
        warnings.warn(
            _CACHE_OFF.format(variable=RECIPE_VARIABLE, value=_recipe_value()), stacklevel=2
        )
        return
    os.environ[RECIPE_VARIABLE] = _recipe_value()


# --------------------------------------------------------------------------- bridge
@cache
def bridge():
    """Import the Habana bridge (registers ``torch.hpu``); None when it is missing."""
    if not has_bridge():
        return None
    if not loaded():
        # Unset, the mode is lazy to 1.19-era bridges and eager to current ones: say which.
        os.environ.setdefault("PT_HPU_LAZY_MODE", "0")
        prepare_recipe_cache()  # normally done at `import workbench` already
    if recipe_config := settings.get(RECIPE_VARIABLE):
        _warn_if_nfs(recipe_config.split(",")[0])
    try:
        module = importlib.import_module("habana_frameworks.torch")
    except Exception as e:
        # Where no Gaudi card is visible, a broken install counts as "no HPU". Where one is,
        # "no HPU" would let device="auto" train on the CPU without a word: say why instead.
        seen = cards_seen()
        if seen is None:
            return None
        raise RuntimeError(_BROKEN.format(seen=seen, error=f"{type(e).__name__}: {e}")) from e
    # Libraries that read the variable (transformers, accelerate: unset = lazy) must agree
    # with the mode the bridge fixed, also when something loaded it before we could set it.
    os.environ["PT_HPU_LAZY_MODE"] = "1" if _is_lazy() else "0"
    return module


# The bridge's own check (habana_frameworks/torch/__init__.py @ 5a56187): torch's major.minor
# must be the one it was built against (a `pip install torch` over the container's breaks it)
_BROKEN = (
    "the Habana bridge (habana_frameworks.torch) failed to import on a machine with Gaudi cards "
    "({seen}): {error}. Without it nothing would run on the cards. The usual cause is a torch "
    "that is not the one Intel's container ships (the bridge refuses another major.minor "
    "version, and current bridges refuse lazy mode on any torch but Intel's build): check "
    "`pip list | grep -i -e torch -e habana`, reinstall the container's torch "
    "(or start a fresh container) and never pip install torch over it. To train on the CPU "
    "anyway, pass device='cpu'."
)


def cards_seen() -> str | None:
    """What shows Gaudi cards on this machine without taking one (device files, else HLML);
    None when nothing does."""
    files = sorted(device_files().values())
    if files:
        return f"{len(files)} device file{'s' * (len(files) > 1)} such as {files[0]}"
    from .hlml import HLML
    from .monitor import Unavailable, read_vendor

    try:
        found = len(read_vendor(HLML))
    except Unavailable:
        return None
    return f"HLML lists {found} Gaudi card{'s' * (found > 1)}" if found else None


def filesystem(path, mounts="/proc/mounts") -> str | None:
    """The type of the filesystem ``path`` lives on ("ext4", "nfs4", ...), from ``mounts``."""
    best, kind = "", None
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    target = os.path.abspath(path)
    for line in lines:
        fields = line.split()
        if len(fields) >= 3:
            point = fields[1].replace("\\040", " ")
            inside = target == point or target.startswith(point.rstrip("/") + "/")
            if inside and len(point) > len(best):
                best, kind = point, fields[2]
    return kind


def _warn_if_nfs(path: str) -> None:
    # The bridge's disk cache serialises processes with flock() (cache_file_handler.cpp): on
    # NFS such locks depend on the server's lock manager, and every graph load crosses the network
    if (filesystem(path) or "").startswith("nfs"):
        warnings.warn(
            f"the HPU recipe cache {path} is on NFS: the bridge locks its files with "
            "flock(), which NFS may not honour across machines; set "
            "PT_HPU_RECIPE_CACHE_CONFIG or WORKBENCH_CACHE to a local disk",
            stacklevel=3,
        )


def torch_hpu():
    """``torch.hpu``, after loading the bridge; an error naming the fix when there is none."""
    if bridge() is None:
        raise RuntimeError(
            "no Habana bridge in this environment; run inside Intel's Gaudi container "
            "(habana_frameworks is not on PyPI)"
        )
    return _torch().hpu


def clear_cache() -> None:
    """Forget the cached probes (for tests that swap the environment)."""
    has_bridge.cache_clear()
    bridge.cache_clear()


# --------------------------------------------------------------------------- probes
def available() -> bool:
    """Whether this process sees at least the HPU runtime (never raises)."""
    if bridge() is None:
        return False
    try:
        return bool(_torch().hpu.is_available())
    except Exception:
        return False


def count() -> int:
    """Cards the driver shows this process (``device_count`` reads the driver and, unlike the
    calls that reach the bridge's lazy init, takes no card)."""
    return int(torch_hpu().device_count())


def one_device(index: int) -> int:
    # Each process drives one Gaudi, index 0: the card comes from the environment
    # (HLS_MODULE_ID, which importing the bridge sets from LOCAL_RANK under torchrun), and the
    # bridge's device guard fails for any other index (HPUGuardImpl.h). No "hpu:{rank}".
    if index != 0:
        raise ValueError(
            f"hpu:{index}: each process drives one Gaudi, index 0 (under torchrun the bridge picks "
            f"the card from LOCAL_RANK; HABANA_VISIBLE_MODULES limits the cards); use device='hpu'"
        )
    return index


def memory(index: int) -> dict[str, int]:
    """allocated / peak / total bytes of one HPU."""
    # memory_stats() is the truth on Gaudi (hl-smi sees no tensors): InUse, MaxInUse, Limit
    stats = torch_hpu().memory_stats(one_device(index))
    allocated = int(stats.get("InUse", 0))
    return {
        "allocated": allocated,
        # reset_peak_memory_stats sets the pool's peak to 0, not to what is in use
        # (CoalescedStringentPoolAllocator.cpp:1352-1355 @ 5a56187): MaxInUse reads below InUse
        # until the next allocation. The peak since the reset is at least what is in use now.
        "peak": max(int(stats.get("MaxInUse", 0)), allocated),
        "total": int(stats.get("Limit", 0)),
    }


def reset_peak(index: int) -> None:
    torch_hpu().reset_peak_memory_stats(one_device(index))


def synchronize(index: int) -> None:
    torch_hpu().synchronize()


def mark_step() -> None:
    """Run the graph accumulated so far (lazy mode only)."""
    # the graph so far runs at mark_step in lazy mode; eager mode's mark_step is a no-op
    if hpu_mode() == "lazy":
        importlib.import_module("habana_frameworks.torch.core").mark_step()


def _metric_stats(name: str) -> dict | None:
    """One of the bridge's global metrics as a dict of its stats; None when unreadable
    (metric_global() returns None for a metric that is not registered)."""
    try:
        metric = importlib.import_module("habana_frameworks.torch.hpu.metrics").metric_global(name)
    except Exception:
        return None
    return None if metric is None else dict(metric.stats())


def compiles() -> int | None:
    """Graphs the bridge has compiled so far; None when the counter is unreadable."""
    # graph_compilation counts the graphs compiled for lazy mode and torch.compile (a new input
    # shape is a new graph); not eager mode's single-op graphs
    stats = _metric_stats("graph_compilation")
    if stats is None:
        return None
    return int(stats.get("TotalNumber", 0))


def fallbacks() -> dict[str, int] | None:
    """Ops the bridge has run on the CPU so far, by op name; None when unreadable."""
    # An op with no HPU kernel runs through the bridge's boxed CPU fallback: inputs copied to
    # the host, the CPU kernel, results copied back (a host round trip, and in lazy mode a cut
    # graph). cpu_fallback's stats(): TotalNumber and FallbackOps, a dict op name -> count
    # (hpu/metrics/metrics.py CpuFallbackMetric @ 5a56187; hpu_ops/cpu_fallback.cpp:90).
    stats = _metric_stats("cpu_fallback")
    if stats is None:
        return None
    ops = stats.get("FallbackOps")
    return {str(k): int(v) for k, v in ops.items()} if isinstance(ops, dict) else None


def host_syncs() -> int | None:
    """Host round trips the bridge reports so far (one per CPU fallback); None when
    unreadable."""
    # The boxed fallback copies every HPU input to the host and back (hpu_ops/cpu_fallback.cpp:
    # 86-115 @ 5a56187): a host sync, and in lazy mode the graph so far runs first
    # (habana_kernels/fallback_helper.h:50). The bridge counts no other host sync (.item(),
    # .cpu()), so reads the code asks for are not in this count.
    stats = _metric_stats("cpu_fallback")
    if stats is None:
        return None
    return int(stats.get("TotalNumber", 0))


def precision(index: int) -> str:
    return "bf16"  # bf16 runs on every Gaudi generation (fp16 not on Gaudi1: see chips.CHIPS)


def versions() -> dict[str, str | None]:
    """The bridge's version, from its distribution or the module."""
    try:
        found = importlib.metadata.version("habana-torch-plugin")
    except importlib.metadata.PackageNotFoundError:
        found = getattr(bridge(), "__version__", None)
    return {"habana_frameworks": found}


# --------------------------------------------------------------------------- ops
def fused_adamw() -> type:
    """The hpex FusedAdamW class: ``(params, lr, betas, eps=1e-6, weight_decay, bias_correction,
    moments_dtype)``, no other keyword; in lazy mode it runs mark_step itself."""
    return importlib.import_module("habana_frameworks.torch.hpex.optimizers").FusedAdamW


# Each graph kept holds device memory: past this many, new input shapes run without one.
MAX_HPU_GRAPHS = 32


def inference_model(model, mode: str | None):
    """``model`` in eval mode; in lazy mode (the only one HPU graphs work in) moved to the
    device first and wrapped in HPU graphs, at most ``MAX_HPU_GRAPHS`` of them."""
    model = model.eval()
    if mode != "lazy":
        return model
    model = model.to("hpu")  # wrap the model where it will run (optimum-habana does the same)
    return importlib.import_module("habana_frameworks.torch.hpu").wrap_in_hpu_graph(
        model, disable_tensor_cache=True, max_graphs=MAX_HPU_GRAPHS
    )
