"""The one module that imports the Habana bridge (``habana_frameworks``).

``device.py`` builds the HPU backend record from these functions, and the Trainer gets
FusedAdamW from here, so no other module imports the bridge. Nothing
here imports ``torch`` or the bridge at module import time: the bridge loads on the first
probe (``bridge()``), after the execution mode and the recipe cache have been chosen.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import warnings
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
def loaded() -> bool:
    """Whether the bridge is in this process already (imported, or autoloaded by torch)."""
    return "habana_frameworks.torch" in sys.modules


def hpu_mode() -> str | None:
    """The HPU execution mode of this process, ``"lazy"`` or ``"eager"``, as the bridge
    reports it (``utils.internal.is_lazy()``); None without a bridge.

    The bridge reads ``PT_HPU_LAZY_MODE`` once and keeps its answer, so the variable can
    disagree with the real mode afterwards; anything but "0" means lazy to it.
    """
    if bridge() is None:
        return None
    return "lazy" if _is_lazy() else "eager"


def _is_lazy() -> bool:
    """The loaded bridge's answer (``utils.internal.is_lazy``), else its rule for the variable."""
    try:
        return bool(importlib.import_module("habana_frameworks.torch.utils.internal").is_lazy())
    except Exception:
        return os.environ.get("PT_HPU_LAZY_MODE", "1") != "0"


def set_hpu_mode(mode: str) -> None:
    """Choose Gaudi's execution mode for this process, before the bridge loads.

    ``lazy`` sets ``PT_HPU_LAZY_MODE=1``; ``eager`` and ``compile`` set 0 (compile adds
    ``torch.compile`` at train time). The bridge fixes the mode when it loads, which current
    bridges do on ``import torch`` (a ``torch.backends`` entry point, unless lazy mode is
    chosen): asking for another mode afterwards raises an error that says to restart.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    want = "lazy" if mode == "lazy" else "eager"
    if loaded():
        have = hpu_mode()
        if have != want:
            raise RuntimeError(
                f"the Habana bridge is already loaded in {have} mode and the mode is fixed per "
                f"process: restart the kernel and ask for mode={mode!r} before importing torch "
                f"(it loads the bridge itself) or anything that touches the HPU, or set "
                f"PT_HPU_LAZY_MODE={int(want == 'lazy')} before starting Python"
            )
        return
    os.environ["PT_HPU_LAZY_MODE"] = "1" if want == "lazy" else "0"


def recipe_cache() -> Path:
    """Where compiled HPU graphs (recipes) are kept between runs and processes."""
    from ..bundled import cache_dir

    return cache_dir() / "hpu-recipes"


# --------------------------------------------------------------------------- bridge
@cache
def bridge():
    """Import the Habana bridge (registers ``torch.hpu``); None when it is missing."""
    if not has_bridge():
        return None
    if not loaded():
        # Unset, the mode is lazy to 1.19-era bridges and eager to current ones: say which.
        os.environ.setdefault("PT_HPU_LAZY_MODE", "0")
        # Read once, when the bridge loads (the first device probe, before any run directory
        # exists): a cache shared by all runs, so later runs skip recompiling the same graphs.
        os.environ.setdefault("PT_HPU_RECIPE_CACHE_CONFIG", f"{recipe_cache()},false,4096")
        _warn_if_nfs(os.environ["PT_HPU_RECIPE_CACHE_CONFIG"].split(",")[0])
    try:
        module = importlib.import_module("habana_frameworks.torch")
    except Exception:  # a broken install counts as "no HPU", never a crash at probe time
        return None
    # Libraries that read the variable (transformers, accelerate: unset = lazy) must agree
    # with the mode the bridge fixed, also when something loaded it before we could set it.
    os.environ["PT_HPU_LAZY_MODE"] = "1" if _is_lazy() else "0"
    return module


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
    # The bridge's disk cache serialises processes with flock() on files in this directory
    # (cache_file_handler.cpp in the bridge): on NFS such locks depend on the server's lock
    # manager, and every graph load crosses the network.
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
    return int(torch_hpu().device_count())


def _only_device_0(index: int) -> int:
    # Each process drives one Gaudi, index 0: the card comes from the environment
    # (HLS_MODULE_ID, which importing the bridge sets from LOCAL_RANK under torchrun), and the
    # bridge's device guard fails for any other index (HPUGuardImpl.h). No "hpu:{rank}".
    if index != 0:
        raise ValueError(
            f"hpu:{index}: each process drives one Gaudi, index 0 (under torchrun the bridge picks "
            f"the card from LOCAL_RANK; HABANA_VISIBLE_MODULES limits the cards); use device='hpu'"
        )
    return index


def name(index: int) -> str:
    return str(torch_hpu().get_device_name(_only_device_0(index)))


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
    stats = torch_hpu().memory_stats(_only_device_0(index))
    return {
        "allocated": int(stats.get("InUse", 0)),
        "peak": int(stats.get("MaxInUse", 0)),
        "total": int(stats.get("Limit", 0)),
    }


def reset_peak(index: int) -> None:
    torch_hpu().reset_peak_memory_stats(_only_device_0(index))


def synchronize(index: int) -> None:
    torch_hpu().synchronize()


def mark_step() -> None:
    """Run the graph accumulated so far (lazy mode only)."""
    # Lazy mode accumulates ops into a graph that runs at mark_step; in eager mode the
    # bridge's mark_step is a no-op (it warned once when the bridge loaded), so we skip it.
    if hpu_mode() == "lazy":
        importlib.import_module("habana_frameworks.torch.core").mark_step()


def compiles() -> int | None:
    """Graphs the bridge has compiled so far; None when the counter is unreadable."""
    # graph_compilation counts the graphs the bridge compiles for lazy mode and torch.compile
    # (a new input shape is a new graph, the main Gaudi performance trap); graphs compiled
    # for single ops in eager mode are not counted, so eager mode without compile stays near
    # 0. metric_global() returns None for a metric that is not registered.
    try:
        metric = importlib.import_module("habana_frameworks.torch.hpu.metrics").metric_global(
            "graph_compilation"
        )
    except Exception:
        return None
    if metric is None:
        return None
    return int(dict(metric.stats()).get("TotalNumber", 0))


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
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW

    return FusedAdamW


# Each graph kept holds device memory: past this many, new input shapes run without one.
MAX_HPU_GRAPHS = 32


def inference_model(model, mode: str | None):
    """``model`` in eval mode; in lazy mode (the only one HPU graphs work in) moved to the
    device first and wrapped in HPU graphs, at most ``MAX_HPU_GRAPHS`` of them."""
    model = model.eval()
    if mode != "lazy":
        return model
    model = model.to("hpu")  # wrap the model where it will run (optimum-habana does the same)
    from habana_frameworks.torch.hpu import wrap_in_hpu_graph

    return wrap_in_hpu_graph(model, disable_tensor_cache=True, max_graphs=MAX_HPU_GRAPHS)
