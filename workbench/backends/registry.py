"""The backend table and the devices: one record per device kind (``hpu``, ``cuda``, ``cpu``),
each built in its own file, and ``DeviceInfo``, what ``wb.device()`` says of one of them.
Nothing here imports ``torch`` or ``habana_frameworks`` at module import time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import markup, settings
from . import _bridge, cards, cpu, cuda, hpu, monitor
from .cards import Card
from .chips import CHIPS, Chip, match
from .monitor import Unavailable
from .record import Backend, library_versions

ORDER = ("hpu", "cuda", "cpu")
ENV_DEVICE = settings.DEVICE
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
BACKENDS: dict[str, Backend] = {"hpu": hpu.RECORD, "cuda": cuda.RECORD, "cpu": cpu.RECORD}


def backend(kind: str) -> Backend:
    """The record for ``kind``; an unknown kind lists the valid ones."""
    try:
        return BACKENDS[kind]
    except KeyError:
        raise ValueError(f"unknown device {kind!r}; known: {', '.join(ORDER)}") from None


def step_marker(torch_device) -> Callable[[], None]:
    """The ``mark_step`` of the backend ``torch_device`` (a device or its string) is on: in HPU
    lazy mode it runs the graph so far, elsewhere nothing (as optimum-habana's pipelines do)."""
    kind = str(torch_device).split(":")[0]
    found = BACKENDS.get(kind)
    return found.calls.mark_step if found is not None else _no_step


def _no_step() -> None:
    return None


def compiles_per_shape(torch_device) -> bool:
    """Whether work on ``torch_device`` is compiled into a graph per set of input shapes
    between ``mark_step`` calls (HPU lazy mode), so loops should keep their shapes static."""
    return str(torch_device).split(":")[0] == "hpu" and hpu.hpu_mode() == "lazy"


# --------------------------------------------------------------------------- chips
def chip(device: str | DeviceInfo) -> Chip | None:
    """The ``CHIPS`` record of a name (``"H100"``, ``"NVIDIA A100-SXM4-40GB"``) or a DeviceInfo:
    None for a DeviceInfo the table does not know; a name that matches none raises."""
    if isinstance(device, DeviceInfo):
        return (
            match(device.generation, device.kind)
            or match(device.name, device.kind)
            or match(device.kind, device.kind)
        )
    found = match(device)
    if found is None:
        raise ValueError(f"unknown device {device!r}; known: {', '.join(CHIPS)}")
    return found


# --------------------------------------------------------------------------- DeviceInfo
def fmt_bytes(n: float | None) -> str:
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
    cards : list of Card
        Every card of this kind on the machine, each free or held by the processes the OS
        says have it open (``"held by pid 4242, kernel of 05_llama_lora.ipynb"``).
    held : Card or None
        The card this process holds (on Gaudi, from the first device call until it exits).

    Probing reads the management library (HLML, NVML) and the OS, never the device runtime:
    on Gaudi a card belongs to the first process that touches it, so asking must not touch.
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
    cards: list[Card] = field(default_factory=list)
    held: Card | None = None

    @property
    def holding(self) -> str | None:
        """``"this kernel holds Gaudi 0 (module 3) since 10:42; restart the kernel to free
        it"`` when this process holds a card that stays held until it exits (Gaudi)."""
        if self.held is None or self.backend.deploy.visible_env is None:
            return None
        return cards.holding(self.held)

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
        """``precision`` checked against ``PRECISIONS`` and the chip; ``auto`` is the backend's
        choice."""
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
        """Memory in bytes, keys allocated, peak, total (CPU: the RSS, its peak, the system)."""
        self._require()
        return self.backend.calls.memory(self.index)

    def reset_peak_memory(self) -> None:
        self._require()
        self.backend.calls.reset_peak(self.index)

    def synchronize(self) -> None:
        """Wait for queued device work (call before reading a clock)."""
        self._require()
        self.backend.calls.synchronize(self.index)

    def mark_step(self) -> None:
        """Run the accumulated graph in HPU lazy mode; a no-op everywhere else."""
        self._require()
        self.backend.calls.mark_step()

    def compiles(self) -> int | None:
        """Graphs compiled so far (HPU); None where the backend does not count them."""
        return self.backend.calls.compiles() if self.available else None

    def dynamo_graphs(self) -> int | None:
        """Graphs ``torch.compile`` has traced in this process, on any device (rising after
        warm-up: recompiles); None before anything was compiled."""
        # dynamo's own counters (torch._dynamo.utils.counters["stats"]["unique_graphs"]):
        # every traced graph, recompiles for new shapes included. Never imports dynamo.
        utils = sys.modules.get("torch._dynamo.utils")
        stats = getattr(utils, "counters", {}).get("stats", {}) if utils is not None else {}
        return stats.get("unique_graphs")

    def fallbacks(self) -> dict[str, int] | None:
        """Ops run on the host for want of a device kernel so far, by op name (HPU: the
        bridge's cpu_fallback metric); None where the backend does not count them."""
        return self.backend.calls.fallbacks() if self.available else None

    def host_syncs(self) -> int | None:
        """Times the host has waited for the device's data so far, as the device reports them
        (HPU: its CPU fallbacks' round trips); None where the backend does not count them."""
        return self.backend.calls.host_syncs() if self.available else None

    def graph_breaks(self) -> int | None:
        """Graph breaks ``torch.compile`` has met so far in this process; None before
        anything was compiled."""
        # dynamo's counters["graph_break"]: break reason -> count (torch 2.13
        # torch/_dynamo/exc.py:301 add_to_stats, called at symbolic_convert.py:1115)
        utils = sys.modules.get("torch._dynamo.utils")
        counters = getattr(utils, "counters", None) if utils is not None else None
        if counters is None or not counters.get("stats"):
            return None
        return int(sum(counters.get("graph_break", {}).values()))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _rows(self) -> list[tuple[str, str]]:
        rows = [
            (
                "device",
                f"{self.kind} x{self.count}" if self.available else f"{self.kind} (not available)",
            ),
            ("name", self.name),
            ("memory", fmt_bytes(self.total_memory)),
        ]
        rows += [(k, v) for k, v in (("generation", self.generation), ("mode", self.mode)) if v]
        rows += [("precision", self.precision), ("distributed", self.dist_backend)]
        rows += [(k, v or "-") for k, v in self.versions.items()]
        if self.holding:
            rows.append(("this process", self.holding))
        if self.cards:
            rows.append(("cards", f"{sum(c.free for c in self.cards)} of {len(self.cards)} free"))
        rows += [("held", c.describe()) for c in self.cards if not c.free]
        return rows

    def __repr__(self) -> str:
        return "DeviceInfo(" + ", ".join(f"{k}={v}" for k, v in self._rows()) + ")"

    def _repr_html_(self) -> str:
        return markup.card(
            self.backend.title,
            markup.key_values(self._rows(), bold=True, font=False),
            markup.GREEN if self.available else markup.GREY,
        )


def parse_device(spec: str) -> tuple[str, int]:
    """``"cuda:1"`` -> ("cuda", 1); an unknown kind or index is refused naming the valid ones."""
    kind, _, idx = spec.strip().lower().partition(":")
    backend(kind)  # validates the kind
    if idx and not idx.isdigit():
        raise ValueError(f"bad device index in {spec!r}; write e.g. '{kind}:0'")
    return kind, int(idx or 0)


def _info(kind: str, index: int = 0) -> DeviceInfo:
    b = BACKENDS[kind]
    libraries = library_versions()
    versions = {
        **{k: libraries[k] for k in ("torch", "transformers", "habana_frameworks")},
        **b.calls.versions(),
    }
    if not b.calls.available():
        return DeviceInfo(
            kind=kind,
            available=False,
            dist_backend=b.policy.dist_backend,
            mode=b.calls.mode(),
            versions=versions,
        )
    count = b.calls.count()
    if index >= count:
        raise ValueError(
            f"{kind}:{index} does not exist; this machine has {count} {kind} device(s)"
        )
    found = b.monitoring.cards()
    return DeviceInfo(
        kind=kind,
        available=True,
        count=count,
        index=index,
        name=b.calls.name(index),
        total_memory=b.calls.total_memory(index),
        generation=b.calls.generation(),
        mode=b.calls.mode(),
        precision=b.calls.precision(index),
        dist_backend=b.policy.dist_backend,
        versions=versions,
        cards=found,
        held=next((c for c in found if c.held_here()), None),
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
        kind = settings.device_choice()
        source = f"${ENV_DEVICE}"
    if kind is None or kind == "auto":
        return _info(next(k for k in ORDER if BACKENDS[k].calls.available()))
    name, index = parse_device(kind)
    info = _info(name, index)
    if not info.available:
        have = [k for k in ORDER if BACKENDS[k].calls.available()]
        fix = f"unset {ENV_DEVICE}" if source != "argument" else "pass device='auto'"
        raise RuntimeError(
            f"device {name!r} (from {source}) is not available here; available: "
            f"{', '.join(have)}. {fix[0].upper() + fix[1:]} or choose one of those."
        )
    return info


def check_mode(mode: str | None, kind: str) -> None:
    """Refuse an execution mode the device kind has not got (lazy mode is Gaudi's)."""
    if mode == "lazy" and kind != "hpu":
        raise ValueError(
            f"mode='lazy' is Gaudi's graph mode; this run is on {kind}: "
            f"use mode='eager' or 'compile'"
        )


def device_in_mode(kind: str = "auto", mode: str | None = None) -> DeviceInfo:
    """``device(kind)``, with Gaudi's execution mode set first where ``mode`` asks for one (the
    bridge reads the mode once, when it loads); ``mode="lazy"`` off Gaudi is refused."""
    with hpu.mode_for_probe(mode):  # set before the probe loads the bridge; undone off Gaudi
        dev = device(kind)  # fails early, with the fix, on an unavailable device
        check_mode(mode, dev.kind)
    return dev


def launch_env(dev: DeviceInfo, devices: int, mode: str | None = None) -> dict[str, str]:
    """The environment that puts ``devices`` workers on free cards of ``dev``'s kind
    (``cards.placement``), with the workers' execution mode on Gaudi when ``mode`` names one."""
    b = dev.backend
    env = cards.placement(b.monitoring.cards(), devices, b.deploy.visible_env)
    if mode is not None and dev.kind == "hpu":
        env.update(hpu.mode_env(mode))
    return env


def inference_model(model, device: DeviceInfo | None = None):
    """``model`` ready for evaluation or generation: wrapped in HPU graphs in lazy mode
    (replays recorded graphs instead of re-launching every op), unchanged elsewhere."""
    dev = device or globals()["device"]()  # the argument hides the function
    return dev.backend.calls.inference(model, dev.mode)


def monitor_all() -> dict[str, Any]:
    """Every device's current reading, for the side panel (never imports torch).

    Returns
    -------
    dict
        ``{"time": unix seconds, "devices": [reading, ...], "notes": [{"kind", "title",
        "why"}, ...]}``: the readings (each backend's ``monitor``) of every backend in priority
        order, and for each backend that cannot be read here, why.
    """
    import time

    out: dict[str, Any] = {"time": time.time(), "devices": [], "notes": []}
    for kind in ORDER:
        try:
            out["devices"] += BACKENDS[kind].monitoring.monitor()
        except Unavailable as e:
            out["notes"].append({"kind": kind, "title": BACKENDS[kind].title, "why": e.why})
    return out


def clear_cache() -> None:
    """Forget cached probes and started management libraries (for tests that swap the
    environment)."""
    _bridge.clear_cache()
    monitor.clear_cache()
