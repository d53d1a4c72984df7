"""The backend table: one small record per device kind (``hpu``, ``cuda``, ``cpu``).

Every choice that depends on the device (precision, fused optimizer, compile
backend and default, static shapes, distributed backend, profiler activities, how to read
memory, ``mark_step``) reads a record from ``BACKENDS``; every hardware figure (HBM, peak
TFLOP/s, which precisions run) comes from ``chips.CHIPS`` (served here too), and
``chip()`` finds a device's record there. Nothing here imports ``torch`` or
``habana_frameworks`` at module import time; the Habana bridge lives in ``_bridge``.
"""

from __future__ import annotations

import html
import importlib.metadata
import os
import resource
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import _bridge, monitor
from ._bridge import MODES, hpu_mode, recipe_cache, set_hpu_mode  # noqa: F401  (public here too)
from .chips import CHIPS, Chip, GiB, match  # noqa: F401  (public here too)
from .monitor import Unavailable, cpu_name

ORDER = ("hpu", "cuda", "cpu")
ENV_DEVICE = "WORKBENCH_DEVICE"
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


# --------------------------------------------------------------------------- helpers
def _torch():
    import torch  # imported on first use, never at `import workbench`

    return torch


def version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- cuda
def _cuda_available() -> bool:
    try:
        return bool(_torch().cuda.is_available())
    except Exception:
        return False


def _cuda_memory(index: int) -> dict[str, int]:
    cuda = _torch().cuda
    return {"allocated": int(cuda.memory_allocated(index)), "peak": int(cuda.max_memory_allocated(index)),
            "total": int(cuda.get_device_properties(index).total_memory)}


def _cuda_precision(index: int) -> str:
    return "bf16" if _torch().cuda.is_bf16_supported() else "fp16"


# --------------------------------------------------------------------------- cpu
def _cpu_memory(index: int) -> dict[str, int]:
    import psutil

    rss = int(psutil.Process().memory_info().rss)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB
    # ru_maxrss is updated lazily by the kernel: the peak is at least the current RSS
    return {"allocated": rss, "peak": max(rss, int(peak)), "total": int(psutil.virtual_memory().total)}


# --------------------------------------------------------------------------- backends
def _noop(*_a: Any) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    """What the workbench needs to know about one kind of device, and its policies."""

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
    # every device of this kind, read through its management library (never torch): monitor.read
    monitor: Callable[[], list[dict[str, Any]]] = list
    oom_marker: str = "out of memory"
    # Default least seconds between a run's events: reading the loss at a logging step makes
    # the host wait for every step queued on the device (0 where nothing runs ahead: CPU).
    log_interval_s: float = 0.5
    static_shapes: bool = False  # pad batches to a few fixed shapes (each new shape recompiles)
    compile_default: Callable[[str | None], bool] = lambda mode: False  # torch.compile unasked
    ddp_find_unused_parameters: bool | None = None  # DDP's search for unused parameters (None: the Trainer's)
    profiler_activities: tuple[str, ...] = ("cpu",)  # torch.profiler.ProfilerActivity names
    inference: Callable[[Any, str | None], Any] = lambda model, mode: model.eval()  # ready to evaluate
    rank_index: bool = False  # under torchrun, rank r uses device index LOCAL_RANK (else: the one it sees)
    k8s_resource: str | None = None  # the extended resource a Kubernetes pod requests one device by
    slurm_gres: str | None = None  # Slurm's GRES name for one device (None: no standard one; Gaudi's is per site)


BACKENDS: dict[str, Backend] = {
    "hpu": Backend(
        kind="hpu", title="Intel Gaudi", torch_device="hpu", dist_backend="hccl",
        compile_backend="hpu_backend",  # inductor is not supported on HPU
        optimizer="hpex_fused_adamw",
        available=_bridge.available, count=_bridge.count, name=_bridge.name, memory=_bridge.memory,
        reset_peak=_bridge.reset_peak, synchronize=_bridge.synchronize, mark_step=_bridge.mark_step,
        precision=_bridge.precision, generation=_bridge.generation, mode=_bridge.hpu_mode,
        versions=_bridge.versions, compiles=_bridge.compiles, monitor=monitor.read_hpu,
        oom_marker="PT_DEVMEM Allocation failed",
        static_shapes=True,  # every new input shape compiles a new graph
        compile_default=lambda mode: mode == "eager",  # eager mode is meant to run compiled
        profiler_activities=("cpu", "hpu"),
        ddp_find_unused_parameters=False,  # optimum-habana's default; the search walks the graph every step
        inference=_bridge.inference_model, k8s_resource="habana.ai/gaudi",  # HPU graphs in lazy mode; Intel's device plugin
    ),
    "cuda": Backend(
        kind="cuda", title="NVIDIA GPU", torch_device="cuda", dist_backend="nccl",
        compile_backend=None, optimizer="adamw_torch_fused",
        available=_cuda_available, count=lambda: int(_torch().cuda.device_count()),
        name=lambda i: str(_torch().cuda.get_device_name(i)), memory=_cuda_memory,
        reset_peak=lambda i: _torch().cuda.reset_peak_memory_stats(i),
        synchronize=lambda i: _torch().cuda.synchronize(i), mark_step=_noop, precision=_cuda_precision,
        monitor=monitor.read_cuda,
        oom_marker="CUDA out of memory", profiler_activities=("cpu", "cuda"), rank_index=True, k8s_resource="nvidia.com/gpu", slurm_gres="gpu",
    ),
    "cpu": Backend(
        kind="cpu", title="CPU", torch_device="cpu", dist_backend="gloo", compile_backend=None,
        optimizer="adamw_torch_fused",  # torch's AdamW, fused kernel: CPU support since torch 2.4
        available=lambda: True, count=lambda: 1, name=cpu_name, memory=_cpu_memory,
        reset_peak=_noop,  # the peak RSS of a process cannot be reset
        synchronize=_noop, mark_step=_noop,
        precision=lambda i: "fp32",  # bf16 autocast on most CPUs is slower than fp32
        log_interval_s=0.0,  # the CPU computes as the host asks: reading the loss waits for nothing
        monitor=monitor.read_cpu,
    ),
}


def backend(kind: str) -> Backend:
    """The record for ``kind``; an unknown kind lists the valid ones."""
    try:
        return BACKENDS[kind]
    except KeyError:
        raise ValueError(f"unknown device {kind!r}; known: {', '.join(ORDER)}") from None


# --------------------------------------------------------------------------- chips
def chip(device: str | DeviceInfo) -> Chip | None:
    """The ``CHIPS`` record of a name (``"H100"``, ``"NVIDIA A100-SXM4-40GB"``) or a DeviceInfo.

    A DeviceInfo of a model the table does not know gives None; a name that matches no
    chip raises an error that lists the known ones.
    """
    if isinstance(device, DeviceInfo):
        return (match(device.generation, device.kind) or match(device.name, device.kind)
                or match(device.kind, device.kind))
    found = match(device)
    if found is None:
        raise ValueError(f"unknown device {device!r}; known: {', '.join(CHIPS)}")
    return found


def peak_tflops(device: str | DeviceInfo, precision: str = "bf16") -> float | None:
    """Dense peak TFLOP/s of ``device`` in ``precision``; None where unknown (CPUs, Gaudi1).

    ``precision="auto"`` is the device's own choice (a DeviceInfo) or bf16 (a name).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if precision == "auto":
        precision = device.precision if isinstance(device, DeviceInfo) else "bf16"
    found = chip(device)
    return found.tflops.get(precision) if found is not None else None


# --------------------------------------------------------------------------- DeviceInfo
def fmt_bytes(n: int | None) -> str:
    """Bytes as a short human string (GiB, MiB); "-" for none."""
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

    @property
    def chip(self) -> Chip | None:
        """This device's ``CHIPS`` record; None for a model the table does not know."""
        return chip(self)

    def resolve_precision(self, precision: str = "auto") -> str:
        """``precision`` checked against ``PRECISIONS`` and the chip; ``auto`` is the backend's choice."""
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
        p = self.precision if precision == "auto" else precision
        found = self.chip
        if found is not None and found.instead(p):
            raise ValueError(f"{found.name} has no {p}: use precision={found.instead(p)!r}")
        return p

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

    def dynamo_graphs(self) -> int | None:
        """Graphs ``torch.compile`` has traced so far in this process, on any device (a
        count that keeps rising after warm-up means recompiles); None before anything was
        compiled."""
        # dynamo's own counters (torch._dynamo.utils.counters["stats"]["unique_graphs"]):
        # every traced graph, recompiles for new shapes included. Never imports dynamo.
        utils = sys.modules.get("torch._dynamo.utils")
        stats = getattr(utils, "counters", {}).get("stats", {}) if utils is not None else {}
        return stats.get("unique_graphs")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _rows(self) -> list[tuple[str, str]]:
        rows = [("device", f"{self.kind} x{self.count}" if self.available else f"{self.kind} (not available)"),
                ("name", self.name), ("memory", fmt_bytes(self.total_memory))]
        rows += [(k, v) for k, v in (("generation", self.generation), ("mode", self.mode)) if v]
        rows += [("precision", self.precision), ("distributed", self.dist_backend)]
        rows += [(k, v or "-") for k, v in self.versions.items()]
        return rows

    def __repr__(self) -> str:
        return "DeviceInfo(" + ", ".join(f"{k}={v}" for k, v in self._rows()) + ")"

    def _repr_html_(self) -> str:
        cells = "".join(f"<tr><td style='padding:1px 8px;color:#666'>{html.escape(k)}</td>"
                        f"<td style='padding:1px 8px'><b>{html.escape(str(v))}</b></td></tr>" for k, v in self._rows())
        colour = "#2e7d32" if self.available else "#9e9e9e"
        return (f"<div style='display:inline-block;border:1px solid #ddd;border-left:4px solid "
                f"{colour};border-radius:4px;padding:4px 6px;font:12px sans-serif'>"
                f"<div style='font-weight:bold;margin:2px 8px'>{html.escape(self.backend.title)}</div>"
                f"<table style='border-collapse:collapse'>{cells}</table></div>")


def _parse(spec: str) -> tuple[str, int]:
    kind, _, idx = spec.strip().lower().partition(":")
    backend(kind)  # validates the kind
    if idx and not idx.isdigit():
        raise ValueError(f"bad device index in {spec!r}; write e.g. '{kind}:0'")
    return kind, int(idx or 0)


def _info(kind: str, index: int = 0) -> DeviceInfo:
    b = BACKENDS[kind]
    versions = {"torch": version("torch"), "transformers": version("transformers"),
                "habana_frameworks": version("habana-torch-plugin"), **b.versions()}
    if not b.available():
        return DeviceInfo(kind=kind, available=False, dist_backend=b.dist_backend,
                          mode=b.mode(), versions=versions)
    count = b.count()
    if index >= count:
        raise ValueError(f"{kind}:{index} does not exist; this machine has {count} {kind} device(s)")
    return DeviceInfo(kind=kind, available=True, count=count, index=index, name=b.name(index),
                      total_memory=b.memory(index)["total"], generation=b.generation(), mode=b.mode(),
                      precision=b.precision(index), dist_backend=b.dist_backend, versions=versions)


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


def device_in_mode(kind: str = "auto", mode: str | None = None) -> DeviceInfo:
    """``device(kind)``, with Gaudi's execution mode set first where ``mode`` asks for one (the
    bridge reads the mode once, when it loads); ``mode="lazy"`` off Gaudi is refused."""
    before = os.environ.get("PT_HPU_LAZY_MODE")
    if mode is not None:
        set_hpu_mode(mode)  # before the device probe below loads the bridge
    dev = device(kind)  # fails early, with the fix, on an unavailable device
    if mode == "lazy" and dev.kind != "hpu":
        os.environ.pop("PT_HPU_LAZY_MODE", None)
        if before is not None:
            os.environ["PT_HPU_LAZY_MODE"] = before
        raise ValueError(f"mode='lazy' is Gaudi's graph mode; this run is on {dev.kind}: use mode='eager' or 'compile'")
    return dev


def inference_model(model, device: DeviceInfo | None = None):
    """``model`` ready for evaluation or generation: wrapped in HPU graphs in lazy mode
    (replays recorded graphs instead of re-launching every op), unchanged elsewhere."""
    device = device or globals()["device"]()
    return device.backend.inference(model, device.mode)


def monitor_all() -> dict[str, Any]:
    """Every device's current reading, for the side panel (never imports torch).

    Returns
    -------
    dict
        ``{"time": unix seconds, "devices": [reading, ...], "notes": [{"kind", "title",
        "why"}, ...]}``: the readings (``monitor.read``) of every backend in priority
        order, and for each backend that cannot be read here, why.
    """
    import time

    out: dict[str, Any] = {"time": time.time(), "devices": [], "notes": []}
    for kind in ORDER:
        try:
            out["devices"] += BACKENDS[kind].monitor()
        except Unavailable as e:
            out["notes"].append({"kind": kind, "title": BACKENDS[kind].title, "why": e.why})
    return out


def clear_cache() -> None:
    """Forget cached probes and started management libraries (for tests that swap the environment)."""
    _bridge.clear_cache()
    monitor.clear_cache()
