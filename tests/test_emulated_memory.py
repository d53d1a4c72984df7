"""Gaudi memory as a real card reports it, and what the workbench shows of it.

On a Gaudi the bridge reserves nearly the whole HBM once a process holds the card, so HLML's
"used" says the card is held, not what its tensors take; the allocator's pool
(``memory_stats()["Limit"]``, about 94.6 GiB on a Gaudi 2) is smaller than the HBM HLML
reports (96 GiB). The double reproduces both (tests/fakes/README.md).
"""

from __future__ import annotations

import json

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (the fixtures, for this module only)

import workbench as wb
from workbench.backends.chips import CHIPS
from workbench.rundir.lock import WriterLock

GiB = 2**30


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"workbench.server": True,
                                                  "jupyter_server_terminals": False},
                          "allow_unauthenticated_access": False}}


@pytest.fixture
def hpu(fake_hpu, monkeypatch):
    for name in ("PT_HPU_LAZY_MODE", "PT_HPU_RECIPE_CACHE_CONFIG", "HLS_MODULE_ID"):
        monkeypatch.setenv(name, "-")
        monkeypatch.delenv(name)
    return fake_hpu


def test_hlml_used_is_nearly_the_hbm_once_held_and_the_workbench_does_not_show_it(hpu):
    import pyhlml
    import torch

    from workbench.backends import hpu as hpu_backend

    pyhlml.hlmlInit()  # started once per process, as the workbench's reader starts it

    def hlml_used(index):
        return pyhlml.hlmlDeviceGetMemoryInfo(pyhlml.hlmlDeviceGetHandleByIndex(index))

    assert hlml_used(0).used == 0 and hlml_used(0).total == 96 * GiB
    dev = wb.device("hpu")
    # before this process holds a card: the chip table's pool for HLML's model name
    assert dev.total_memory == CHIPS["Gaudi2"].usable < 96 * GiB
    torch.hpu.memory_stats()  # takes this process's card (the bridge's lazy init)
    held = hlml_used(0)
    assert held.total == 96 * GiB and held.used > 95 * GiB, "the bridge reserved the HBM"
    assert torch.hpu.memory_stats()["InUse"] == 0, "while its tensors take nothing"
    limit = torch.hpu.memory_stats()["Limit"]
    assert limit < 96 * GiB and abs(limit - 94.6 * GiB) < GiB
    # holding the card, DeviceInfo reads the allocator itself
    assert wb.device("hpu").total_memory == limit
    readings = [r for r in hpu_backend.monitor() if r["index"] == 0]
    assert readings[0]["mem_used"] is None, "HLML's used is not shown as tensor memory"
    assert readings[0]["mem_total"] == CHIPS["Gaudi2"].usable


def test_the_panel_takes_a_held_gaudis_memory_from_the_run_its_holder_writes(
        hpu, jp_root_dir, jp_fetch, jp_asyncio_loop, make_run):
    """``GET workbench/devices``: the card this process holds (the Jupyter server's own here)
    shows the allocator's figures its running run logs, not HLML's "used"."""
    import torch

    wb.device("hpu")  # loads the bridge (torch.hpu)
    torch.hpu.memory_stats()  # this process holds card 0
    path = make_run(jp_root_dir / "runs", "20261204-gpt2", summary={"status": "running"})
    lock = WriterLock(path).claim()
    try:
        events = [{"phase": "start", "step": 0, "max_steps": 4, "device": "hpu",
                   "mem_total": 5 * GiB},
                  {"phase": "train", "step": 1, "loss": 2.0, "mem_alloc": 3 * GiB}]
        (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        reply = jp_asyncio_loop.run_until_complete(jp_fetch("workbench", "devices"))
    finally:
        lock.release()
    hpus = {r["index"]: r for r in json.loads(reply.body)["devices"] if r["kind"] == "hpu"}
    assert (hpus[0]["mem_used"], hpus[0]["mem_total"]) == (3 * GiB, 5 * GiB)
    assert hpus[1]["mem_used"] is None, "a free card: nothing in use to report"
