"""The one module that imports the Habana bridge (``habana_frameworks``).

``device.py`` builds the HPU backend record from these functions, and the engine gets
FusedAdamW and FusedClipNorm from here, so no other module imports the bridge. Nothing
here imports ``torch`` or the bridge at module import time: the bridge loads on the first
probe (``bridge()``), after the execution mode and the recipe cache have been chosen.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from functools import cache
from pathlib import Path

MODES = ("eager", "lazy", "compile")


def _torch():
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
def hpu_mode() -> str:
    """The HPU execution mode this process uses: ``"lazy"`` or ``"eager"``.

    Fixed per process by ``PT_HPU_LAZY_MODE`` before the bridge is imported (current
    Gaudi releases default to eager, 0).
    """
    return "lazy" if os.environ.get("PT_HPU_LAZY_MODE", "0").strip() == "1" else "eager"


def set_hpu_mode(mode: str) -> None:
    """Choose Gaudi's execution mode for this process, before the bridge loads.

    ``lazy`` sets ``PT_HPU_LAZY_MODE=1``; ``eager`` and ``compile`` set 0 (compile adds
    ``torch.compile`` at train time). The bridge reads the variable once, when it is
    imported: asking for another mode afterwards raises an error that says to restart.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    want = "lazy" if mode == "lazy" else "eager"
    if "habana_frameworks.torch" in sys.modules:
        if hpu_mode() != want:
            raise RuntimeError(
                f"the Habana bridge is already loaded in {hpu_mode()} mode and the mode is fixed per "
                f"process: restart the kernel and ask for mode={mode!r} before anything touches the "
                f"HPU (or set PT_HPU_LAZY_MODE={int(want == 'lazy')} before starting Python)")
        return
    os.environ["PT_HPU_LAZY_MODE"] = "1" if want == "lazy" else "0"


def recipe_cache() -> Path:
    """Where compiled HPU graphs (recipes) are kept between runs and processes."""
    from .bundled import cache_dir

    return cache_dir() / "hpu-recipes"


# --------------------------------------------------------------------------- bridge
@cache
def bridge():
    """Import the Habana bridge (registers ``torch.hpu``); None when it is missing."""
    if not has_bridge():
        return None
    # Read once, when the bridge loads (the first device probe, before any run directory
    # exists): a cache shared by all runs, so later runs skip recompiling the same graphs.
    os.environ.setdefault("PT_HPU_RECIPE_CACHE_CONFIG", f"{recipe_cache()},false,4096")
    try:
        return importlib.import_module("habana_frameworks.torch")
    except Exception:  # a broken install counts as "no HPU", never a crash at probe time
        return None


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
    return int(torch_hpu().device_count())


def name(index: int) -> str:
    return str(torch_hpu().get_device_name(index))


def generation() -> str | None:
    """``"Gaudi1"``, ``"Gaudi2"`` or ``"Gaudi3"``; None when the bridge cannot say."""
    try:
        htexp = importlib.import_module("habana_frameworks.torch.utils.experimental")
        names = {
            htexp.synDeviceType.synDeviceGaudi: "Gaudi1",
            htexp.synDeviceType.synDeviceGaudi2: "Gaudi2",
            htexp.synDeviceType.synDeviceGaudi3: "Gaudi3",
        }
        return names.get(htexp._get_device_type())
    except Exception:
        return None


def memory(index: int) -> dict[str, int]:
    """allocated / peak / total bytes of one HPU."""
    # memory_stats() is the source of truth on Gaudi: hl-smi does not see tensor
    # allocations. Keys: InUse, MaxInUse, Limit (bytes).
    stats = torch_hpu().memory_stats(index)
    return {
        "allocated": int(stats.get("InUse", 0)),
        "peak": int(stats.get("MaxInUse", 0)),
        "total": int(stats.get("Limit", 0)),
    }


def reset_peak(index: int) -> None:
    torch_hpu().reset_peak_memory_stats(index)


def synchronize(index: int) -> None:
    torch_hpu().synchronize()


def mark_step() -> None:
    """Run the graph accumulated so far (lazy mode only)."""
    # Lazy mode accumulates ops into a graph that runs at mark_step; in eager mode the
    # call is a no-op that only warns, so we skip it.
    if hpu_mode() == "lazy":
        importlib.import_module("habana_frameworks.torch.core").mark_step()


def compiles() -> int | None:
    """Graphs the bridge has compiled so far; None when the counter is unreadable."""
    # graph_compilation counts every new graph the bridge compiles: a new input shape
    # is a new graph, the main Gaudi performance trap.
    try:
        metrics = importlib.import_module("habana_frameworks.torch.hpu.metrics")
        return int(dict(metrics.metric_global("graph_compilation").stats()).get("TotalNumber", 0))
    except Exception:
        return None


def precision(index: int) -> str:
    return "bf16"  # bf16 runs on every Gaudi generation (fp16 not on Gaudi1: see device.CHIPS)


def versions() -> dict[str, str | None]:
    """The bridge's version, from its distribution or the module."""
    try:
        found = importlib.metadata.version("habana-torch-plugin")
    except importlib.metadata.PackageNotFoundError:
        found = getattr(bridge(), "__version__", None)
    return {"habana_frameworks": found}


# --------------------------------------------------------------------------- ops
def fused_adamw(params, **kw):
    """hpex FusedAdamW over ``params`` (it rejects keywords it does not know)."""
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW

    return FusedAdamW(params, **kw)


def fused_clip_norm(params, max_norm: float):
    """hpex FusedClipNorm for ``params``; call its ``clip_norm(params)`` before each step."""
    from habana_frameworks.torch.hpex.normalization import FusedClipNorm

    return FusedClipNorm(params, max_norm)


def inference_model(model, mode: str | None):
    """``model`` in eval mode, wrapped in HPU graphs in lazy mode (the only mode they work in)."""
    if mode == "lazy":
        from habana_frameworks.torch.hpu import wrap_in_hpu_graph

        return wrap_in_hpu_graph(model.eval(), disable_tensor_cache=True)
    return model.eval()
