"""The Gaudi driver's device files: where this machine shows its cards without taking one.

The driver makes ``/dev/accel/accel<N>`` for each card (older drivers ``/dev/hl<N>``; Intel's
Gaudi installation docs). A process that holds a card keeps its file open, so the files
answer both "how many cards" (``_bridge.cards_seen``, ``hpu``'s inventory) and "who holds
which" (``cards``). A container that mounts them elsewhere names its globs in
``WORKBENCH_HPU_DEVICE_FILES`` (separated by ``os.pathsep``). Nothing else in the workbench
looks for them.
"""

from __future__ import annotations

import glob
import os
import re

from .. import settings

DEVICE_FILES_ENV = settings.HPU_DEVICE_FILES
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
