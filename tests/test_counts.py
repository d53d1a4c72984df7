"""What slows a Gaudi step, counted: the double's metrics (cpu_fallback, graph_compilation,
metric_localcontext), its host-sync hook, and wb.train's counts in events and summary.

The metrics' API runs in this process (the double without its device); the counts of real
ops run on the emulated device in one fresh process per mode (fixture ``on_hpu``)."""

from __future__ import annotations

import pytest

from workbench.views.chart import render_table, step_counts


@pytest.fixture
def metrics(fake_hpu, monkeypatch):
    monkeypatch.delenv("PT_HPU_LAZY_MODE", raising=False)
    from habana_frameworks.torch.hpu import metrics

    return metrics


def test_the_metrics_have_the_bridges_tags_and_local_contexts(metrics):
    """stats() tags in the bridge's order (hpu/metrics/metrics.py @ 5a56187); a local metric
    counts inside its block only and stops at its end; an unknown name is MetricNotFound
    for metric_localcontext and None for metric_global; reset() zeroes a metric."""
    fb = metrics.metric_global("cpu_fallback").stats()
    assert [tag for tag, _ in fb] == ["TotalNumber", "FallbackOps"] and isinstance(fb[1][1], dict)
    gc = metrics.metric_global("graph_compilation")
    assert [tag for tag, _ in gc.stats()] == ["TotalNumber", "TotalTime", "AvgTime"]
    metrics.fake_compile(2)
    with metrics.metric_localcontext("graph_compilation") as local:
        metrics.fake_compile(3)
    metrics.fake_compile(4)
    assert dict(local.stats())["TotalNumber"] == 3, "counts inside the block only"
    assert dict(gc.stats())["TotalNumber"] == 9
    gc.reset()
    assert dict(gc.stats())["TotalNumber"] == 0
    with pytest.raises(metrics.MetricNotFound):
        with metrics.metric_localcontext("recipe_cache"):  # registered only on request
            pass
    assert metrics.metric_global("nothing") is None


def test_the_op_table_says_which_ops_fall_back(metrics):
    """From the 1.19 source's op table and hpu_op.yaml: mm has an HPU kernel, the GradScaler's
    _amp_update_scale_ does not; an op newer than the table is unlisted, not a fallback."""
    from habana_frameworks import _counts

    ops = {"aten::mm.out": 3, "aten::_amp_update_scale_": 2, "aten::new_op_of_2030": 1}
    assert _counts.fallbacks(ops) == {"aten::_amp_update_scale_": 2}
    assert _counts.unlisted(ops) == {"aten::new_op_of_2030": 1}


def test_metrics_dump_writes_the_global_metrics_as_the_bridge_does(metrics, tmp_path, monkeypatch):
    """metrics_dump (metrics.py, saver.py @ 5a56187 and @ ea38cef): each registered global
    metric once, JSON by default (one array of objects) or text; a new file each time (name,
    name.1, ...); -rank<N> before the extension under a launcher; the name's folder is made,
    so a bare file name fails as on the bridge; an unknown format is a KeyError."""
    import json
    from datetime import datetime

    from habana_frameworks.torch.hpu import metrics_dump

    assert metrics_dump is metrics.metrics_dump, "hpu re-exports it (from .metrics import *)"
    for name in ("RANK", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    metrics.fake_compile(2)
    path = tmp_path / "dumps" / "metrics.json"
    assert metrics.metrics_dump(str(path)) is None
    text = path.read_text()
    assert text.startswith('[{"metric_name": "graph_compilation"') and text.endswith("}]\n")
    assert text.count("},\n{") == 2
    dumped = json.loads(text)
    assert [d["metric_name"] for d in dumped] == ["graph_compilation", "cpu_fallback", "memory_defragmentation"]
    assert all(list(d) == ["metric_name", "triggered_by", "generated_on", "statistics"] for d in dumped)
    assert {d["triggered_by"] for d in dumped} == {"user"}
    datetime.fromisoformat(dumped[0]["generated_on"])
    assert list(dumped[0]["statistics"]) == ["TotalNumber", "TotalTime", "AvgTime"]
    assert dumped[0]["statistics"]["TotalNumber"] == 2
    assert dumped[1]["statistics"] == {"TotalNumber": 0, "FallbackOps": {}}

    metrics.metrics_dump(str(path))
    metrics.metrics_dump(str(path))
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.json", "metrics.json.1", "metrics.json.2"]
    assert path.read_text() == text, "never overwritten"

    metrics.metrics_dump(str(tmp_path / "m.txt"), format="text")
    lines = (tmp_path / "m.txt").read_text().split("\n")
    assert lines[0] == "Metric name: graph_compilation" and lines[1].startswith("Triggered by: ")
    assert "user" in lines[1] and lines[2].startswith("Generated on: ") and lines[3] == "Statistics:"
    assert lines[4:8] == ["\tTotalNumber: 2", "\tTotalTime: 0", "\tAvgTime: 0.0", ""]
    assert lines[8] == "Metric name: cpu_fallback"

    monkeypatch.setenv("RANK", "3")
    metrics.metrics_dump(str(tmp_path / "ranked.json"))
    assert (tmp_path / "ranked-rank3.json").is_file() and not (tmp_path / "ranked.json").exists()
    monkeypatch.delenv("RANK")

    with pytest.raises(KeyError):
        metrics.metrics_dump(str(tmp_path / "m.yaml"), format="yaml")
    assert not (tmp_path / "m.yaml").exists()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError):  # os.makedirs(os.path.dirname("bare.json")), saver.py
        metrics.metrics_dump("bare.json")
    metrics.metrics_dump("./bare.json")
    assert json.loads((tmp_path / "bare.json").read_text())[0]["metric_name"] == "graph_compilation"


def test_the_table_words_say_what_was_counted():
    counts = {"steps": 4, "cpu_fallbacks": 2, "fallback_ops": {"aten::x": 2}, "recompiles": 0,
              "graph_breaks": None}
    assert step_counts(counts) == "2 CPU fallbacks, 0 recompiles over 4 steps (aten::x x2)"
    html = render_table({"r": {"status": "completed", "after_warmup": counts}})
    assert "after warm-up" in html and "2 CPU fallbacks" in html
    # a run that ended within warm-up has no steps after it (not "- over 0 steps"), and a CPU
    # counts none of these
    nothing = {"steps": 0, "cpu_fallbacks": None, "fallback_ops": None, "recompiles": None}
    assert step_counts(nothing) == "no steps after warm-up: the run ended within it"
    assert step_counts({**nothing, "steps": 147}) == "not counted on this device (147 steps)"
    assert "over 0 steps" not in render_table({"r": {"status": "completed", "after_warmup": nothing}})


DEVICE_COUNTS = """
import torch
import habana_frameworks.torch as ht
from habana_frameworks.torch.hpu import metrics
x = torch.randn(8, 8, device="hpu")
base = metrics.fake_counts()
with metrics.metric_localcontext("cpu_fallback") as local:
    one = torch.ones(1, device="hpu")  # the GradScaler's update: no HPU kernel in the 1.19 table
    torch._amp_update_scale_(one, torch.zeros(1, dtype=torch.int32, device="hpu"), one * 0, 2.0, 0.5, 9)
x.sum().item(); x.cpu(); torch.nonzero(x > 0)
got = metrics.fake_counts()
out["local"] = dict(local.stats())
out["syncs"] = {k: v - base["host_syncs"].get(k, 0) for k, v in got["host_syncs"].items()}
g0 = metrics.fake_counts()["graphs"]
for n in (4, 4, 4, 6):  # lazy: a graph per distinct signature between mark_steps
    (torch.ones(n, n, device="hpu") * 2).relu()
    ht.core.mark_step()
out["graphs"] = metrics.fake_counts()["graphs"] - g0
# SDPA: the HPU answers its kernel choice (MATH) without a fallback (tests/fakes/README.md)
q = torch.randn(2, 2, 5, 4)
ops0 = metrics.fake_counts()["ops"]
with metrics.metric_localcontext("cpu_fallback") as sdpa:
    o = torch.nn.functional.scaled_dot_product_attention(*(q.to("hpu"),) * 3, is_causal=True)
out["sdpa_fallbacks"] = dict(sdpa.stats())["TotalNumber"]
out["sdpa_ops"] = sorted(k for k, n in metrics.fake_counts()["ops"].items() if n > ops0.get(k, 0))
ref = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
out["sdpa_close"] = torch.allclose(o.cpu(), ref, atol=1e-6)
"""
# a run's events and summary (eager mode, compiled by default; lazy runs: the families' test)
RUN = """
run = train("gpt2-tiny", max_steps=4, log_every=1, throughput_warmup_steps=2, padding="packed")
out["events"] = [e for e in run.events if e.get("phase") in ("warmup", "train")]
out["after"] = run.summary["after_warmup"]
from workbench.views.dashboard import Dashboard
view = Dashboard(run)
view.summary = {**run.summary, "status": run.status}  # what it reads at the run's end
out["html"] = view._bundle(with_png=False)["text/html"]
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_the_emulated_gaudi_counts_and_a_run_records_them(on_hpu, mode):
    """Ops without an HPU kernel, host syncs (item, cpu, nonzero) and, in lazy mode, one
    graph per distinct signature; wb.train (eager, compiled) puts the counts in every event
    and its summary."""
    out = on_hpu(DEVICE_COUNTS + (RUN if mode == "eager" else ""),
                 PT_HPU_LAZY_MODE="1" if mode == "lazy" else "0")
    assert out["local"]["FallbackOps"] == {"aten::_amp_update_scale_": 1}, out["local"]
    syncs = out["syncs"]
    assert syncs["aten::_local_scalar_dense"] == 1 and syncs["aten::nonzero"] == 1
    assert syncs["device_to_host"] == 1, "the .cpu(); the fallback's own copies are not counted"
    assert out["graphs"] == (2 if mode == "lazy" else 0), "eager graphs are not counted"
    assert out["sdpa_fallbacks"] == 0 and out["sdpa_close"], out
    assert "aten::_fused_sdp_choice" not in out["sdpa_ops"], out["sdpa_ops"]
    assert "aten::bmm.out" in out["sdpa_ops"], f"the MATH path: {out['sdpa_ops']}"
    if mode == "lazy":
        return
    events, after = out["events"], out["after"]
    assert all(isinstance(e["cpu_fallbacks"], int) for e in events), events
    assert after["steps"] == 2 and after["recompiles"] == 0, after
    # none at all: SDPA's kernel choice is answered on the HPU (tests/fakes/README.md, Counts)
    assert after["fallback_ops"] == {} and after["cpu_fallbacks"] == 0, after
    assert after["graph_breaks_total"] == 0, after  # compiled by default in eager mode
    assert "after warm-up" in out["html"] and "0 recompiles" in out["html"], "the dashboard's table"


PLACE_ON_CPU = """
import torch
import habana_frameworks.torch as ht
from habana_frameworks.torch.hpu import metrics
one = torch.ones(1, device="hpu")
out["kernel_ops"] = (one * 3 + 1).cpu().tolist()  # ops with an HPU kernel: never refused
with metrics.metric_localcontext("cpu_fallback") as local:
    try:  # the GradScaler's update: no HPU kernel in the 1.19 table
        torch._amp_update_scale_(one, torch.zeros(1, dtype=torch.int32, device="hpu"), one * 0, 2.0, 0.5, 9)
        out["error"] = None
    except Exception as e:
        out["error"] = [type(e).__name__, str(e).splitlines()[0]]
out["fallbacks"] = dict(local.stats())["FallbackOps"]
"""


@pytest.mark.slow
@pytest.mark.parametrize("setting", [None, "none", "aten::_amp_update_scale_", "aten::nonzero,none"])
def test_place_on_cpu_none_makes_a_cpu_fallback_fatal(on_hpu, setting):
    """PT_HPU_PLACE_ON_CPU (fallback_helper.cpp, env_flags.yaml:760 @ 5a56187): unset, an op
    with no HPU kernel runs on the CPU; `none` anywhere in the list, it raises the bridge's
    RuntimeError ("<op> is not yet supported on HPU.", fallback_helper.h:53) and is not
    counted; a list of op names lets those fall back. Ops with an HPU kernel are not affected."""
    out = on_hpu(PLACE_ON_CPU, **({} if setting is None else {"PT_HPU_PLACE_ON_CPU": setting}))
    assert out["kernel_ops"] == [4.0]
    if setting in (None, "aten::_amp_update_scale_"):
        assert out["error"] is None and out["fallbacks"] == {"aten::_amp_update_scale_": 1}, out
    else:
        assert out["error"] == ["RuntimeError", "aten::_amp_update_scale_ is not yet supported on HPU."], out
        assert out["fallbacks"] == {}, out


# ------------------------------------------------------------------ wb.train, every family
@pytest.fixture(scope="module")
def lazy_counts(tmp_path_factory):
    """wb.train on every family in one fresh lazy-mode process (the gaudi-counts bench's own
    child, smoke sizes): the bench's 2 warm-up steps (step 1 compiles every bucket and logs
    once), 2 counted."""
    from benchmarks import gaudicounts

    return gaudicounts.run(steps=2, warmup=2, modes=("lazy",), contenders=("wb",))["results"]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "gpt2", "t5", "llama", "sd"])
def test_wb_train_reaches_the_zeros_on_the_emulated_gaudi(lazy_counts, family):
    """After warm-up: no CPU fallback, no graph compiled (bucketed runs compile every bucket
    before step 1, the logging path compiles at step 1), no host copy of a tensor, and no
    host read but the Trainer's two at a log (loss and gradient norm, transformers'
    trainer.py:2257, 2264: docs/gaudi.md); none between logs (the encoders' mask is built
    without reading it)."""
    cell = lazy_counts[f"{family}/lazy/wb"]
    assert "error" not in cell, cell
    assert cell["fallback_ops"] == {}, cell
    assert cell["compiles"] == 0, cell
    syncs = cell["host_syncs_by_cause"]
    assert syncs.get("device_to_host", 0) == 0 and syncs.get("synchronize", 0) == 0, cell
    assert cell["logs"] >= 1 and syncs.get("aten::_local_scalar_dense", 0) <= 2 * cell["logs"], cell
    assert sum(syncs.values()) <= 2 * cell["logs"], cell


def test_graph_breaks_are_dynamos_on_any_device():
    """graph_breaks() sums dynamo's counters["graph_break"]: one more for a function that
    breaks once."""
    import torch

    import workbench as wb

    dev = wb.device("cpu")

    def f(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    torch._dynamo.reset()
    before = dev.graph_breaks() or 0
    torch.compile(f, backend="eager")(torch.ones(3))
    assert dev.graph_breaks() == before + 1
