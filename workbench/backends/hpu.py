"""Intel Gaudi: the HPU backend record, from the bridge's functions (``_bridge``) and HLML; also
the execution modes (``MODES``, ``hpu_mode``, ``set_hpu_mode``, ``mode_for_probe``) and the
recipe cache's place (``recipe_cache``).
"""

from __future__ import annotations

from . import _bridge
from .cards import Card, with_holders
from .chips import match
from .devicefiles import device_files, module_ids
from .hlml import HLML
from .monitor import Unavailable, driver_from_tool, inventory, read_vendor
from .record import Backend, Deployment, DeviceCalls, Monitoring, PodNeeds, TrainingPolicy

MODES = _bridge.MODES
hpu_mode, set_hpu_mode, recipe_cache = _bridge.hpu_mode, _bridge.set_hpu_mode, _bridge.recipe_cache
prepare_recipe_cache = _bridge.prepare_recipe_cache
mode_env, mode_for_probe = _bridge.mode_env, _bridge.mode_for_probe
# whether a bridge is installed (looked up without importing it) and whether it is loaded
bridge_installed, bridge_loaded = _bridge.has_bridge, _bridge.loaded

HL_SMI = ("hl-smi", "-Q", "driver_version", "-f", "csv,noheader")


VISIBLE_ENV = "HABANA_VISIBLE_MODULES"  # the modules a process may take (the driver's filter)


def _inventory() -> list[dict]:
    """The cards as HLML lists them, else one per device file; never through the bridge,
    whose device calls take a card (its lazy init acquires one)."""
    try:
        return inventory(HLML)
    except Unavailable:
        # a file's number is the card's minor; its module id, where the driver says it, is in
        # sysfs (devicefiles.module_ids), else unknown: never the file's position or number
        minors = sorted(device_files())
        modules = module_ids(minors)
        return [
            {
                "index": i,
                "name": HLML.fallback_name,
                "total": 0,
                "module": modules.get(n),
                "minor": n,
            }
            for i, n in enumerate(minors)
        ]


def cards() -> list[Card]:
    """Every Gaudi card of this machine, with the processes that hold it."""
    files = device_files()
    return with_holders(
        [
            Card(
                "hpu",
                r["index"],
                r["name"],
                "Gaudi",
                r["module"],
                r["total"],
                files.get(r["index"] if r["minor"] is None else r["minor"]),
            )
            for r in _inventory()
        ]
    )


def count() -> int:
    """Cards on this machine (HLML, else device files, else the bridge's count, which reads
    the driver without acquiring: ``device_count``)."""
    return len(_inventory()) or _bridge.count()


def _row(index: int) -> dict:
    _bridge.one_device(index)
    rows = _inventory()
    return rows[index] if index < len(rows) else {"name": HLML.fallback_name, "total": 0}


def name(index: int) -> str:
    """The card's model name as HLML reports it (``"HL-225"``)."""
    return str(_row(index)["name"])


def _pool(name: str) -> int | None:
    """The allocator's pool (``memory_stats()["Limit"]``) of the chip HLML names, from the chip
    table; None where the chip or its pool is unknown."""
    chip = match(name, "hpu") if name != HLML.fallback_name else None
    return chip.usable if chip is not None else None


def total_memory(index: int) -> int:
    """Bytes the bridge's allocator can hand out (``memory_stats()["Limit"]``, 94.6 of 96 GiB
    on a Gaudi 2): the bridge's where this process holds its card already (asking would take
    one), else the chip table's pool, else HLML's HBM total; 0 where only files are known."""
    if _bridge.holds_card():
        return _bridge.memory(index)["total"]
    row = _row(index)
    return int(_pool(str(row["name"])) or row["total"])


def generation() -> str | None:
    """``"Gaudi1"``, ``"Gaudi2"`` or ``"Gaudi3"`` from HLML's product name (``chips``)."""
    rows = _inventory()
    if not rows or rows[0]["name"] == HLML.fallback_name:
        return None
    found = match(rows[0]["name"], "hpu")
    return found.name if found is not None else None


def monitor() -> list[dict]:
    """Every Gaudi card, through HLML, without HLML's "used" memory (the bridge's reservation,
    nearly all HBM once held); total: the allocator's pool where the chip table knows it."""
    readings = read_vendor(HLML)
    for r in readings:
        r["mem_used"] = None
        r["mem_total"] = _pool(str(r["name"])) or r["mem_total"]
    return readings


def driver_version() -> tuple[str | None, str]:
    """The Habana driver's version, from ``hl-smi`` or else HLML (started once, as the
    panel's reader starts it)."""
    return driver_from_tool(HL_SMI, HLML)


RECORD = Backend(
    kind="hpu",
    title="Intel Gaudi",
    torch_device="hpu",
    calls=DeviceCalls(
        available=_bridge.available,
        count=count,
        name=name,
        memory=_bridge.memory,
        total_memory=total_memory,
        reset_peak=_bridge.reset_peak,
        synchronize=_bridge.synchronize,
        mark_step=_bridge.mark_step,
        precision=_bridge.precision,
        generation=generation,
        mode=_bridge.hpu_mode,
        versions=_bridge.versions,
        compiles=_bridge.compiles,
        fallbacks=_bridge.fallbacks,
        host_syncs=_bridge.host_syncs,
        inference=_bridge.inference_model,  # HPU graphs in lazy mode
    ),
    policy=TrainingPolicy(
        dist_backend="hccl",
        compile_backend="hpu_backend",  # inductor is not supported on HPU
        optimizer="hpex_fused_adamw",
        oom_marker="PT_DEVMEM Allocation failed",
        static_shapes=True,  # every new input shape compiles a new graph
        compile_default=lambda mode: mode == "eager",  # eager mode is meant to run compiled
        profiler_activities=("cpu", "hpu"),
        # optimum-habana's default; the search walks the graph every step
        ddp_find_unused_parameters=False,
        # The bridge's op table (1.19, scripts/ops_list/ops_table.csv @ 5a56187) has no HPU
        # kernel for the GradScaler's two ops: they run through the bridge's CPU fallback
        # (hpu_ops/cpu_fallback.cpp, counted in metric_global("cpu_fallback")), every step
        precision_notes={
            "fp16": (
                "fp16 on Gaudi trains with torch's GradScaler, whose _amp_update_scale_ and "
                "_amp_foreach_non_finite_check_and_unscale_ have no HPU kernel in the bridge's "
                "op table: they run on the CPU every step (the bridge's CPU fallback, counted "
                "in metric_global('cpu_fallback')). bf16 needs no scaler: precision='bf16'"
            )
        },
    ),
    monitoring=Monitoring(monitor=monitor, cards=cards, driver_version=driver_version),
    deploy=Deployment(
        visible_env=VISIBLE_ENV,
        k8s_resource="habana.ai/gaudi",  # Intel's device plugin
        # Intel's Kubernetes quick start (docs.habana.ai, Quick_Start_Guides/
        # Kubernetes_Quick_Start, 1.24 images): hostIPC, the SYS_NICE capability, and memory
        # and hugepages-2Mi limits of 409Gi and 95000Mi; optimum-habana's chart
        # (examples/kubernetes @ 1d8504c) asks for hugepages-2Mi too and notes the 64 MB
        # default /dev/shm is too small beyond one card.
        k8s_pod=PodNeeds(
            hugepages_2mi="95000Mi",
            memory="409Gi",
            shm=True,
            host_ipc=True,
            capabilities=("SYS_NICE",),
        ),
    ),
)
