"""Intel Gaudi: the HPU backend record, built from the bridge's functions (``_bridge``, the
one module that imports ``habana_frameworks``) and Habana's management library (HLML).

Also the public face of Gaudi's execution modes (``MODES``, ``hpu_mode``, ``set_hpu_mode``)
and of the recipe cache's place (``recipe_cache``).
"""

from __future__ import annotations

from . import _bridge
from .monitor import Vendor, driver_from_tool, read_vendor
from .record import Backend

MODES = _bridge.MODES
hpu_mode, set_hpu_mode, recipe_cache = _bridge.hpu_mode, _bridge.set_hpu_mode, _bridge.recipe_cache

HLML_TEMPERATURE_ON_AIP = (
    0  # the chip's own sensor: pyhlml_types_generated.py HLML_TEMPERATURE_SENSORS
)

HLML = Vendor(
    kind="hpu",
    module="pyhlml",
    package="habana-pyhlml",
    extra="gaudi",
    library="HLML",
    driver="Gaudi",
    prefix="hlml",
    error="HLMLError",
    util_field="aip",
    sensor=HLML_TEMPERATURE_ON_AIP,
    what="Gaudi cards",
    fallback_name="Gaudi",
    driver_call="hlmlGetDriverVersion",
)
HL_SMI = ("hl-smi", "-Q", "driver_version", "-f", "csv,noheader")


def monitor() -> list[dict]:
    """Every Gaudi card, through HLML."""
    return read_vendor(HLML)


def driver_version() -> tuple[str | None, str]:
    """The Habana driver's version, from ``hl-smi`` or else HLML (started once, as the
    panel's reader starts it)."""
    return driver_from_tool(HL_SMI, HLML)


RECORD = Backend(
    kind="hpu",
    title="Intel Gaudi",
    torch_device="hpu",
    dist_backend="hccl",
    compile_backend="hpu_backend",  # inductor is not supported on HPU
    optimizer="hpex_fused_adamw",
    available=_bridge.available,
    count=_bridge.count,
    name=_bridge.name,
    memory=_bridge.memory,
    reset_peak=_bridge.reset_peak,
    synchronize=_bridge.synchronize,
    mark_step=_bridge.mark_step,
    precision=_bridge.precision,
    generation=_bridge.generation,
    mode=_bridge.hpu_mode,
    versions=_bridge.versions,
    compiles=_bridge.compiles,
    monitor=monitor,
    vendor=HLML,
    driver_version=driver_version,
    oom_marker="PT_DEVMEM Allocation failed",
    static_shapes=True,  # every new input shape compiles a new graph
    compile_default=lambda mode: mode == "eager",  # eager mode is meant to run compiled
    profiler_activities=("cpu", "hpu"),
    # optimum-habana's default; the search walks the graph every step
    ddp_find_unused_parameters=False,
    inference=_bridge.inference_model,  # HPU graphs in lazy mode
    k8s_resource="habana.ai/gaudi",  # Intel's device plugin
)
