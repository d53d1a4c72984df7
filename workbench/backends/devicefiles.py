"""The Gaudi driver's device files: where this machine shows its cards without taking one.

The driver makes ``/dev/accel/accel<N>`` per card (older drivers ``/dev/hl<N>``; Intel's Gaudi
installation docs); a holder keeps its file open. A container that mounts them elsewhere names
its globs in ``WORKBENCH_HPU_DEVICE_FILES`` (``os.pathsep``-separated). A file's number is the
card's minor, not its module id (``HABANA_VISIBLE_MODULES``, ``HLS_MODULE_ID``): the driver
shows that in sysfs, ``/sys/class/accel/accel<minor>/device/module_id`` (linux ce06bc9d7209,
Documentation/ABI/testing/sysfs-driver-habanalabs; ``WORKBENCH_HPU_SYSFS`` names another).
"""

from __future__ import annotations

import glob
import os
import re

from .. import settings

DEVICE_FILES_ENV = settings.HPU_DEVICE_FILES
SYSFS_ENV = settings.HPU_SYSFS
SYSFS = "/sys/class/accel"
DEVICE_FILES = ("/dev/accel/accel*", "/dev/hl[0-9]*")
_NUMBERED = re.compile(r"^(?:accel|hl)(\d+)$")  # not accel_controlD<N>, hl_controlD<N>


def device_files() -> dict[int, str]:
    """The cards' device files by number (the minor of ``/dev/accel/accel<N>``)."""
    chosen = settings.get(DEVICE_FILES_ENV, "").strip()
    patterns = [p for p in chosen.split(os.pathsep) if p] if chosen else DEVICE_FILES
    out: dict[int, str] = {}
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            found = _NUMBERED.match(os.path.basename(path))
            if found:
                out.setdefault(int(found.group(1)), path)
    return out


def module_ids(minors) -> dict[int, int]:
    """The module id of each card (by its minor) whose driver says it in sysfs (older drivers,
    or a container without sysfs, leave cards out)."""
    root = settings.get(SYSFS_ENV, "").strip() or SYSFS
    out: dict[int, int] = {}
    for minor in minors:
        try:
            with open(os.path.join(root, f"accel{minor}", "device", "module_id")) as f:
                out[minor] = int(f.read().strip())
        except (OSError, ValueError):
            continue
    return out
