"""TEST DOUBLE of habana_frameworks.torch.utils.experimental (device generation)."""

import enum
import os


class synDeviceType(enum.IntEnum):  # noqa: N801 (the bridge's name)
    synDeviceGaudi = 1
    synDeviceGaudi2 = 2
    synDeviceGaudi3 = 3


def _get_device_type() -> synDeviceType:
    return synDeviceType(int(os.environ.get("FAKE_HPU_GENERATION", "2")))
