"""TEST DOUBLE's node layout: how the emulated cards' HLML index, device-file minor and module
id relate (test hook, not bridge API; the bridge double's ``torch/_card.py`` and the HLML
double ``pyhlml_double.py`` both read it).

Three numbers name a Gaudi card, and on a server they differ:

- the **module id** is the card's physical place on the board, as the cards are wired to each
  other (the kernel driver's ``card_location``, shown as
  ``/sys/class/accel/accel<minor>/device/module_id``: linux commit ce06bc9d7209, "accel/
  habanalabs: expose module id through sysfs", and Documentation/ABI/testing/
  sysfs-driver-habanalabs). ``HLS_MODULE_ID`` and ``HABANA_VISIBLE_MODULES`` speak module ids
  (the bridge's ``synapse_helpers/device.cpp``; Intel's "Gaudi-to-process Assignment" page);
- the **minor** numbers the device file, ``/dev/accel/accel<minor>`` (habana-pyhlml
  ``main.py:474``, ``hlmlDeviceGetMinorNumber``: "maps to device node file at
  /sys/class/accel/accel[minor]"), in the order the driver probed the cards;
- the **index** is HLML's enumeration (``hlmlDeviceGetHandleByIndex``; ``hl-smi -Q`` lists
  ``index`` and ``module_id`` as separate fields, Intel's hl-smi page).

``FAKE_HPU_LAYOUT``: ``plain`` (default): card i is index i, minor i and module i;
``hls2``: an 8-card node whose three numbers all differ for every card, as they can on an
HLS-Gaudi2 server. The permutation is the double's own (no public table of a server's mapping
was found): what matters is that no two numbering schemes agree on any card, so a mix-up
shows. ``make_node()`` creates the device files and their sysfs ``module_id`` files, as the
driver does when it loads (``sysfs()`` is where: ``$FAKE_HPU_DEV_DIR/sys/class/accel``).
"""

import os
import tempfile
from pathlib import Path

# HLML index -> (minor, module id) for FAKE_HPU_LAYOUT=hls2
HLS2 = ((1, 2), (3, 0), (0, 3), (2, 1), (5, 6), (7, 4), (4, 7), (6, 5))


def count() -> int:
    return int(os.environ.get("FAKE_HPU_COUNT", "8"))


def node() -> list[tuple[int, int, int]]:
    """(index, minor, module id) of each card of the whole node, by index."""
    name = os.environ.get("FAKE_HPU_LAYOUT", "plain")
    if name == "plain":
        return [(i, i, i) for i in range(count())]
    if name == "hls2":
        if count() != len(HLS2):
            raise ValueError(f"FAKE_HPU_LAYOUT=hls2 is an 8-card node; FAKE_HPU_COUNT={count()}")
        return [(i, minor, module) for i, (minor, module) in enumerate(HLS2)]
    raise ValueError(f"FAKE_HPU_LAYOUT={name!r}; known: plain, hls2")


def cards() -> list[tuple[int, int, int]]:
    """(index, minor, module id) of each card this process can see, by index.

    ``FAKE_HPU_MODULES`` (test hook): the module ids of the cards a container was given, as
    Intel's container runtime mounts only the device files of the cards it is told
    (``HABANA_VISIBLE_DEVICES`` at ``docker run``; Intel's "Multiple Tenants on HPU" page, where
    such a container then sets ``HABANA_VISIBLE_MODULES`` to those cards' module ids, e.g.
    ``5,4,7,6``). Inside, the driver and HLML see only those cards: HLML numbers them from 0
    in the node's order, and each keeps its module id and device-file minor (the driver's
    ``module_id`` in sysfs is the card's place on the board). Unset: the whole node."""
    rows = node()
    given = os.environ.get("FAKE_HPU_MODULES", "").strip()
    if not given:
        return rows
    wanted = {int(m) for m in given.split(",") if m.strip()}
    unknown = wanted - {module for _, _, module in rows}
    if unknown:
        raise ValueError(f"FAKE_HPU_MODULES names modules {sorted(unknown)} the node has not")
    seen = [(minor, module) for _, minor, module in rows if module in wanted]
    return [(i, minor, module) for i, (minor, module) in enumerate(seen)]


def minor_of(module: int) -> int:
    """The device file's minor of the card with this module id."""
    return next(minor for _, minor, m in cards() if m == module)


def dev_dir() -> Path:
    default = Path(tempfile.gettempdir(), "fake-hpu-accel")
    return Path(os.environ.get("FAKE_HPU_DEV_DIR") or default)


def sysfs() -> Path:
    """The emulated ``/sys/class/accel``."""
    return dev_dir() / "sys" / "class" / "accel"


def make_node() -> None:
    """Create every card's device file and ``accel<minor>/device/module_id``."""
    dev_dir().mkdir(parents=True, exist_ok=True)
    for _, minor, module in cards():
        (dev_dir() / f"accel{minor}").touch()
        folder = sysfs() / f"accel{minor}" / "device"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "module_id").write_text(f"{module}\n")
