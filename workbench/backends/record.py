"""The backend record: what the workbench needs to know about one kind of device, in one
small record per concern (``DeviceCalls``, ``TrainingPolicy``, ``Monitoring``,
``Deployment``). ``hpu.py``, ``cuda.py`` and ``cpu.py`` each build one from named functions;
every choice that depends on the device reads it (never an ``if device == "hpu"``)."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def library_versions() -> dict[str, str | None]:
    """The versions a run records and a bug report needs, read one way: the workbench's own
    (``workbench.__version__``), torch, transformers, accelerate, datasets, the Habana bridge."""
    from ..version import __version__

    return {
        "workbench": __version__,
        "torch": version("torch"),
        "transformers": version("transformers"),
        "accelerate": version("accelerate"),
        "datasets": version("datasets"),
        "habana_frameworks": version("habana-torch-plugin"),
    }


def noop(*_a: Any) -> None:
    """What a backend does where another one has work to do (``mark_step`` off lazy mode)."""
    return None


@dataclass(frozen=True, kw_only=True)
class PodNeeds:
    """What a Kubernetes pod that drives these devices needs besides the devices themselves."""

    hugepages_2mi: str | None = None  # hugepages-2Mi, requested and limited (a quantity)
    memory: str | None = None  # memory, requested and limited (pods with hugepages need one)
    shm: bool = False  # a memory-backed /dev/shm (emptyDir, medium Memory) instead of 64 MB
    host_ipc: bool = False  # share the host's IPC namespace (hostIPC)
    capabilities: tuple[str, ...] = ()  # Linux capabilities the container adds


@dataclass(frozen=True, kw_only=True)
class DeviceCalls:
    """How the workbench talks to one kind of device: the calls it makes through torch or
    the device's bridge (never an ``if device == "hpu"``)."""

    available: Callable[[], bool]
    count: Callable[[], int]
    name: Callable[[int], str]
    memory: Callable[[int], dict[str, int]]  # this process's use: may take the device (HPU)
    total_memory: Callable[[int], int]  # bytes on the device, read without taking it
    reset_peak: Callable[[int], None]
    synchronize: Callable[[int], None]
    mark_step: Callable[[], None]
    precision: Callable[[int], str]
    generation: Callable[[], str | None] = lambda: None
    mode: Callable[[], str | None] = lambda: None
    versions: Callable[[], dict[str, str | None]] = dict
    compiles: Callable[[], int | None] = lambda: None  # graph compilations so far
    # ops run on the host for want of a device kernel so far, by op name (None: not counted)
    fallbacks: Callable[[], dict[str, int] | None] = lambda: None
    # times the host waited for the device's data so far (None: not counted)
    host_syncs: Callable[[], int | None] = lambda: None
    # the model ready to evaluate
    inference: Callable[[Any, str | None], Any] = lambda model, mode: model.eval()


@dataclass(frozen=True, kw_only=True)
class TrainingPolicy:
    """How a run trains on one kind of device: what the Trainer's arguments take from it,
    and how its out-of-memory error reads."""

    dist_backend: str  # torch.distributed's backend
    compile_backend: str | None  # backend for torch.compile; None = opt-in inductor
    optimizer: str  # "hpex_fused_adamw" or a transformers `optim` name
    oom_marker: str = "out of memory"
    # Default least seconds between a run's events: reading the loss at a logging step makes
    # the host wait for every step queued on the device (0 where nothing runs ahead: CPU).
    log_interval_s: float = 0.5
    static_shapes: bool = False  # pad batches to a few fixed shapes (each new shape recompiles)
    compile_default: Callable[[str | None], bool] = lambda mode: False  # torch.compile unasked
    # DDP's search for unused parameters (None: the Trainer's default)
    ddp_find_unused_parameters: bool | None = None
    profiler_activities: tuple[str, ...] = ("cpu",)  # torch.profiler.ProfilerActivity names
    # what a precision costs on this backend, said when a run asks for it (precision -> why)
    precision_notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Monitoring:
    """How the panel and the doctor read every device of one kind without taking one: its
    management library and the OS."""

    # every device of this kind, read through its management library (never torch)
    monitor: Callable[[], list[dict[str, Any]]] = list
    # every card of this kind with the processes that hold it (from the OS), taking none
    cards: Callable[[], list[Any]] = list
    # (driver version or None, where it was read or why not)
    driver_version: Callable[[], tuple[str | None, str]] = lambda: (None, "no driver")


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """Where processes that drive one kind of device are placed: torchrun's ranks, the
    variable that gives a child its cards, Kubernetes and Slurm."""

    # the variable that restricts the cards a child process may take (None: no such thing)
    visible_env: str | None = None
    # under torchrun, rank r uses device index LOCAL_RANK (else: the one it sees)
    rank_index: bool = False
    k8s_resource: str | None = None  # the extended resource a Kubernetes pod requests one device by
    k8s_pod: PodNeeds = PodNeeds()  # what else such a pod asks for
    # Slurm's GRES name for one device (None: no standard one; Gaudi's is per site)
    slurm_gres: str | None = None


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One kind of device: its names, and a small record per concern (the calls, the
    training policy, the monitoring, the deployment)."""

    kind: str
    title: str
    torch_device: str
    calls: DeviceCalls
    policy: TrainingPolicy
    monitoring: Monitoring = Monitoring()
    deploy: Deployment = Deployment()
