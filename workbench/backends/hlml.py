"""HLML, Habana's management library (NVML's counterpart for Gaudi): its ``Vendor`` record."""

from __future__ import annotations

from .monitor import Vendor

# the chip's own sensor: pyhlml_types_generated.py HLML_TEMPERATURE_SENSORS
HLML_TEMPERATURE_ON_AIP = 0

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
    module_call="hlmlDeviceGetModuleID",  # pyhlml main.py:625
    minor_call="hlmlDeviceGetMinorNumber",  # pyhlml main.py:474
)
