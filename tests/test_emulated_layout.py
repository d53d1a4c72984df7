"""Placement on a node whose module ids, device-file minors and HLML indices differ (the
double's ``FAKE_HPU_LAYOUT=hls2``, tests/fakes/habana_frameworks/_layout.py):
``HABANA_VISIBLE_MODULES`` names module ids, read from HLML, else from the driver's sysfs
``module_id``; where neither says, placement names no module at all rather than device-file
numbers."""

import os
import subprocess
import sys

import pytest

import workbench as wb

from conftest import FAKES

TAKE = "import torch, habana_frameworks.torch\ntorch.hpu.memory_stats()  # the bridge acquires\n"


@pytest.fixture
def node(fake_hpu, monkeypatch, tmp_path):
    """The 8-card HLS-Gaudi2-like node, its device files and sysfs made, and a process that
    holds module 0 (``HLS_MODULE_ID=0``) until the test ends; yields the layout's rows."""
    from workbench.backends.registry import clear_cache

    monkeypatch.setenv("FAKE_HPU_LAYOUT", "hls2")
    from habana_frameworks import _layout

    _layout.make_node()
    monkeypatch.setenv("WORKBENCH_HPU_SYSFS", str(_layout.sysfs()))
    clear_cache()
    env = {**os.environ, "PYTHONPATH": str(FAKES), "HLS_MODULE_ID": "0",
           "PT_HPU_LAZY_MODE": "0"}
    holder = subprocess.Popen([sys.executable, "-c", TAKE + "print('ready', flush=True)\n"
                               "import sys; sys.stdin.readline()\n"], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "ready", holder.communicate(timeout=60)
    yield _layout.cards()
    holder.communicate(input="\n", timeout=60)
    clear_cache()


def _free_modules(rows, order: str) -> list[int]:
    """The modules of the free cards (all but module 0), in HLML's or the device files' order."""
    key = (lambda r: r[0]) if order == "index" else (lambda r: r[1])
    return [module for _, _, module in sorted(rows, key=key) if module != 0]


@pytest.mark.slow
def test_placement_names_module_ids_on_a_node_numbered_three_ways(node, monkeypatch):
    """Every card's HLML index, minor and module id differ; the holder of module 0 locked
    module 0's device file, ``accel<minor>``, and HLML and the workbench agree on it. A launch
    beside it names free module ids: HLML's, else the driver's sysfs ``module_id``, else none
    (the bridge's workers then find free cards themselves)."""
    assert all(len({i, minor, module}) == 3 for i, minor, module in node)
    dev = wb.device("hpu")
    assert [(c.index, c.module, c.path.rsplit("/", 1)[1]) for c in dev.cards] == [
        (i, module, f"accel{minor}") for i, minor, module in node]
    held = [c for c in dev.cards if not c.free]
    assert [c.module for c in held] == [0] and held[0].index == 1, "HLS2: module 0 is index 1"

    # placement: module ids from HLML, else from sysfs, else none named
    from workbench.backends.registry import clear_cache, launch_env

    with_hlml = launch_env(dev, 2)
    assert with_hlml == {"HABANA_VISIBLE_MODULES": ",".join(
        str(m) for m in _free_modules(node, "index")[:2])}, "modules 2,3 (indices 0 and 2)"

    monkeypatch.setitem(sys.modules, "pyhlml", None)  # no HLML: the device files and sysfs
    clear_cache()
    dev = wb.device("hpu")
    without = launch_env(dev, 2)
    assert without == {"HABANA_VISIBLE_MODULES": ",".join(
        str(m) for m in _free_modules(node, "minor")[:2])}, "accel0 is module 3, accel1 2"
    assert "Gaudi 3 (module 0): held by pid" in [c.describe() for c in dev.cards][3]

    monkeypatch.setenv("WORKBENCH_HPU_SYSFS", "/nonexistent")  # no module ids
    clear_cache()
    dev = wb.device("hpu")
    assert [c.module for c in dev.cards] == [None] * 8
    assert launch_env(dev, 2) == {}, "no device-file number passed off as a module id"
    with pytest.raises(RuntimeError, match=r"needs 8 free Gaudi cards; 7 are free here"):
        launch_env(dev, 8)


CONTAINER = ("import torch, habana_frameworks.torch\nfrom habana_frameworks.torch import _card\n"
             "torch.hpu.memory_stats()  # the bridge acquires\n"
             "print(torch.hpu.device_count(), _card.held(), flush=True)\n"
             "import sys; sys.stdin.readline()\n")


@pytest.mark.slow
def test_a_container_given_four_modules_sees_four_cards_and_takes_them_in_its_order(
        fake_hpu, monkeypatch):
    """A container given the cards of modules 4-7 (FAKE_HPU_MODULES: what the container
    runtime mounts) with HABANA_VISIBLE_MODULES=5,4,7,6, as Intel's multi-tenant page sets it:
    the bridge counts 4 cards and takes the first free module in that list
    (synapse_helpers/device.cpp:384-492 @ 5a56187: by type, among the visible modules), a
    second process the next; HLML lists the 4 cards from index 0 with their module ids, the
    workbench sees which are held, and a launch beside them names the free module ids."""
    from workbench.backends import cards
    from workbench.backends.registry import clear_cache

    monkeypatch.setenv("FAKE_HPU_MODULES", "4,5,6,7")
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "5,4,7,6")
    clear_cache()
    env = {**os.environ, "PYTHONPATH": str(FAKES), "PT_HPU_LAZY_MODE": "0"}
    holders, said = [], []
    try:
        for _ in range(2):  # each holds its card until the test ends
            p = subprocess.Popen([sys.executable, "-c", CONTAINER], env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            holders.append(p)
            line = p.stdout.readline().split()
            assert line, p.communicate(input="\n", timeout=60)
            said.append([int(v) for v in line])
        assert said == [[4, 5], [4, 4]], "4 cards; modules 5 then 4, in HABANA_VISIBLE_MODULES' order"
        dev = wb.device("hpu")
        assert dev.count == 4
        assert [(c.index, c.module) for c in dev.cards] == [(0, 4), (1, 5), (2, 6), (3, 7)]
        assert sorted(c.module for c in dev.cards if not c.free) == [4, 5]
        env_out = cards.placement(dev.cards, 2, "HABANA_VISIBLE_MODULES")
        assert env_out == {"HABANA_VISIBLE_MODULES": "6,7"}, env_out
    finally:
        for p in holders:
            p.communicate(input="\n", timeout=60)
        clear_cache()
