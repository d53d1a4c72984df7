"""The backend table: one small record per device kind (``hpu``, ``cuda``, ``cpu``).

Every choice that depends on the device (precision, fused optimizer, compile backend,
distributed backend, how to read memory, ``mark_step``) reads a record from ``BACKENDS``.
Nothing here imports ``torch`` or ``habana_frameworks`` at module import time: probes use
``importlib.util.find_spec`` and are cached; the Habana bridge is imported on first use.
"""

from __future__ import annotations

import html
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ORDER = ("hpu", "cuda", "cpu")
ENV_DEVICE = "WORKBENCH_DEVICE"


# --------------------------------------------------------------------------- helpers
def _torch():
    import torch  # imported on first use, never at `import workbench`

    return torch


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@cache
def _has_module(name: str) -> bool:
    """True when ``name`` can be imported; looks without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def hpu_mode() -> str:
    """The HPU execution mode this process uses: ``"lazy"`` or ``"eager"``.

    Fixed per process by ``PT_HPU_LAZY_MODE`` before the bridge is imported (current
    Gaudi releases default to eager, 0).
    """
    return "lazy" if os.environ.get("PT_HPU_LAZY_MODE", "0").strip() == "1" else "eager"


MODES = ("eager", "lazy", "compile")


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


@cache
def _hpu_bridge():
    """Import the Habana bridge (registers ``torch.hpu``); None when it is missing."""
    if not _has_module("habana_frameworks"):
        return None
    # Read once, when the bridge loads (the first device probe, before any run directory
    # exists): a cache shared by all runs, so later runs skip recompiling the same graphs.
    os.environ.setdefault("PT_HPU_RECIPE_CACHE_CONFIG", f"{recipe_cache()},false,4096")
    try:
        return importlib.import_module("habana_frameworks.torch")
    except Exception:  # a broken install counts as "no HPU", never a crash at probe time
        return None


def _hpu():
    if _hpu_bridge() is None:
        raise RuntimeError(
            "no Habana bridge in this environment; run inside Intel's Gaudi container "
            "(habana_frameworks is not on PyPI)"
        )
    return _torch().hpu


# --------------------------------------------------------------------------- hpu
def _hpu_available() -> bool:
    if _hpu_bridge() is None:
        return False
    try:
        return bool(_torch().hpu.is_available())
    except Exception:
        return False


def _hpu_count() -> int:
    return int(_hpu().device_count())


def _hpu_name(index: int) -> str:
    return str(_hpu().get_device_name(index))


def _hpu_generation() -> str | None:
    try:
        htexp = importlib.import_module("habana_frameworks.torch.utils.experimental")
        kind = htexp._get_device_type()
        names = {
            htexp.synDeviceType.synDeviceGaudi: "Gaudi1",
            htexp.synDeviceType.synDeviceGaudi2: "Gaudi2",
            htexp.synDeviceType.synDeviceGaudi3: "Gaudi3",
        }
        return names.get(kind)
    except Exception:
        return None


def _hpu_memory(index: int) -> dict[str, int]:
    # memory_stats() is the source of truth on Gaudi: hl-smi does not see tensor
    # allocations. Keys: InUse, MaxInUse, Limit (bytes).
    stats = _hpu().memory_stats(index)
    return {
        "allocated": int(stats.get("InUse", 0)),
        "peak": int(stats.get("MaxInUse", 0)),
        "total": int(stats.get("Limit", 0)),
    }


def _hpu_reset_peak(index: int) -> None:
    _hpu().reset_peak_memory_stats(index)


def _hpu_mark_step() -> None:
    # Lazy mode accumulates ops into a graph that runs at mark_step; in eager mode the
    # call is a no-op that only warns, so we skip it.
    if hpu_mode() == "lazy":
        importlib.import_module("habana_frameworks.torch.core").mark_step()


def _hpu_compiles() -> int | None:
    # graph_compilation counts every new graph the bridge compiles: a new input shape
    # is a new graph, the main Gaudi performance trap.
    try:
        metrics = importlib.import_module("habana_frameworks.torch.hpu.metrics")
        return int(dict(metrics.metric_global("graph_compilation").stats()).get("TotalNumber", 0))
    except Exception:
        return None


def _hpu_sync(index: int) -> None:
    _hpu().synchronize()


def _hpu_precision(index: int) -> str:
    return "bf16"  # bf16 runs on every Gaudi generation; fp16 not on Gaudi1


def _hpu_versions() -> dict[str, str | None]:
    bridge = _version("habana-torch-plugin")
    if bridge is None and _hpu_bridge() is not None:
        bridge = getattr(_hpu_bridge(), "__version__", None)
    return {"habana_frameworks": bridge}


# --------------------------------------------------------------------------- cuda
def _cuda_available() -> bool:
    try:
        return bool(_torch().cuda.is_available())
    except Exception:
        return False


def _cuda_memory(index: int) -> dict[str, int]:
    cuda = _torch().cuda
    return {
        "allocated": int(cuda.memory_allocated(index)),
        "peak": int(cuda.max_memory_allocated(index)),
        "total": int(cuda.get_device_properties(index).total_memory),
    }


def _cuda_precision(index: int) -> str:
    return "bf16" if _torch().cuda.is_bf16_supported() else "fp16"


# --------------------------------------------------------------------------- cpu
def _cpu_name(index: int) -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB


def _cpu_memory(index: int) -> dict[str, int]:
    import psutil

    rss = int(psutil.Process().memory_info().rss)
    return {
        "allocated": rss,
        "peak": max(rss, _peak_rss()),  # ru_maxrss is updated lazily by the kernel
        "total": int(psutil.virtual_memory().total),
    }


# --------------------------------------------------------------------------- table
def _noop(*_a: Any) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    """What the workbench needs to know about one kind of device."""

    kind: str
    title: str
    torch_device: str
    dist_backend: str
    compile_backend: str | None  # backend for torch.compile; None = opt-in inductor
    optimizer: str  # "hpex_fused_adamw" or a transformers `optim` name
    available: Callable[[], bool]
    count: Callable[[], int]
    name: Callable[[int], str]
    memory: Callable[[int], dict[str, int]]
    reset_peak: Callable[[int], None]
    synchronize: Callable[[int], None]
    mark_step: Callable[[], None]
    precision: Callable[[int], str]
    generation: Callable[[], str | None] = lambda: None
    mode: Callable[[], str | None] = lambda: None
    versions: Callable[[], dict[str, str | None]] = dict
    compiles: Callable[[], int | None] = lambda: None  # graph compilations so far
    oom_marker: str = "out of memory"
    # Default least seconds between a run's events: reading the loss at a logging step makes
    # the host wait for every step queued on the device (0 where nothing runs ahead: CPU).
    log_interval_s: float = 0.5


BACKENDS: dict[str, Backend] = {
    "hpu": Backend(
        kind="hpu",
        title="Intel Gaudi",
        torch_device="hpu",
        dist_backend="hccl",
        compile_backend="hpu_backend",  # inductor is not supported on HPU
        optimizer="hpex_fused_adamw",
        available=_hpu_available,
        count=_hpu_count,
        name=_hpu_name,
        memory=_hpu_memory,
        reset_peak=_hpu_reset_peak,
        synchronize=_hpu_sync,
        mark_step=_hpu_mark_step,
        precision=_hpu_precision,
        generation=_hpu_generation,
        mode=hpu_mode,
        versions=_hpu_versions,
        compiles=_hpu_compiles,
        oom_marker="PT_DEVMEM Allocation failed",
    ),
    "cuda": Backend(
        kind="cuda",
        title="NVIDIA GPU",
        torch_device="cuda",
        dist_backend="nccl",
        compile_backend=None,
        optimizer="adamw_torch_fused",
        available=_cuda_available,
        count=lambda: int(_torch().cuda.device_count()),
        name=lambda i: str(_torch().cuda.get_device_name(i)),
        memory=_cuda_memory,
        reset_peak=lambda i: _torch().cuda.reset_peak_memory_stats(i),
        synchronize=lambda i: _torch().cuda.synchronize(i),
        mark_step=_noop,
        precision=_cuda_precision,
        oom_marker="CUDA out of memory",
    ),
    "cpu": Backend(
        kind="cpu",
        title="CPU",
        torch_device="cpu",
        dist_backend="gloo",
        compile_backend=None,
        optimizer="adamw_torch_fused",  # torch's AdamW, fused kernel: CPU support since torch 2.4
        available=lambda: True,
        count=lambda: 1,
        name=_cpu_name,
        memory=_cpu_memory,
        reset_peak=_noop,  # the peak RSS of a process cannot be reset
        synchronize=_noop,
        mark_step=_noop,
        precision=lambda i: "fp32",  # bf16 autocast on most CPUs is slower than fp32
        log_interval_s=0.0,  # the CPU computes as the host asks: reading the loss waits for nothing
    ),
}


def backend(kind: str) -> Backend:
    """The record for ``kind``; an unknown kind lists the valid ones."""
    try:
        return BACKENDS[kind]
    except KeyError:
        raise ValueError(f"unknown device {kind!r}; known: {', '.join(ORDER)}") from None


# --------------------------------------------------------------------------- DeviceInfo
def _fmt_bytes(n: int | None) -> str:
    if not n:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@dataclass
class DeviceInfo:
    """One device kind as seen from this process.

    Attributes
    ----------
    kind : str
        ``"hpu"``, ``"cuda"`` or ``"cpu"``.
    available : bool
        Whether this process can use it.
    count : int
        Number of devices of this kind (0 when unavailable).
    index : int
        The device this info describes (``"cuda:1"`` gives 1).
    name, total_memory, generation, mode, precision, dist_backend, versions
        Hardware name, bytes of device memory, Gaudi generation (HPU only), HPU
        execution mode (``"lazy"``/``"eager"``), preferred training precision,
        torch.distributed backend, and the versions of torch, transformers and the bridge.
    """

    kind: str
    available: bool
    count: int = 0
    index: int = 0
    name: str = "-"
    total_memory: int = 0
    generation: str | None = None
    mode: str | None = None
    precision: str = "fp32"
    dist_backend: str = "gloo"
    versions: dict[str, str | None] = field(default_factory=dict)

    @property
    def backend(self) -> Backend:
        return BACKENDS[self.kind]

    @property
    def torch_device(self) -> str:
        """The string to pass to ``torch.device`` / ``.to()``."""
        return self.kind if self.kind == "cpu" else f"{self.backend.torch_device}:{self.index}"

    def _require(self) -> None:
        if not self.available:
            raise RuntimeError(f"device {self.kind!r} is not available in this process")

    def memory(self) -> dict[str, int]:
        """Memory in bytes with the same keys everywhere: allocated, peak, total.

        On CPU, allocated is the process RSS, peak the peak RSS, total the system memory.
        """
        self._require()
        return self.backend.memory(self.index)

    def reset_peak_memory(self) -> None:
        self._require()
        self.backend.reset_peak(self.index)

    def synchronize(self) -> None:
        """Wait for queued device work (call before reading a clock)."""
        self._require()
        self.backend.synchronize(self.index)

    def mark_step(self) -> None:
        """Run the accumulated graph in HPU lazy mode; a no-op everywhere else."""
        self._require()
        self.backend.mark_step()

    def compiles(self) -> int | None:
        """Graphs compiled so far (HPU); None where the backend does not count them."""
        return self.backend.compiles() if self.available else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "available": self.available,
            "count": self.count,
            "index": self.index,
            "name": self.name,
            "total_memory": self.total_memory,
            "generation": self.generation,
            "mode": self.mode,
            "precision": self.precision,
            "dist_backend": self.dist_backend,
            "versions": dict(self.versions),
        }

    def _rows(self) -> list[tuple[str, str]]:
        rows = [
            ("device", f"{self.kind} x{self.count}" if self.available else f"{self.kind} (not available)"),
            ("name", self.name),
            ("memory", _fmt_bytes(self.total_memory)),
        ]
        if self.generation:
            rows.append(("generation", self.generation))
        if self.mode:
            rows.append(("mode", self.mode))
        rows += [("precision", self.precision), ("distributed", self.dist_backend)]
        rows += [(k, v or "-") for k, v in self.versions.items()]
        return rows

    def __repr__(self) -> str:
        return "DeviceInfo(" + ", ".join(f"{k}={v}" for k, v in self._rows()) + ")"

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td style='padding:1px 8px;color:#666'>{html.escape(k)}</td>"
            f"<td style='padding:1px 8px'><b>{html.escape(str(v))}</b></td></tr>"
            for k, v in self._rows()
        )
        colour = "#2e7d32" if self.available else "#9e9e9e"
        return (
            f"<div style='display:inline-block;border:1px solid #ddd;border-left:4px solid "
            f"{colour};border-radius:4px;padding:4px 6px;font:12px sans-serif'>"
            f"<div style='font-weight:bold;margin:2px 8px'>{html.escape(self.backend.title)}</div>"
            f"<table style='border-collapse:collapse'>{cells}</table></div>"
        )


def _parse(spec: str) -> tuple[str, int]:
    kind, _, idx = spec.strip().lower().partition(":")
    backend(kind)  # validates the kind
    if idx and not idx.isdigit():
        raise ValueError(f"bad device index in {spec!r}; write e.g. '{kind}:0'")
    return kind, int(idx or 0)


def _info(kind: str, index: int = 0) -> DeviceInfo:
    b = BACKENDS[kind]
    versions = {
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "habana_frameworks": _version("habana-torch-plugin"),
    }
    versions.update(b.versions())
    if not b.available():
        return DeviceInfo(kind=kind, available=False, dist_backend=b.dist_backend,
                          mode=b.mode(), versions=versions)
    count = b.count()
    if index >= count:
        raise ValueError(f"{kind}:{index} does not exist; this machine has {count} {kind} device(s)")
    return DeviceInfo(
        kind=kind,
        available=True,
        count=count,
        index=index,
        name=b.name(index),
        total_memory=b.memory(index)["total"],
        generation=b.generation(),
        mode=b.mode(),
        precision=b.precision(index),
        dist_backend=b.dist_backend,
        versions=versions,
    )


def devices() -> list[DeviceInfo]:
    """Every backend in priority order (hpu, cuda, cpu), with its availability."""
    return [_info(kind) for kind in ORDER]


def device(kind: str | DeviceInfo | None = None) -> DeviceInfo:
    """The device to train on.

    Parameters
    ----------
    kind : str, optional
        ``"hpu"``, ``"cuda"``, ``"cpu"`` or ``"auto"``, optionally with an index
        (``"cuda:1"``). Default: ``$WORKBENCH_DEVICE`` when set, else the best available
        backend in the order hpu > cuda > cpu.

    Examples
    --------
    >>> import workbench as wb
    >>> wb.device("cpu").kind
    'cpu'
    """
    if isinstance(kind, DeviceInfo):
        return kind
    source = "argument"
    if kind in (None, "auto"):
        kind = os.environ.get(ENV_DEVICE, "").strip() or None
        source = f"${ENV_DEVICE}"
    if kind in (None, "auto"):
        for k in ORDER:
            if BACKENDS[k].available():
                return _info(k)
    name, index = _parse(kind)
    info = _info(name, index)
    if not info.available:
        have = [k for k in ORDER if BACKENDS[k].available()]
        fix = f"unset {ENV_DEVICE}" if source != "argument" else "pass device='auto'"
        raise RuntimeError(
            f"device {name!r} (from {source}) is not available here; available: "
            f"{', '.join(have)}. {fix[0].upper() + fix[1:]} or choose one of those."
        )
    return info


def inference_model(model, device: DeviceInfo | None = None):
    """``model`` ready for evaluation or generation: wrapped in HPU graphs in lazy mode
    (replays recorded graphs instead of re-launching every op), unchanged elsewhere."""
    device = device or globals()["device"]()
    if device.kind == "hpu" and device.mode == "lazy":
        from habana_frameworks.torch.hpu import wrap_in_hpu_graph

        return wrap_in_hpu_graph(model.eval(), disable_tensor_cache=True)
    return model.eval()


def clear_cache() -> None:
    """Forget cached probes (for tests that swap the environment)."""
    _has_module.cache_clear()
    _hpu_bridge.cache_clear()


version = _version  # public name (TODO(lead): fold into the device helper's module)
