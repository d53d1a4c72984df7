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


# ------------------------------------------------ the bridge's memory API (hpu/memory.py)
MEMORY_STATS_KEYS = ["Limit", "InUse", "MaxInUse", "NumAllocs", "NumFrees", "ActiveAllocs",
                     "MaxAllocSize", "TotalSystemAllocs", "TotalSystemFrees", "TotalActiveAllocs"]


def test_memory_stats_has_the_bridges_ten_keys_and_reserved_is_the_pool(hpu):
    """memory_stats: the ten keys of bindings.cpp's get_mem_stats, in its order; the two
    "Active" keys are differences. memory_reserved and max_memory_reserved are Limit
    (memory.py @ 5a56187 and @ ea38cef), never below what is allocated."""
    import habana_frameworks.torch.hpu as bridge

    before = bridge.memory_stats()
    assert list(before) == MEMORY_STATS_KEYS
    bridge.fake_allocate(3 * GiB)
    bridge.fake_allocate(GiB)
    s = bridge.memory_stats()
    assert (s["NumAllocs"], s["ActiveAllocs"], s["TotalSystemAllocs"], s["TotalActiveAllocs"]) == (2, 2, 2, 2)
    assert s["MaxAllocSize"] == 3 * GiB and s["NumFrees"] == s["TotalSystemFrees"] == 0
    limit = s["Limit"]
    assert bridge.memory_reserved() == bridge.max_memory_reserved() == limit == before["Limit"]
    assert bridge.memory_reserved() >= bridge.memory_allocated() == 4 * GiB
    assert bridge.memory_reserved("hpu:3") == limit, "any index below device_count(), as memory.py"
    with pytest.raises(AssertionError, match="Invalid device id"):
        bridge.max_memory_reserved(8)


def test_reset_accumulated_memory_stats_clears_the_counters_since_the_last_reset(hpu):
    """clear_stats (CoalescedStringentPoolAllocator.cpp:1342): NumAllocs, NumFrees and
    MaxAllocSize to 0, MaxInUse down to InUse; InUse and the TotalSystem counters stay."""
    import habana_frameworks.torch.hpu as bridge

    bridge.fake_allocate(3 * GiB)
    bridge.fake_allocate(GiB)
    assert bridge.reset_accumulated_memory_stats() is None
    s = bridge.memory_stats()
    assert (s["NumAllocs"], s["NumFrees"], s["ActiveAllocs"], s["MaxAllocSize"]) == (0, 0, 0, 0)
    assert s["InUse"] == s["MaxInUse"] == 4 * GiB
    assert (s["TotalSystemAllocs"], s["TotalActiveAllocs"]) == (2, 2)
    bridge.fake_allocate(GiB // 2)
    s = bridge.memory_stats()
    assert (s["NumAllocs"], s["MaxAllocSize"], s["TotalSystemAllocs"]) == (1, GiB // 2, 3)
    assert s["MaxInUse"] == s["InUse"] == 4 * GiB + GiB // 2


def test_memory_summary_is_the_bridges_table_as_a_string(hpu):
    """memory.py's three-line header naming the device, then bindings.cpp's
    get_mem_stat_summary: seven labelled lines (Limit in GB; InUse, MaxInUse, MaxAllocSize
    in MB) and an empty line."""
    import habana_frameworks.torch.hpu as bridge

    bridge.fake_allocate(3 * GiB)
    summary = bridge.memory_summary()
    assert isinstance(summary, str) and summary.endswith("ActiveAllocs:" + " " * 25 + "1\n\n")
    lines = summary.splitlines()
    assert lines[:3] == ["|" + "=" * 52 + "|",
                         "|       PyTorch HPU memory summary, device ID 0      |",
                         "|" + "-" * 52 + "|"]
    limit = bridge.memory_stats()["Limit"]
    assert lines[3] == f"  Limit:{' ' * 13}{limit:>20} ({limit / GiB:.2f} GB)"
    assert lines[4] == f"  InUse:{' ' * 13}{3 * GiB:>20} (3072.00 MB)"
    assert [ln.split(":")[0].strip() for ln in lines[3:10]] == [
        "Limit", "InUse", "MaxInUse", "NumAllocs", "NumFrees", "MaxAllocSize", "ActiveAllocs"]
    assert lines[6].split() == ["NumAllocs:", "1"] and lines[10:] == [""]
    assert "device ID 5 " in bridge.memory_summary(5)


MEMORY_API = """
import torch
import habana_frameworks.torch  # torch.hpu
s0 = torch.hpu.memory_stats()
a = torch.empty(1024, device="hpu")  # 4096 bytes
b = torch.empty(256, device="hpu")   # 1024 bytes
out["two"] = torch.hpu.memory_stats()
torch.hpu.reset_accumulated_memory_stats()
out["reset"] = torch.hpu.memory_stats()
del a
out["freed"] = torch.hpu.memory_stats()
out["reserved"] = [torch.hpu.memory_reserved(), torch.hpu.max_memory_reserved(),
                   torch.hpu.memory_allocated()]
out["summary"] = torch.hpu.memory_summary()
out["s0"] = s0
torch.hpu.reset_peak_memory_stats()  # the pool's peak to 0 (see the test above)
out["peak_reset"] = [torch.hpu.max_memory_allocated(), torch.hpu.memory_allocated()]
c = torch.empty(16, device="hpu")
out["peak_next"] = [torch.hpu.max_memory_allocated(), torch.hpu.memory_allocated()]
"""


def test_reset_peak_sets_the_peak_to_zero_and_the_workbench_reads_at_least_in_use(hpu):
    """The bridge's reset_peak_memory_stats sets the pool's peak to 0
    (CoalescedStringentPoolAllocator.cpp:1352-1355 @ 5a56187), not to InUse as torch.cuda
    does: max_memory_allocated() reads 0 below memory_allocated() until the next allocation
    raises it (device_mem_stats.h:135-141). The workbench's peak is never below its allocated
    (the doctor checks allocated <= peak). memory_cached / max_memory_cached are the old names
    of the reserved pair and warn (memory.py:165-174)."""
    import habana_frameworks.torch.hpu as bridge

    bridge.fake_allocate(3 * GiB)
    assert bridge.max_memory_allocated() == 3 * GiB
    bridge.reset_peak_memory_stats()
    assert bridge.max_memory_allocated() == 0 and bridge.memory_allocated() == 3 * GiB
    mem = wb.device("hpu").memory()
    assert mem["allocated"] == mem["peak"] == 3 * GiB, mem
    bridge.fake_allocate(GiB)
    assert bridge.max_memory_allocated() == bridge.memory_allocated() == 4 * GiB
    with pytest.warns(FutureWarning, match="renamed to torch.hpu.memory_reserved"):
        assert bridge.memory_cached() == bridge.memory_reserved()
    with pytest.warns(FutureWarning, match="renamed to torch.hpu.max_memory_reserved"):
        assert bridge.max_memory_cached() == bridge.max_memory_reserved()


@pytest.mark.slow
def test_the_emulated_allocator_counts_as_the_bridges_pool_does(on_hpu):
    """The device's allocator (real tensors): the accumulated counters reset, the totals do
    not, and ActiveAllocs (NumAllocs - NumFrees) goes negative when a tensor from before the
    reset is freed, as on the bridge."""
    out = on_hpu(MEMORY_API)
    s0, two, reset, freed = out["s0"], out["two"], out["reset"], out["freed"]
    assert list(two) == MEMORY_STATS_KEYS
    assert two["NumAllocs"] - s0["NumAllocs"] == 2 and two["InUse"] - s0["InUse"] == 5120
    assert two["TotalSystemAllocs"] - s0["TotalSystemAllocs"] == 2
    assert two["MaxAllocSize"] >= 4096
    assert (reset["NumAllocs"], reset["NumFrees"], reset["ActiveAllocs"], reset["MaxAllocSize"]) == (0, 0, 0, 0)
    assert reset["MaxInUse"] == reset["InUse"] == two["InUse"]
    assert reset["TotalSystemAllocs"] == two["TotalSystemAllocs"]
    assert (freed["NumFrees"], freed["ActiveAllocs"]) == (1, -1)
    assert freed["TotalSystemFrees"] == two["TotalSystemFrees"] + 1
    assert freed["TotalActiveAllocs"] == two["TotalActiveAllocs"] - 1
    assert freed["InUse"] == two["InUse"] - 4096 and freed["MaxInUse"] == two["InUse"]
    reserved, max_reserved, allocated = out["reserved"]
    assert reserved == max_reserved == freed["Limit"] >= allocated == freed["InUse"]
    assert "NumFrees:" in out["summary"] and out["summary"].split("NumFrees:")[1].split()[0] == "1"
    peak, in_use = out["peak_reset"]
    assert peak == 0 < in_use, "reset_peak_memory_stats: the peak to 0, below InUse"
    peak, in_use = out["peak_next"]
    assert peak == in_use > 0, "the next allocation raises it to InUse"
