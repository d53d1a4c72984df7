"""wb.plan: time and cost per device, from runs, references or a default, with sources."""

from __future__ import annotations

import html
import json
import math
import os
import re
import xml.etree.ElementTree as ET
from base64 import b64decode
from pathlib import Path

import pytest

import workbench as wb
from workbench.backends.chips import CHIPS
from workbench.backends.registry import DeviceInfo
from workbench.planning import references as refs
from workbench.planning.flops import flops_per_token
from workbench.planning.matching import efficiency, own_overhead, spec_of

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "benchmarks" / "baselines" / "cuda-nvidia-h200.json"


@pytest.fixture
def fake_run(make_run):
    """A run directory as wb.train leaves it, as far as the planner reads it."""
    def make(root: Path, name: str, model: str, seq: int, batch: int, tokens_per_s: float,
             device: DeviceInfo, status: str = "completed", devices: int = 1) -> Path:
        extra = {"launch": {"devices": devices}} if devices > 1 else {}
        return make_run(root, name, model=model, args={"max_length": seq, "batch_size": batch},
                        summary={"status": status, "tokens_per_s": tokens_per_s,
                                 "device": device.to_dict()}, **extra)
    return make


H100 = DeviceInfo(kind="cuda", available=True, count=1, name="NVIDIA H100 80GB HBM3", precision="bf16")


def test_fed_the_mfu_its_h200_runs_report_the_plan_reproduces_their_tokens_per_s():
    """The arithmetic, checked against BENCHMARKS.md's H200 GPT-2-124M bf16 runs."""
    runs = json.loads(H200.read_text())
    checked = 0
    for key, result in runs.items():
        if not key.startswith("mfu"):
            continue
        cfg = result["config"]
        for way, r in result["results"].items():
            if "mfu" not in r:
                continue
            p = wb.plan("gpt2-small", tokens=10**9, batch_size=cfg["batch_size"], seq_len=cfg["seq_len"],
                        precision="bf16", devices=["H200"], mfu=r["mfu"], runs=NO_RUNS)
            assert p.flops_per_token == result["figures"]["flops_per_token"]
            row = p.row("H200")
            assert row["devices"] == 1 and row["mfu_from"] == "your mfu"
            assert row["tokens_per_s_device"] == pytest.approx(r["tokens_per_s"], rel=1e-9), (key, way)
            assert row["hours"] == pytest.approx(1e9 / r["tokens_per_s"] / 3600, rel=1e-9)
            checked += 1
    assert checked >= 5


def test_the_h200_row_takes_this_projects_own_measurement_and_says_so():
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=32, seq_len=1024, devices=["H200"], runs=NO_RUNS)
    row = p.row("H200")
    entry = next(e for e in refs.references()["mfu"] if e["chip"] == "H200")
    assert row["mfu_from"] == "measured by this project" and row["mfu"] == pytest.approx(entry["mfu"])
    assert "BENCHMARKS.md" in row["sources"]["mfu"]
    # 989 TFLOP/s x MFU / FLOPs per token: the measured 340,396 tokens/s within the MFU's rounding
    assert row["tokens_per_s_device"] == pytest.approx(entry["tokens_per_s"], rel=2e-3)


def test_your_runs_come_before_references_and_predict_another_sequence_length(tmp_path, fake_run):
    fake_run(tmp_path, "a", "gpt2-small", seq=512, batch=16, tokens_per_s=200_000.0, device=H100)
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=1024, devices=["H100", "A100"], runs=tmp_path)
    h100, a100 = p.row("H100 SXM"), p.row("A100 80GB")
    assert h100["mfu_from"] == "your runs" and "1 of your completed run(s)" in h100["sources"]["mfu"]
    spec = wb.model("gpt2-small")
    # the same achieved FLOP/s, spent on tokens that cost more at the longer sequence
    assert h100["tokens_per_s_device"] == pytest.approx(
        200_000.0 * flops_per_token(spec, 512) / flops_per_token(spec, 1024), rel=1e-9)
    assert a100["mfu_from"] == "published"  # a run on another chip does not count


def test_a_row_of_this_machine_without_a_price_says_how_to_give_one(tmp_path, fake_run):
    here = wb.device()
    fake_run(tmp_path, "a", "gpt2-small", seq=512, batch=16, tokens_per_s=2_000.0, device=here)
    p = wb.plan("gpt2-small", tokens=1e8, batch_size=16, seq_len=512, devices=["detected"],
                runs=tmp_path)
    row = p.row("detected")
    assert row["mfu_from"] == "your runs" and row.get("cost_usd") is None
    assert "detected: no price: pass prices={'detected': DOLLARS_PER_DEVICE_HOUR}" in repr(p)


def test_an_explicit_mfu_beats_your_runs_and_unfinished_or_far_runs_do_not_count(tmp_path, fake_run):
    fake_run(tmp_path, "a", "gpt2-small", seq=512, batch=16, tokens_per_s=200_000.0, device=H100)
    fake_run(tmp_path, "b", "gpt2-xl", seq=512, batch=16, tokens_per_s=1.0, device=H100)  # 12x the size
    fake_run(tmp_path, "c", "gpt2-small", seq=512, batch=16, tokens_per_s=5.0, device=H100, status="failed")
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100"], runs=tmp_path)
    assert p.row("H100 SXM")["tokens_per_s_device"] == pytest.approx(200_000.0)
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100"], runs=tmp_path,
                mfu={"H100": 0.5})
    row = p.row("H100 SXM")
    assert row["mfu_from"] == "your mfu" and row["mfu"] == pytest.approx(0.5)


def test_a_launched_run_counts_its_throughput_per_device(tmp_path, fake_run):
    fake_run(tmp_path, "a", "gpt2-small", seq=512, batch=16, tokens_per_s=800_000.0, device=H100, devices=4)
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100"], runs=tmp_path)
    assert p.row("H100 SXM")["tokens_per_s_device"] == pytest.approx(200_000.0)


def test_a_chip_without_a_reference_uses_the_stated_default():
    # Gaudi 3 has no fp8 training reference (none published was found)
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, precision="fp8", devices=["Gaudi3"],
                runs=NO_RUNS)
    row, default = p.row("Gaudi3"), refs.references()["default"]
    assert row["mfu_from"] == "default" and row["mfu"] == pytest.approx(default["mfu"])
    assert row["sources"]["mfu"].startswith("default")
    peak = CHIPS["Gaudi3"].tflops["fp8"] * 1e12
    assert row["tokens_per_s_device"] == pytest.approx(default["mfu"] * peak / p.flops_per_token)


def test_gaudi_rows_take_published_gaudi_figures_nearest_in_size():
    p = wb.plan("gpt2-xl", tokens=10**9, batch_size=4, seq_len=1024, devices=["Gaudi2", "Gaudi3"], runs=NO_RUNS)
    for name in ("Gaudi2", "Gaudi3"):
        row = p.row(name)
        ref = next(e for e in refs.references()["mfu"] if e["chip"] == name and e.get("catalog") == "gpt2-xl")
        assert row["mfu_from"] == "published" and "GPT-2 XL" in row["sources"]["mfu"]
        # the reference ran with gradient checkpointing; a plan without it gets the recompute back
        gain = 1 if "checkpointing" in row["strategy"] else 8 / 6
        assert row["mfu"] == pytest.approx(ref["mfu"] * gain)
        peak = CHIPS[name].tflops["bf16"] * 1e12
        assert row["tokens_per_s_device"] == pytest.approx(ref["mfu"] * peak / p.flops_per_token * gain)
        assert row["usd_per_device_hour"] == refs.prices()[name]["usd_per_device_hour"]


def test_fp8_plans_use_the_fp8_peaks_and_fp8_references():
    p = wb.plan("llama-7b", tokens=10**9, batch_size=1, seq_len=4096, precision="fp8",
                devices=["Gaudi2", "A100", "H100", "H200"], runs=NO_RUNS)
    assert p.precision == "fp8"
    g2 = p.row("Gaudi2")
    ref = next(e for e in refs.references()["mfu"] if e["chip"] == "Gaudi2" and e["model"].startswith("LLaMA V2 7B"))
    assert g2["sources"]["peak"].startswith("chip table: 865 TFLOP/s dense fp8") and "LLaMA V2 7B" in g2["sources"]["mfu"]
    recompute = 6 / 8 if "checkpointing" in g2["strategy"] else 1
    assert g2["tokens_per_s_device"] == pytest.approx(ref["mfu"] * 865e12 / p.flops_per_token * recompute)
    assert p.row("A100 80GB").get("tokens_per_s") is None and "no fp8 peak" in p.row("A100 80GB")["note"]
    for name in ("H100 SXM", "H200"):
        assert "1979 TFLOP/s dense fp8" in p.row(name)["sources"]["peak"] and p.row(name)["mfu_from"] == "published"
    with pytest.raises(ValueError, match="unknown precision 'fp4'; known: auto, fp32, bf16, fp16, fp8"):
        wb.plan("gpt2-small", tokens=1e9, batch_size=8, precision="fp4")


def test_lora_counts_4n_and_the_adapters_not_6n():
    full, lora = wb.model("gpt2", size="small"), wb.model("gpt2", size="small", lora=True)
    attention = 12 * 12 * 768 * 512
    table = 1024 * 768  # learned positions: no matmul
    adapters = lora.lora_trainable()
    assert 0 < adapters < 0.02 * full.num_params  # peft's r=8 adapters
    assert flops_per_token(full, 512) == 6 * (full.num_params - table) + attention
    assert flops_per_token(lora, 512) == 4 * (full.num_params - table) + 6 * adapters + attention
    p = wb.plan(lora, tokens=1e9, batch_size=8, seq_len=512, devices=["H100"], mfu=0.4, runs=NO_RUNS)
    assert p.flops_per_token == flops_per_token(lora, 512)
    assert p.row("H100 SXM")["tokens_per_s_device"] == pytest.approx(0.4 * 989e12 / flops_per_token(lora, 512))


@pytest.fixture(scope="module")
def accuracy():
    """wb.plan_accuracy(), once: every reference and held-out result planned through wb.plan."""
    return wb.plan_accuracy()


ACCURACY_HOME = "BENCHMARKS.md#planner-does-wbplan-predict"


def _benchmarks_planner() -> str:
    """BENCHMARKS.md's "Planner" section: the one home of the planner's accuracy figures."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    return text.split("\n## Planner: does `wb.plan` predict?\n")[1].split("\n## ")[0]


def accuracy_table(summary: dict) -> str:
    """The rows of BENCHMARKS.md's accuracy table from an ``accuracy_record()``-shaped summary:
    median and worst |error| through wb.plan and of the lookup alone, by check and family."""
    rows = []
    for check, key in (("leave-one-out", "leave_one_out"), ("held-out", "held_out")):
        for family, f in summary[f"{key}_by_family"].items():
            lookup = summary[f"lookup_{key}_by_family"][family]
            rows.append(f"| {check} | {family} | {f['n']} | **{f['median_abs_error']:.1%}** | "
                        f"{f['worst_abs_error']:.1%} | {lookup['median_abs_error']:.1%} | "
                        f"{lookup['worst_abs_error']:.1%} |")
    return "\n".join(rows)


def _bands(summary: dict) -> list[str]:
    """Each family's 80% interval as the docs write it ("A100 -5% to +5%")."""
    bands = summary["intervals"]
    return [f"{family} {bands[family]['low']:+.0%} to {bands[family]['high']:+.0%}"
            for family in ("A100", "H100/H200", "Gaudi")]


@pytest.mark.policy
def test_the_planners_accuracy_figures_have_one_home():
    """BENCHMARKS.md's "Planner" section holds the accuracy table (with its command) and the
    error ranges, as recorded in plan_references.json (which the slow test above checks
    against wb.plan_accuracy()); the README and the docs link to it and state none of them."""
    recorded = refs.references()["accuracy"]
    home = _benchmarks_planner()
    assert accuracy_table(recorded) in home, "BENCHMARKS.md's accuracy table is stale; paste:\n" + accuracy_table(recorded)
    assert "wb.plan_accuracy()" in home.split(accuracy_table(recorded))[0], "the command sits above the table"
    for band in _bands(recorded):
        assert band in home, band
    figures = set(re.findall(r"\d+\.\d%", accuracy_table(recorded))) | {b.split(" ", 1)[1] for b in _bands(recorded)}
    readme = (ROOT / "README.md").read_text().split("## What will it cost?")[1].split("\n## ")[0]
    planner = (ROOT / "docs" / "planner.md").read_text().split("\n## How far to trust it\n")[1].split("\n### ")[0]
    sources = (ROOT / "docs" / "planner-sources.md").read_text()
    sources = sources.split("\n## How well the references predict each other\n")[1].split("\n## ")[0]
    for name, text in (("README.md", readme), ("docs/planner.md", planner), ("docs/planner-sources.md", sources)):
        assert ACCURACY_HOME in text, f"{name} links to the figures' home"
        assert not [f for f in figures if f in text], f"{name} states an accuracy figure: link to {ACCURACY_HOME}"


@pytest.mark.slow
def test_the_planner_matches_its_recorded_leave_one_out_and_held_out_accuracy(accuracy):
    """Each reference planned from the others, and each held-out published result from the
    references, through wb.plan; the figures recorded in plan_references.json "accuracy"
    (every plan row's range) and their one home, BENCHMARKS.md's "Planner" table, must still
    come out, or be recorded anew (accuracy.accuracy_record()) and the table pasted anew."""
    from workbench.planning.accuracy import ACCURACY_KEYS, accuracy_summary

    recorded = refs.references()["accuracy"]
    loo = accuracy[accuracy.check == "leave-one-out"].to_dict("records")
    held = accuracy[accuracy.check == "held-out"].to_dict("records")
    got = accuracy_summary(loo, held)
    for check in ("leave_one_out", "held_out"):
        assert len(got[check]) == len(recorded[check])
        for g, r in zip(got[check], recorded[check]):
            for k in ACCURACY_KEYS:
                same = g[k] == r[k] or (isinstance(r[k], float) and g[k] == pytest.approx(r[k], abs=1e-4))
                assert same, (check, r["model"], k, g[k], r[k])
    for key in ("leave_one_out_by_family", "held_out_by_family", "lookup_leave_one_out_by_family",
                "lookup_held_out_by_family", "intervals"):
        assert got[key] == recorded[key], key
    table = accuracy_table(got)
    assert table in _benchmarks_planner(), "BENCHMARKS.md's accuracy table is stale; paste:\n" + table
    # what was reached, family by family (issue 44's floors, 15% median and 50% worst, are not
    # all met: BENCHMARKS.md "Planner" says by how much and why)
    for check in ("leave_one_out_by_family", "held_out_by_family"):
        for family, figures in recorded[check].items():
            assert figures["n"] >= 2 and figures["unpredicted"] == 0, (check, family)
    met = [("leave_one_out_by_family", "A100"), ("held_out_by_family", "A100"),
           ("leave_one_out_by_family", "H100/H200"), ("held_out_by_family", "H100/H200"),
           ("held_out_by_family", "Gaudi")]
    for check, family in met:
        assert recorded[check][family]["median_abs_error"] <= 0.15, (check, family)
    for check, family in met:  # Gaudi's leave-one-out worst: LlamaGuard-7b's warm-up on Gaudi 3
        assert recorded[check][family]["worst_abs_error"] <= 0.50, (check, family)
    results = refs.references()["held_out"]["results"]
    assert len(results) >= 20 and {"Gaudi2", "Gaudi3", "A100 80GB", "H100 SXM", "H200"} <= {e["chip"] for e in results}


def test_gaudi2_over_h100_time_follows_the_published_ratio_of_each_workload():
    """The ratio the comparison turns on, through wb.plan on 8 devices each: BERT-large from
    MLPerf Training v3.1's own BERT runs on both chips (published throughput ratio 2.67:
    NVIDIA's 7,759.6 against Intel's 2,902.0 samples/s), Llama 2 7B bf16 from 7B-wide Gaudi 2
    runs (2.71 planned before, against about 1.77 in issue 44: now 2.1)."""
    def ratio(model, batch, seq):
        p = wb.plan(model, tokens=1e9, batch_size=batch, seq_len=seq, devices=["Gaudi2", "H100"],
                    num_devices=8, runs=NO_RUNS)
        return p.row("Gaudi2")["hours"] / p.row("H100 SXM")["hours"]

    assert ratio("bert-large", 32, 512) == pytest.approx(7759.6 / 2902.0, rel=0.05)
    assert 1.6 < ratio("llama-7b", 4, 2048) < 2.3


@pytest.mark.slow
def test_a_reference_leaves_with_its_twins_and_the_nearest_kind_of_run_is_taken(accuracy):
    """Leave-one-out drops the same run on another number of devices; an encoder plan on a
    Gaudi takes an encoder's figure, a decoder a decoder's, a LoRA plan prefers LoRA."""
    from workbench.planning.accuracy import _twin

    data = refs.references()
    qa = [e for e in data["mfu"] if e["chip"] == "Gaudi2" and e["model"].startswith("RoBERTa-large, question")]
    assert len(qa) == 2 and _twin(*qa)
    loo = accuracy[accuracy.check == "leave-one-out"].to_dict("records")
    row = next(r for r in loo if r["chip"] == "Gaudi2" and r["model"] == qa[0]["model"])
    assert "question answering" not in row["from"]  # predicted from another run, not its twin
    for model, want in (("bert-large", "encoder"), ("llama-7b", "decoder")):
        src = wb.plan(model, tokens=1e9, batch_size=8, seq_len=512, devices=["Gaudi2"],
                      runs=NO_RUNS).row("Gaudi2")["sources"]["mfu"]
        picked = next(e for e in data["mfu"] if e["chip"] == "Gaudi2" and f", {e['model']}, " in src)
        assert picked["arch"] == want, (model, src)


@pytest.mark.slow
def test_lora_memory_trains_the_adapters_alone_and_holds_against_a_measured_cpu_step(monkeypatch):
    """A transformer with LoRA: gradients and AdamW state for peft's adapters only, the frozen
    weights kept (and sharded by ZeRO-3); the estimate against a real fp32 step on CPU with
    the adapters on (the model wb.train trains: build, then wrap_lora)."""
    from test_memory import measured_cpu_peak

    from workbench.catalog.modelspec import ModelSpec

    build = ModelSpec.build
    monkeypatch.setattr(ModelSpec, "build", lambda self, num_labels=None: (
        lambda m, t: ((self.wrap_lora(m) if self.lora is not None else m), t))(*build(self, num_labels)))
    for family in ("gpt2", "llama", "bert"):
        spec, full = wb.model(family, size="tiny", lora={"r": 4}), wb.model(family, size="tiny")
        adapters = spec.lora_trainable()
        plan = wb.plan_memory(spec, 8, 64, precision="fp32")
        assert plan.gradients == 4 * adapters and plan.optimizer_state == 8 * adapters
        assert plan.weights == wb.plan_memory(full, 8, 64, precision="fp32").weights + 4 * adapters
        measured = measured_cpu_peak(spec, 8, 64)
        cpu = wb.plan_memory(spec, 8, 64, precision="fp32", kernels="cpu")
        assert abs(cpu.peak_allocated / measured - 1) <= 0.10, (family, cpu, measured)
        assert abs(plan.peak_allocated / measured - 1) <= 0.35, (family, plan, measured)
    big = wb.model("llama", size="3-70b", lora={"r": 8})
    two, sixteen = (wb.plan_memory(big, 1, 4096, zero_stage=3, devices=n) for n in (2, 16))
    assert sixteen.weights < two.weights / 5  # ZeRO-3 shards the frozen weights too (plus a gathered layer)


def test_num_devices_plans_that_many_or_the_fewest_that_hold_a_step():
    p = wb.plan("gpt2-xl", tokens=1e9, batch_size=4, seq_len=1024, devices=["H100"], num_devices=8,
                runs=NO_RUNS)
    one = wb.plan("gpt2-xl", tokens=1e9, batch_size=4, seq_len=1024, devices=["H100"], runs=NO_RUNS)
    r, r1 = p.row("H100 SXM"), one.row("H100 SXM")
    assert r["devices"] == 8 and r1["devices"] == 1
    # inside one server an H100 has no published one-to-eight loss (LLM Foundry's 8-GPU MFUs
    # hold it): 8 devices, 8 x the tokens/s and the same cost
    assert efficiency(refs.references(), CHIPS["H100 SXM"], 8) == 1.0
    assert r["tokens_per_s"] == pytest.approx(8 * r1["tokens_per_s"])
    assert r["cost_usd"] == pytest.approx(r1["cost_usd"])
    more = wb.plan("llama-70b", tokens=1e9, batch_size=1, seq_len=2048, devices=["H100", "A100"],
                   num_devices=2, runs=NO_RUNS)
    big = more.row("H100 SXM")
    assert big["devices"] > 2 and "num_devices=2 do not hold a step" in big["note"]
    # the printed plan and its notebook view say so, once for the rows it holds for
    for text in (repr(more), html.unescape(more._repr_html_())):
        assert f"H100 SXM, A100 80GB: {big['note']}" in " ".join(text.split()), text
    with pytest.raises(ValueError, match="num_devices must be a positive integer"):
        wb.plan("gpt2-small", tokens=1e9, batch_size=8, num_devices=0)


def test_scaling_normalises_the_figure_to_its_own_device_count_gaudi_from_its_one_to_eight():
    """A one-card Gaudi figure planned on 8 cards loses optimum-habana's measured one-to-eight
    (0.84), an 8-card figure planned on one card gains it back; past one server every chip
    loses LLM Foundry's 64-over-8 (0.977) once, and a figure of 64 devices already holds it."""
    data = refs.references()
    g2, h100 = CHIPS["Gaudi2"], CHIPS["H100 SXM"]
    assert efficiency(data, g2, 1) == 1.0 and efficiency(data, g2, 8) == pytest.approx(0.8404)
    assert efficiency(data, g2, 64) == pytest.approx(0.8404 * 0.977)
    assert efficiency(data, h100, 8) == 1.0 and efficiency(data, h100, 64) == pytest.approx(0.977)
    one = wb.plan("bert-large", tokens=1e9, batch_size=256, seq_len=128, devices=["Gaudi2"],
                  runs=NO_RUNS)
    eight = wb.plan("bert-large", tokens=1e9, batch_size=256, seq_len=128, devices=["Gaudi2"],
                    num_devices=8, runs=NO_RUNS)
    assert "MRPC" in one.row("Gaudi2")["sources"]["mfu"]  # the one-card figure, as published
    r1, r8 = one.row("Gaudi2"), eight.row("Gaudi2")
    assert r1["devices"] == 1 and r8["devices"] == 8
    assert r8["tokens_per_s"] / (8 * r8["tokens_per_s_device"]) == pytest.approx(0.8404)
    assert "one card to eight" in r8["sources"]["scaling"]


def test_a_model_too_big_for_one_device_gets_the_fewest_devices_that_hold_it():
    p = wb.plan("llama-70b", tokens=10**9, batch_size=1, seq_len=2048, devices=["H100", "H200"], runs=NO_RUNS)
    mp = wb.plan_memory("llama-70b", batch_size=1, seq_len=2048, precision="bf16")
    for name in ("H100 SXM", "H200"):
        row = p.row(name)
        n = row["devices"]
        assert not row["fits_one"] and n > 1 and row["strategy"].startswith(f"{n} devices")
        assert row["memory_gib"] * 2**30 <= CHIPS[name].memory
        assert not mp.replan(zero_stage=3, devices=2, grad_checkpointing=True).fits(name)
        data = refs.references()
        ref = next(e for e in data["mfu"] if f"{e['chip']}, {e['model']}, " in row["sources"]["mfu"])
        eff = efficiency(data, CHIPS[name], n) / efficiency(data, CHIPS[name], ref["devices"])
        assert row["tokens_per_s"] == pytest.approx(row["tokens_per_s_device"] * n * eff)
        assert ("scaling" in row["sources"]) == (eff != 1.0) and "layout" in row["sources"]
    assert p.row("H200")["devices"] <= p.row("H100 SXM")["devices"]  # 141 GB against 80 GB


def test_costs_follow_the_prices_and_yours_override_them(tmp_path):
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100", "Gaudi3"], runs=NO_RUNS)
    shipped = refs.prices()["H100 SXM"]
    h100 = p.row("H100 SXM")
    assert h100["cost_usd"] == pytest.approx(h100["hours"] * shipped["usd_per_device_hour"])
    assert h100["usd_per_million_tokens"] == pytest.approx(h100["cost_usd"] / 1000)
    gaudi3 = p.row("Gaudi3")
    assert gaudi3["usd_per_device_hour"] == pytest.approx(19.92 / 8)  # Intel Tiber: an 8-card instance / 8
    assert "Intel Tiber" in gaudi3["sources"]["price"] and "on-demand" in gaudi3["sources"]["price"]
    assert wb.plan("gpt2-small", tokens=1e9, batch_size=8, seq_len=512, devices=["Gaudi1"],
                   runs=NO_RUNS).row("Gaudi1").get("cost_usd") is None
    assert wb.plan("gpt2-small", tokens=1e9, batch_size=8, seq_len=512, devices=["H100"],
                   runs=NO_RUNS).row("H100 SXM")["cost_usd"] == pytest.approx(h100["cost_usd"])
    mine = tmp_path / "prices.json"
    mine.write_text(json.dumps({"Gaudi3": 1.0, "H100": 50}))
    for prices in ({"Gaudi3": 1.0, "H100": 50}, mine):
        p2 = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100", "Gaudi3"],
                     prices=prices, runs=NO_RUNS)
        assert p2.row("H100 SXM")["cost_usd"] == pytest.approx(h100["hours"] * 50)
        assert p2.cheapest()["device"] == "Gaudi3"
        assert "your prices" in p2.row("Gaudi3")["sources"]["price"]


def test_cheapest_and_fastest_are_the_table_minima():
    p = wb.plan("gpt2-medium", tokens=10**9, batch_size=8, seq_len=1024, runs=NO_RUNS,
                prices={"Gaudi2": 1.0, "Gaudi3": 2.0})
    df = p.table()
    assert p.fastest()["device"] == df.loc[df["hours"].idxmin(), "device"]
    assert p.cheapest()["device"] == df.loc[df["cost_usd"].idxmin(), "device"]
    assert list(df["device"]) == ["Gaudi2", "Gaudi3", "A100 80GB", "H100 SXM", "H200", "detected"]


def test_a_plan_shorter_than_a_minute_prints_seconds_and_under_a_cent_says_so():
    p = wb.plan("gpt2-tiny", tokens=10**6, batch_size=8, seq_len=128, devices=["H100"], runs=NO_RUNS)
    row = p.row("H100")
    assert row["hours"] * 3600 < 60 and row["cost_usd"] < 0.005  # what the printing below is for
    line = next(x for x in str(p).splitlines() if x.strip().startswith("H100"))
    assert f"{row['hours'] * 3600:.1f} s" in line and "<$0.01" in line and "0.0 min" not in line


@pytest.mark.parametrize("kwargs, words", [
    ({"devices": ["TPUv5"]}, ["devices", "TPUv5", "Gaudi2", "H200"]),
    ({"prices": {"TPU": 1.0}}, ["prices", "TPU", "known"]),
    ({"prices": {"H100": -1}}, ["prices", "H100", ">= 0"]),
    ({"prices": "/no/such.json"}, ["prices", "/no/such.json"]),
    ({"mfu": 1.5}, ["mfu", "(0, 1]"]),
    ({"tokens": 0}, ["tokens", "positive"]),
    ({"tokens": float("inf")}, ["tokens", "positive"]),
    ({"precision": "int4"}, ["precision", "bf16"]),
    ({"batch_size": 0}, ["batch_size", "positive"]),
])
def test_bad_input_is_one_clear_error_naming_the_argument(kwargs, words):
    args = {"tokens": 10**6, "batch_size": 8, "seq_len": 128, **kwargs}
    with pytest.raises(ValueError) as e:
        wb.plan("gpt2-small", **args)
    for w in words:
        assert w in str(e.value)


@pytest.mark.slow
def test_a_unet_is_timed_per_image_from_mlperf_stable_diffusion_or_says_default():
    """FLOPs an image = 3 x the UNet's forward counted on the meta device (the latent-cache
    benchmark's count); Gaudi 2, H100 and H200 take MLPerf's SD v2 figures, the A100 (none
    published) the stated default."""
    from benchmarks.sdcache import sd15_flops
    from workbench.planning.flops import flops_per_sample

    spec = wb.model("unet-sd15")
    assert flops_per_sample(spec) == pytest.approx(3e9 * sd15_flops()["unet_forward_gflops"])
    assert flops_per_sample(wb.model("sd", size="sd15")) == flops_per_sample(spec)
    assert flops_per_sample(wb.model("sd", size="sd15", lora={"r": 4})) == 2 / 3 * flops_per_sample(spec)
    with pytest.raises(ValueError, match="not a UNet"):
        flops_per_sample(wb.model("gpt2", size="small"))
    p = wb.plan(spec, tokens=10**6, batch_size=8, devices=["Gaudi2", "A100", "H100", "H200"], runs=NO_RUNS)
    assert p.unit == "image" and p.flops_per_token is None and p.flops_per_image == flops_per_sample(spec)
    assert "images/s" in repr(p) and "1,000,000 images" in repr(p)
    data = refs.references()
    for name in ("Gaudi2", "H100 SXM", "H200"):
        row = p.row(name)
        ref = next(e for e in data["mfu"] if e["chip"] == name and e["arch"] == "unet")
        assert row["mfu_from"] == "published" and "MLPerf" in row["sources"]["mfu"]
        ckpt = 6 / 8 if "checkpointing" in row["strategy"] else 1
        # less the communication its own run paid (Gaudi 2's 64 devices across 8 servers)
        own = own_overhead(ref, "bf16", ref["mfu"] * CHIPS[name].tflops["bf16"] * 1e12)
        assert (own > 1.05) == (name == "Gaudi2"), own
        per = ref["mfu"] * CHIPS[name].tflops["bf16"] * 1e12 / flops_per_sample(spec) * ckpt * own
        assert row["tokens_per_s_device"] == pytest.approx(per) and row["hours"] > 0 and row["cost_usd"] > 0
        assert ref["mfu"] == pytest.approx(ref["samples_per_s_device"] * ref["flops_per_sample"]
                                           / (ref["peak_tflops"] * 1e12), abs=1e-4)
    assert p.row("A100 80GB")["mfu_from"] == "default"
    # a transformer never takes a UNet's figure
    assert "Stable Diffusion" not in wb.plan("gpt2-small", tokens=1e9, batch_size=8, seq_len=512, devices=["H100"],
                                             runs=NO_RUNS).row("H100 SXM")["sources"]["mfu"]


def test_the_notebook_view_draws_time_and_cost_without_scripts():
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, runs=NO_RUNS)
    page = p._repr_html_()
    assert "<script" not in page and "sources" in page
    svg = b64decode(page.split("data:image/svg+xml;base64,")[1].split("'")[0]).decode()
    root = ET.fromstring(svg)  # well-formed
    bars = [e for e in root.iter() if e.tag.endswith("rect")]
    priced = [r for r in p.rows if r.get("cost_usd") is not None]
    timed = [r for r in p.rows if r.get("hours") is not None]
    assert len(bars) == len(timed) + len(priced)
    assert "TrainingPlan" in repr(p) and "H200" in repr(p)


def test_every_published_figure_is_planned_as_the_model_it_measured():
    """The model a reference or held-out result is planned as (its ``plan`` spec) has the
    parameters and FLOPs a token its MFU was converted with: a spec that builds another shape
    (a width override that left the tiny config's 32-wide heads, as Qwen2-7B's did: 6.45B
    parameters for 7.07B) plans other FLOPs than the figure's."""
    from workbench.planning.matching import spec_of

    data = refs.references()
    checked = 0
    for e in data["mfu"] + data["held_out"]["results"]:
        if not (e.get("plan") and e.get("seq_len") and e.get("flops_per_token")):
            continue
        spec = spec_of(e)
        assert spec.num_params == pytest.approx(e["params"], rel=5e-3), e["model"]
        assert flops_per_token(spec, e["plan"]["seq_len"]) == pytest.approx(e["flops_per_token"], rel=5e-3), e["model"]
        checked += 1
    assert checked >= 40


def test_every_shipped_figure_says_where_it_came_from():
    data = refs.references()
    for e in data["mfu"] + data["not_used"] + [data["scaling"]]:
        assert e["url"] and e["read"] and e["source"] and (e.get("measures") or e.get("why_not_used"))
    for e in data["mfu"]:
        assert e["chip"] in CHIPS and 0 < e["mfu"] < 1 and e["params"] > 0
        assert e["kind"] in ("published", "measured")
    for e in refs.prices().values():
        assert e["url"].startswith("https://") and e["read"] and e["usd_per_device_hour"] > 0
    assert math.isclose(data["default"]["mfu"], data["default"]["mfu"]) and data["default"]["kind"] == "default"


def test_the_mfu_benchmark_and_the_planner_count_flops_with_one_function():
    import importlib

    assert importlib.import_module("benchmarks.mfu").flops_per_token is flops_per_token


def test_the_plan_benchmark_estimates_this_projects_runs_from_published_figures_only():
    import importlib

    bench_plan = importlib.import_module("benchmarks.plan")
    out = bench_plan._references_only()
    measured = [e for e in refs.references()["mfu"] if e["kind"] == "measured"]
    assert len(out) == len(measured)
    for e in measured:
        got = out[f"{e['chip']} {e['model']}"]
        assert got["estimate_from"].startswith("published") and "BENCHMARKS.md" not in got["estimate_from"]
        spec = wb.model(e["catalog"])
        published = {r["mfu"] for r in refs.references()["mfu"] if r["kind"] == "published"}
        mfu = got["estimate_mfu"]
        speedup = float(re.match(r"x([\d.]+):", got["estimate_bandwidth"]).group(1)) if got["estimate_bandwidth"] else 1
        assert any(mfu / speedup == pytest.approx(m, rel=5e-3) for m in published), (mfu, speedup)
        peak = CHIPS[e["chip"]].tflops[e["precision"]] * 1e12
        assert got["estimate_tokens_per_s"] == pytest.approx(mfu * peak / flops_per_token(spec, e["seq_len"]))
        assert got["error_pct"] == pytest.approx(100 * (got["estimate_tokens_per_s"] / e["tokens_per_s"] - 1))
    settings = bench_plan._settings(8, 128)
    assert settings["fit"] == (8, 128) and {v for k, v in settings.items() if k != "fit"} == {
        (4, 128), (16, 128), (8, 64), (8, 256)}


def test_the_model_picker_shows_time_and_cost_for_a_token_budget():
    from workbench.forms.pickers import pick_model

    off = pick_model("gpt2", size="small", batch_size=8, seq_len=512)
    assert "cost" not in off.devices.value  # no budget: no plan
    p = pick_model("gpt2", size="small", batch_size=8, seq_len=512, tokens=10**9)
    assert "time for 1,000,000,000 tokens" in p.devices.value and p.error is None
    row = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100"]).row("H100 SXM")
    from workbench.planning.trainingplan import fmt_hours, fmt_money

    assert fmt_hours(row["hours"]) in p.devices.value and fmt_money(row["cost_usd"]) in p.devices.value
    p.tokens.value = 0
    assert "cost" not in p.devices.value


def test_a_references_file_of_your_own_replaces_the_shipped_one(tmp_path):
    data = refs.references()
    mine = tmp_path / "refs.json"
    only = [{**e, "mfu": 0.5} for e in data["mfu"] if e["chip"] == "H100 SXM"]
    mine.write_text(json.dumps({**data, "mfu": only}))
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100", "A100"],
                runs=NO_RUNS, references=mine)
    h100 = p.row("H100 SXM")  # your figure, carried to gpt2-small through its memory-bound share
    speedup = float(re.match(r"x([\d.]+):", h100["sources"]["bandwidth"]).group(1))
    assert h100["mfu"] == pytest.approx(0.5 * speedup, rel=5e-3) and speedup < 1
    assert p.row("A100 80GB")["mfu_from"] == "default"  # 312 TFLOP/s: no entry with its peak is left
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"mfu": []}))
    with pytest.raises(ValueError, match="references: .* has no 'scaling' entry"):
        wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, references=broken)


README_RUNS = {  # the README's planner table: run -> (model, per-device batch, sequence length, budget)
    "BERT-large": (("bert-large",), 32, 512, 10**9),
    "GPT-2-XL": (("gpt2-xl",), 8, 1024, 10**9),
    "Llama 2 7B": (("llama-7b",), 4, 2048, 10**9),
    "Llama 2 7B LoRA": (("llama", "7b"), 4, 2048, 10**9),
    "Llama 3 70B LoRA": (("llama", "3-70b"), 1, 4096, 10**9),
    "SD 1.5 UNet": (("unet-sd15",), 8, None, 10**6),
}


def readme_planner_table() -> str:
    """The README's table, as wb.plan gives it today on 8 devices of each chip (``*``: the
    stated default MFU)."""
    heads = {"Gaudi2": "Gaudi 2", "Gaudi3": "Gaudi 3", "A100 80GB": "A100", "H100 SXM": "H100", "H200": "H200"}

    def cell(r):
        h = r["hours"]
        t = f"{h * 60:.0f} min" if h < 1 else f"{h:.1f} h" if h < 48 else f"{h / 24:.1f} d"
        return f"{t}, ${r['cost_usd']:,.0f}" + (" *" if r["mfu_from"] == "default" else "")

    # cells without padding: the README's lines stay within 100 columns
    lines = ["|8 x|batch a device|" + "|".join(heads.values()) + "|", "|---" * (len(heads) + 2) + "|"]
    for name, (m, b, s, budget) in README_RUNS.items():
        model = wb.model(m[0], size=m[1], lora={"r": 8}) if len(m) == 2 else m[0]
        p = wb.plan(model, tokens=budget, batch_size=b, seq_len=s, devices=list(heads), num_devices=8,
                    runs=NO_RUNS)
        shape = f"{b} images" if s is None else f"{b} x {s}"
        lines.append(f"|{name}|{shape}|" + "|".join(cell(r) for r in p.rows) + "|")
    return "\n".join(lines)


@pytest.mark.slow
def test_the_readme_planner_table_is_what_the_planner_says():
    readme = (ROOT / "README.md").read_text()
    table = readme_planner_table()
    assert table in readme, "README's planner table is stale; paste:\n" + table
    gaudi2 = [line.split("|")[3] for line in table.splitlines()[2:]]
    assert all("*" not in cell and "$" in cell for cell in gaudi2)
    # the settings, the price snapshot's date and the planner's measured error sit beside it
    section = readme.split("## What will it cost?")[1].split("\n## ")[0]
    assert "num_devices=8" in section and "#how-far-to-trust-it" in section
    for e in refs.prices().values():
        assert re.search(r"\d{4}-\d{2}-\d{2}", e["date"]).group() in section, e["date"]
    assert ACCURACY_HOME in section, "the planner's measured error: a link to its one home"


# --------------------------------------------------------------------------- issue 44
NO_RUNS = os.devnull  # plan without your runs (a missing path is refused)


def test_llama_7b_on_8_h100s_plans_without_checkpointing_where_zero3_holds_the_step():
    """Llama 2 7B, batch 4 x 2048 a device: ZeRO-3 over 8 H100s holds the step without
    checkpointing by the planner's own memory model, so the plan pays no recompute."""
    mp = wb.plan_memory("llama-7b", batch_size=4, seq_len=2048, precision="bf16")
    assert mp.replan(zero_stage=3, devices=8).fits("H100")
    row = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, devices=["H100"], num_devices=8,
                  runs=NO_RUNS).row("H100 SXM")
    assert row["devices"] == 8 and "checkpointing" not in row["strategy"]
    assert "recompute" not in row["sources"] or "not needed here" in row["sources"]["recompute"]
    assert row["launch"].startswith("wb.launch(model, data, devices=8")


@pytest.mark.parametrize("model, seq, chip", [("llama-7b", 2048, "Gaudi2"), ("llama-7b", 2048, "H100"),
                                               ("gpt2-xl", 1024, "Gaudi3"), ("llama-70b", 4096, "H200")])
def test_a_larger_batch_never_plans_slower(model, seq, chip):
    hours = [wb.plan(model, tokens=1e9, batch_size=b, seq_len=seq, devices=[chip], num_devices=8,
                     runs=NO_RUNS).rows[0]["hours"] for b in (1, 2, 4, 8)]
    assert all(later <= earlier * (1 + 1e-9) for earlier, later in zip(hours, hours[1:])), hours


def test_llama_70b_names_its_tensor_and_pipeline_degrees_and_their_cost():
    p = wb.plan("llama-70b", tokens=1e9, batch_size=1, seq_len=4096, devices=["Gaudi2", "H100"],
                num_devices=64, runs=NO_RUNS)
    for name in ("Gaudi2", "H100 SXM"):
        row = p.row(name)
        assert row["devices"] == 64 and row["tensor_parallel"] * row["pipeline_parallel"] > 1, row["strategy"]
        assert "checkpointing" not in row["strategy"]  # tensor parallel holds it for less than a recompute
        assert row["context_parallel"] == 1  # 4,096 tokens: context parallel is for 8K and more
        assert f"tensor parallel {row['tensor_parallel']}" in row["strategy"]
        assert f"--tensor-model-parallel-size {row['tensor_parallel']}" in row["launch"]
        for degree, cost in (("tensor_parallel", "tensor"), ("context_parallel", "context")):
            if row[degree] > 1:  # its communication is charged, in seconds a step
                assert re.search(rf"\b{cost} [0-9.e+-]+ s", row["sources"]["layout"]), row["sources"]["layout"]
        mp = wb.plan_memory("llama-70b", batch_size=1, seq_len=4096)
        assert mp.replan(devices=64, zero_stage=1, tensor_parallel=row["tensor_parallel"],
                         pipeline_parallel=row["pipeline_parallel"],
                         context_parallel=row["context_parallel"]).fits(name)
        assert not mp.replan(devices=64, zero_stage=3).fits(name)  # data parallel alone needs a recompute


def test_tensor_and_pipeline_degrees_split_memory_and_are_checked():
    mp = wb.plan_memory("llama-70b", batch_size=1, seq_len=4096)
    tp = mp.replan(devices=8, tensor_parallel=8)
    assert tp.weights == pytest.approx(mp.weights / 8, rel=0.01)
    assert tp.activations < mp.activations / 4
    with pytest.raises(ValueError, match="tensor_parallel=3 must divide the 64 attention heads"):
        mp.replan(devices=6, tensor_parallel=3)
    with pytest.raises(ValueError, match="devices=4 is not a multiple"):
        mp.replan(devices=4, tensor_parallel=8)


def test_h200_is_planned_faster_than_h100_from_its_own_bandwidth_and_memory():
    """The same reference (H100's), the H200's 4.8 TB/s against 3.35 speeds up the step's
    memory-bound share; where 141 GB allows a lighter layout it gains that too (MLPerf
    Training v4.0 Llama 2 70B LoRA: 2.47 against 2.15 samples/s, TP2 against TP4)."""
    p = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, devices=["H100", "H200"], num_devices=8,
                runs=NO_RUNS)
    h100, h200 = p.row("H100 SXM"), p.row("H200")
    assert "bandwidth" in h200["sources"] and "4.8 TB/s" in h200["sources"]["bandwidth"]
    assert 1.0 < h200["tokens_per_s"] / h100["tokens_per_s"] < 1.2
    assert CHIPS["H200"].hbm_tbps / CHIPS["H100 SXM"].hbm_tbps == pytest.approx(4.8 / 3.35)
    assert CHIPS["Gaudi3"].memory > CHIPS["Gaudi2"].memory and CHIPS["Gaudi3"].link_gbs > CHIPS["Gaudi2"].link_gbs


@pytest.mark.slow
def test_every_catalog_model_plans():
    """Every model of wb.models() plans on a device (SD 2 and SDXL give their UNet settings per
    block); the VAE, which has no memory or FLOP model, is refused with the way out."""
    for fam, size in wb.models()[["family", "size"]].itertuples(index=False):
        spec = wb.model(fam, size=size)
        seq = None if fam in ("unet", "sd", "vae") else 128
        if fam == "vae":
            with pytest.raises(ValueError, match="plan the Stable Diffusion pipeline"):
                wb.plan(spec, tokens=1e6, batch_size=1, devices=["H100"], runs=NO_RUNS)
            continue
        row = wb.plan(spec, tokens=1e6, batch_size=1, seq_len=seq, devices=["H100"], runs=NO_RUNS).rows[0]
        assert row["devices"] >= 1 and row["strategy"], (fam, size)


@pytest.mark.parametrize("call, words", [
    (lambda: wb.plan("gpt2-small", tokens=0.4, batch_size=8, seq_len=128), ["tokens", "at least 1", "0.4"]),
    (lambda: wb.plan("gpt2-small", tokens=1e6, batch_size=8, seq_len=128, devices=["gaudi"]),
     ["'gaudi' is ambiguous", "Gaudi2", "Gaudi3", "'Gaudi1'", "1.21"]),
    (lambda: wb.plan("gpt2-small", tokens=1e6, batch_size=8, seq_len=128, devices=["CPU"]),
     ["devices", "'CPU'", "'detected'"]),
    (lambda: wb.plan("gpt2-small", tokens=1e6, batch_size=8, seq_len=128, devices=["Guadi2"]),
     ["devices: unknown device 'Guadi2' (did you mean 'Gaudi2'?)", "H200"]),
    (lambda: wb.plan("gpt2-small", tokens=1e6, batch_size=8, seq_len=128, devices=["H1000"]),
     ["devices: unknown device 'H1000'", "H100 SXM"]),  # was planned as an H100
    (lambda: wb.plan("gpt2-small", tokens=1e6, batch_size=8, seq_len=128, num_devices=10**6),
     ["num_devices=1000000", "4096"]),
    (lambda: wb.plan("llama-7b", tokens=1e6, batch_size=1, seq_len=10**6, devices=["H100"]),
     ["seq_len <= 4096", "max_position_embeddings"]),
    (lambda: wb.plan(wb.model("llama", size="7b", hidden_size=-1), tokens=1e6, batch_size=1, seq_len=128),
     ["hidden_size must be a positive integer", "-1"]),
])
def test_bad_input_is_refused_at_the_door_with_the_valid_values(call, words):
    with pytest.raises(ValueError) as e:
        call()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_an_unknown_device_lists_only_what_can_be_planned():
    with pytest.raises(ValueError) as e:
        wb.plan("gpt2-small", tokens=1e6, batch_size=8, seq_len=128, devices=["TPU"])
    assert "Gaudi1" in str(e.value) and "'detected'" in str(e.value) and "CPU" not in str(e.value)
    assert wb.plan("gpt2-small", tokens=1e6, batch_size=8, seq_len=128, devices=["Gaudi1"],
                   runs=NO_RUNS).rows[0]["device"] == "Gaudi1"  # the first Gaudi, named explicitly


def test_every_row_carries_the_range_of_its_families_measured_error_and_says_when_it_depends():
    p = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, num_devices=8, runs=NO_RUNS,
                devices=["Gaudi2", "Gaudi3", "A100", "H100", "H200"])
    bands = refs.references()["accuracy"]["intervals"]
    for r in p.rows:
        family = {"Gaudi2": "Gaudi", "Gaudi3": "Gaudi", "A100 80GB": "A100"}.get(r["device"], "H100/H200")
        assert r["hours_low"] == pytest.approx(r["hours"] * (1 + bands[family]["low"]))
        assert r["hours_high"] == pytest.approx(r["hours"] * (1 + bands[family]["high"]))
        assert "the 80% interval" in r["sources"]["range"] and "held-out results" in r["sources"]["range"]
        assert r["cost_low"] <= r["cost_usd"] <= r["cost_high"] and family in r["sources"]["range"]
        assert r["price_date"] and r["price_source"]  # the price snapshot's date and provider
    cheapest = p.cheapest()
    assert cheapest["overlaps"] == [r["device"] for r in p.rows if r is not p.row(cheapest["device"])
                                    and r["cost_low"] <= cheapest["cost_high"]]
    if cheapest["overlaps"]:
        assert cheapest["answer"].startswith("it depends") and "MFU your run reaches" in cheapest["answer"]
    mine = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, num_devices=8, runs=NO_RUNS,
                   devices=["Gaudi2", "H100"], prices={"Gaudi2": 0.01})
    assert mine.cheapest()["answer"] == "Gaudi2 is cheapest, beyond the measured error of every other row"
    assert {"hours_low", "hours_high", "range_level", "cost_low", "cost_high", "price_date",
            "price_source"} <= set(p.table())
    # what the intervals are, said where a reader sees them: the printed plan and its notebook view
    assert {r["range_level"] for r in p.rows} == {bands["level"]} == {0.8}
    printed = " ".join(repr(p).split())
    assert re.search(r"time +80% interval +cost", repr(p).splitlines()[2]), repr(p)
    assert ("80% interval: the time and the cost if the planner errs as it did on the middle 80% "
            "of published runs it was not fitted to, by chip family") in printed
    assert "time, 80% interval" in p._repr_html_() and "the middle 80% of published runs" in p._repr_html_()
    # a references file without the accuracy record: no interval, and no line claiming one
    bare = {k: v for k, v in refs.references().items() if k != "accuracy"}
    none = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, num_devices=8, runs=NO_RUNS,
                   devices=["Gaudi2", "H100"], references=bare)
    assert {r["range_level"] for r in none.rows} == {None}
    assert "interval" not in repr(none) and "range:" not in repr(none)
    # and the column shows none, not a span from the time to itself
    from workbench.planning.trainingplan import fmt_hours

    for r in none.rows:
        line = next(x for x in repr(none).splitlines() if x.strip().startswith(r["device"]))
        assert f"{fmt_hours(r['hours'])} - " not in line and re.search(r" - +\$", line), line
    assert all("no measured error" in r["sources"]["range"] for r in none.rows)


LLAMA_405B = dict(hidden_size=16384, intermediate_size=53248, num_hidden_layers=126, num_attention_heads=128,
                  num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, tie_word_embeddings=False)


def test_llama_405b_at_8192_tokens_plans_context_parallel_on_uneven_pipeline_stages():
    """MLPerf Training v5.0's Llama 3.1 405B run (512 H100s, 8,192 tokens, fp8) splits every
    sequence over context-parallel ranks and its 126 layers over 8 stages; wb.plan finds a
    layout of that kind, without a recompute, and says how to launch it."""
    spec = wb.model("llama", **LLAMA_405B)
    assert spec.num_params == pytest.approx(405.85e9, rel=1e-3)
    row = wb.plan(spec, tokens=1e9, batch_size=2, seq_len=8192, precision="fp8", devices=["H100"],
                  num_devices=512, runs=NO_RUNS).row("H100 SXM")
    assert row["context_parallel"] > 1 and row["pipeline_parallel"] > 1, row["strategy"]
    assert "checkpointing" not in row["strategy"] and f"context parallel {row['context_parallel']}" in row["strategy"]
    assert f"--context-parallel-size {row['context_parallel']}" in row["launch"]
    assert "--ds-sequence-parallel-size" in row["launch"]  # Gaudi's Megatron-DeepSpeed: Ulysses
    assert re.search(r"\bcontext [0-9.e+-]+ s", row["sources"]["layout"])


def test_uneven_pipeline_stages_and_context_parallel_in_the_memory_plan():
    """The largest of uneven stages is planned (3 layers over 2 stages: 2 of them), context
    parallel divides the activations, and a sequence it cannot split in 2 x c chunks is refused."""
    mp = wb.plan_memory(wb.model("llama", num_hidden_layers=3), batch_size=2, seq_len=64)
    one = mp.replan(devices=2, zero_stage=0)
    two = mp.replan(devices=2, pipeline_parallel=2)
    assert two.weights == pytest.approx(one.weights * (2 * 2 / 3) / 2, rel=1e-6)
    cp = mp.replan(devices=2, context_parallel=2)
    assert cp.activations < one.activations and cp.weights == one.weights
    with pytest.raises(ValueError, match=r"context_parallel=4 needs seq_len divisible by 8 .*seq_len=60"):
        wb.plan_memory(wb.model("llama"), batch_size=1, seq_len=60).replan(devices=4, context_parallel=4)
    with pytest.raises(ValueError, match="pipeline_parallel=4 is more stages than the 3 layers"):
        mp.replan(devices=4, pipeline_parallel=4)


def test_zero_2_and_3_pay_their_gradient_traffic_for_every_micro_batch():
    """DeepSpeed reduces ZeRO-2/3 gradients after every micro-batch's backward (a rank keeps
    only its partition) and ZeRO-3 gathers the weights for each: with a micro-batches a step
    the traffic is (a + 1) / 2 and 1.5 a all-reduces, where DDP and ZeRO-1 reduce once."""
    from workbench.planning import layout

    mp = wb.plan_memory("gpt2-xl", batch_size=8, seq_len=1024).replan(devices=16)
    chip = CHIPS["H100 SXM"]
    per = flops_per_token(wb.model("gpt2-xl"), 1024)

    def traffic(zero, accumulation):  # the data term with nothing to hide behind
        lay = layout.Layout(16, zero=zero, micro_batch=8 // accumulation, accumulation=accumulation)
        t = layout.timing(lay, mp, chip, per, 1e30, 1_000_000_000)
        return t["data"]

    for zero in (0, 1):  # once a step, whatever the accumulation
        assert traffic(zero, 4) == pytest.approx(traffic(zero, 1)) and traffic(zero, 1) > 0
    assert traffic(2, 4) == pytest.approx(traffic(1, 4) * 5 / 2)
    assert traffic(3, 4) == pytest.approx(traffic(1, 4) * 6)
    assert traffic(3, 1) == pytest.approx(traffic(1, 1) * 1.5)  # the ZeRO paper's 1.5x


def test_the_printed_plan_and_its_notebook_view_state_the_answer_with_its_uncertainty():
    p = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, num_devices=8, runs=NO_RUNS,
                devices=["Gaudi2", "Gaudi3", "H100", "H200"])
    fastest, cheapest = p.fastest()["answer"], p.cheapest()["answer"]
    printed = " ".join(line.strip() for line in repr(p).splitlines())
    assert printed.endswith(f"{fastest} {cheapest} {p._prices()}")
    assert printed.startswith(f"TrainingPlan: {p._title()} stack: the fastest that fits")
    assert html.escape(fastest) in p._repr_html_() and html.escape(cheapest) in p._repr_html_()
    # Gaudi 2 and Gaudi 3 for Llama 2 7B: the cost ranges overlap, and the answer says so
    assert cheapest.startswith("it depends: ") and "(the cost ranges overlap)" in cheapest
    one = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, num_devices=8, runs=NO_RUNS,
                  devices=["H100"])
    assert one.fastest()["answer"] == "H100 SXM is the only row with a time: nothing to compare"
    # a default MFU is an assumption: the answer says so when the best row stands on one
    sd = wb.plan("unet-sd15", tokens=1e6, batch_size=8, num_devices=8, runs=NO_RUNS,
                 devices=["Gaudi3", "H100"])
    assert sd.row("Gaudi3")["mfu_from"] == "default" and sd.cheapest()["device"] == "Gaudi3"
    assert sd.cheapest()["answer"].endswith(
        ". Gaudi3's MFU is the stated default (no published figure for this model on it): an "
        "assumption, not a measurement")
    published = wb.plan("unet-sd15", tokens=1e6, batch_size=8, num_devices=8, runs=NO_RUNS,
                        devices=["Gaudi2", "H100"]).fastest()
    assert published["mfu_from"] == "published" and "stated default" not in published["answer"]
    unpriced = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, num_devices=8, runs=NO_RUNS,
                       devices=["detected"])
    assert "only row" not in repr(unpriced) and "cheapest" not in repr(unpriced)  # nothing to answer


@pytest.mark.slow
def test_plan_accuracy_predicts_through_wb_plan_itself(accuracy):
    """plan_accuracy's prediction for a published result is what wb.plan says for that run (its
    model, batch, length, precision, chip and devices), not the MFU lookup's."""
    from workbench.planning.accuracy import spec_of

    acc = accuracy
    data = refs.references()
    for model in ("Llama 2 70B LoRA (MLPerf Training v4.0, NVIDIA, 8 devices)", "MPT-30B"):
        e = next(x for x in data["held_out"]["results"] if x["model"] == model and x["chip"] == "H100 SXM")
        got = acc[(acc.check == "held-out") & (acc.model == model) & (acc.chip == "H100 SXM")].iloc[0]
        row = wb.plan(spec_of(e), tokens=1e9, batch_size=e["plan"]["batch_size"], seq_len=e["plan"]["seq_len"],
                      precision=e["precision"], devices=["H100"], num_devices=e["devices"],
                      checkpointing=e.get("checkpointing"), strategy=e.get("stack"),
                      runs=NO_RUNS).row("H100 SXM")
        assert got.predicted == pytest.approx(row["tokens_per_s"] / row["devices"], rel=1e-4)
        assert got.layout == row["strategy"] and got.error != got.lookup_error
        assert got.predicted_mfu == pytest.approx(got.mfu * (1 + got.error), rel=2e-3)  # notebook 11 shows it
    new = [e for e in data["held_out"]["results"] if e["read"] == "2026-12-04"]
    assert len(new) >= 10 and all("mlcommons/training_results" in e["url"] for e in new)


@pytest.mark.slow
def test_no_single_figure_reaches_the_two_worst_gaudi_rows():
    """The bound BENCHMARKS.md ("Planner") states: each Gaudi reference planned from every single
    figure of its chip in turn, the closest kept. It is never worse than the figure wb.plan
    picks (one of the candidates), and only two rows stay past issue 44's 50% with any figure."""
    import statistics

    from workbench.planning.accuracy import single_reference_bound

    rows = single_reference_bound()
    bounded = [r for r in rows if r["best_error"] is not None]
    assert len(bounded) == 20 and [r["model"] for r in rows if r["best_error"] is None] == [
        "Stable Diffusion v2 UNet (MLPerf Training, 512x512)"]  # the only Gaudi UNet figure
    for r in bounded:
        assert abs(r["best_error"]) <= abs(r["error"]) + 1e-4, r
    far = {(r["chip"], r["model"]): r["best_error"] for r in bounded if abs(r["best_error"]) > 0.5}
    assert set(far) == {("Gaudi3", "RoBERTa-large, masked LM (wikitext-2), 8 cards"),
                        ("Gaudi3", "LlamaGuard-7b (Llama 2 7B shape), sequence classification (MRPC), 8 cards")}
    home = _benchmarks_planner()
    median = statistics.median(abs(r["best_error"]) for r in bounded)
    assert f"best single figure gives a median of {median:.1%}" in home
    for error in far.values():
        assert f"**{error:+.1%}**" in home


def test_a_gaudi_run_pays_its_published_warm_up_once_and_an_nvidia_run_none():
    """A run's time = the chip's warm-up (the median of its optimum-habana CI runs' train_runtime
    - samples / train_samples_per_second: graph compilation) + tokens / the steady rate; the
    NVIDIA GPUs (eager, no published warm-up) pay none. A short run feels it, a long one not."""
    import statistics

    data = refs.references()
    spent = [e["run"]["runtime_s"] - e["run"]["samples"] / e["run"]["samples_per_s"]
             for e in data["mfu"] if e["chip"] == "Gaudi2" and e.get("run")]
    assert len(spent) >= 3 and all(10 < s < 60 for s in spent)  # tens of seconds on Gaudi 2
    for tokens in (1e6, 1e10):
        p = wb.plan("bert-large", tokens=tokens, batch_size=32, seq_len=128, devices=["Gaudi2", "H100"],
                    num_devices=8, runs=NO_RUNS)
        gaudi, h100 = p.row("Gaudi2"), p.row("H100 SXM")
        assert gaudi["warmup_s"] == pytest.approx(statistics.median(spent))
        assert gaudi["hours"] * 3600 == pytest.approx(gaudi["warmup_s"] + tokens / gaudi["tokens_per_s"])
        assert "train_runtime" in gaudi["sources"]["warmup"]
        assert h100["warmup_s"] == 0 and "warmup" not in h100["sources"]
        assert h100["hours"] * 3600 == pytest.approx(tokens / h100["tokens_per_s"])
    assert "warmup_s" in p.table().columns


@pytest.mark.slow
def test_a_result_that_states_its_whole_run_is_checked_by_the_time_wb_plan_gives_for_it(accuracy):
    """Where a published result states its run (samples, train_runtime), plan_accuracy compares
    wb.plan's time for that run's own tokens with the runtime; every row keeps the steady-rate
    error beside it, and a row without a stated run is checked on its steady rate."""
    data = refs.references()
    e = next(x for x in data["held_out"]["results"] if x["chip"] == "Gaudi2" and x.get("run"))
    row = accuracy[(accuracy.check == "held-out") & (accuracy.chip == "Gaudi2") & (accuracy.model == e["model"])]
    row = row.iloc[0]
    plan = wb.plan("bert-large", tokens=e["run"]["samples"] * e["seq_len"], batch_size=e["batch_size"],
                   seq_len=e["seq_len"], devices=["Gaudi2"], num_devices=e["devices"], runs=NO_RUNS).row("Gaudi2")
    assert row.measured_as == "whole run"
    assert row.error == pytest.approx(e["run"]["runtime_s"] / (plan["hours"] * 3600) - 1, abs=1e-4)
    assert row.steady_error == pytest.approx(plan["tokens_per_s"] / 8 / row.published - 1, abs=1e-4)
    steady = accuracy[accuracy.measured_as == "steady rate"]
    assert len(steady) > 40 and (steady.error == steady.steady_error).all()


def test_the_answer_for_a_model_far_from_every_reference_says_the_measured_error_does_not_cover_it():
    """A 1.5M-parameter GPT-2 takes every chip's MFU from a model 84x to 1,048x its size: the
    planner's error was measured on results planned from references of similar sizes, so the
    answer says the order is an extrapolation instead of 'beyond the measured error'."""
    tiny = wb.plan("gpt2-tiny", tokens=1e9, batch_size=8, seq_len=64, runs=NO_RUNS,
                   devices=["Gaudi2", "H100", "H200"])
    assert all(r["mfu_size_ratio"] > 4 for r in tiny.rows)
    for answer in (tiny.fastest()["answer"], tiny.cheapest()["answer"]):
        assert "beyond the measured error" not in answer
        assert "measured error does not cover this model" in answer and "extrapolation" in answer
        assert "Gaudi2, H100 SXM, H200 take their MFU from a model" in answer
    # a model near its references keeps the plain verdict
    near = wb.plan("llama-7b", tokens=1e9, batch_size=4, seq_len=2048, num_devices=8, runs=NO_RUNS,
                   devices=["Gaudi2", "H100"], prices={"Gaudi2": 0.01})
    assert near.cheapest()["answer"] == "Gaudi2 is cheapest, beyond the measured error of every other row"


def test_an_interval_holds_its_level_of_the_leave_one_out_errors_and_is_tested_on_held_out_ones():
    """accuracy.intervals: split conformal's interval of a family's leave-one-out errors, the
    k-th smallest to the k-th largest, k = floor((n + 1)(1 - level) / 2) (pooled where it has
    too few, and it says so), its coverage counted on held-out rows and, each without itself,
    on the leave-one-out rows, and rows planned from the default MFU left out of all."""
    from workbench.planning.accuracy import ENOUGH, intervals

    loo = [{"chip": "H100 SXM", "error": e / 100} for e in range(-10, 11)]  # -10% .. +10%
    loo += [{"chip": "A100 80GB", "error": 0.5}, {"chip": "H100 SXM", "error": 9.0, "assumption": True}]
    held = [{"chip": "H100 SXM", "error": e} for e in (-0.2, -0.05, 0.0, 0.05, 0.3)]
    held.append({"chip": "H100 SXM", "error": 0.0, "assumption": True})
    got = intervals(loo, held, level=0.8)
    h = got["H100/H200"]
    # 21 errors: k = floor(22 x 0.1) = 2, the second smallest and the second largest
    assert (h["low"], h["high"]) == (pytest.approx(-0.09), pytest.approx(0.09))
    assert h["held_out"] == 5 and h["coverage"] == pytest.approx(3 / 5)
    # each leave-one-out row against the band made from the other twenty (k = 2 again): -10%,
    # -9%, +9% and +10% fall out; the assumption counts not
    assert h["leave_one_out_coverage"] == pytest.approx(17 / 21, abs=1e-4)
    assert got["A100"]["leave_one_out_coverage"] == 0  # +50% against the pooled -9% to +9%
    assert got["A100"]["from"].startswith("pooled") and ENOUGH > 1
    assert got["Gaudi"]["coverage"] is None


def test_a_row_on_the_default_mfu_is_never_beyond_the_measured_error():
    """SD 1.5 on Gaudi 3 has no published figure (the 0.30 default), Gaudi 2 has MLPerf's."""
    sd = wb.plan("unet-sd15", tokens=1e6, batch_size=8, num_devices=8, runs=NO_RUNS,
                 devices=["Gaudi2", "Gaudi3"])
    assert sd.row("Gaudi3")["mfu_from"] == "default" and sd.row("Gaudi2")["mfu_from"] == "published"
    for answer in (sd.fastest()["answer"], sd.cheapest()["answer"]):
        assert "beyond the measured error" not in answer
        assert "stated default MFU" in answer or "it depends" in answer, answer
    assert "an assumption, which no measured error covers" in sd.row("Gaudi3")["sources"]["range"]


@pytest.mark.slow
def test_plan_accuracy_summarises_each_family_and_stack_with_its_intervals_coverage(accuracy):
    from workbench.planning.accuracy import _summary

    table = _summary(accuracy)
    assert {"check", "family", "stack", "n", "median_abs_error", "worst_abs_error", "low", "high",
            "coverage"} <= set(table.columns)
    held = table[table.check == "held-out"]
    assert {"optimum-habana", "megatron", "fsdp", "ddp"} <= set(table["stack"])
    recorded = refs.references()["accuracy"]["intervals"]
    for family, g in held.groupby("family"):
        inside = (g.coverage * g.n).sum() / g.n.sum()
        assert inside == pytest.approx(recorded[family]["coverage"], abs=1e-4), family
    for family, g in table[table.check == "leave-one-out"].groupby("family"):
        inside = (g.coverage * g.n).sum() / g.n.sum()
        assert inside == pytest.approx(recorded[family]["leave_one_out_coverage"], abs=1e-4), family


def test_a_reference_planned_from_itself_gets_its_own_figure_back():
    """A figure holds its own run's communication and pipeline bubble: the planner divides
    them out (matching.own_overhead) and charges the planned layout's in their place, so NeMo's
    Llama 3 70B on 64 H100s (its figure alone in the references) plans at its own MFU
    (before, its communication and bubble were charged on top of the figure that held them)."""
    data = refs.references()
    e = next(e for e in data["mfu"] if e["model"].startswith("LLAMA3_70B pretraining"))
    how = e["plan"]
    row = wb.plan(spec_of(e), tokens=1e9, batch_size=how["batch_size"], seq_len=how["seq_len"],
                  precision="fp8", devices=["H100"], num_devices=64, strategy=e["stack"],
                  references={**data, "mfu": [e]}, runs=NO_RUNS).row("H100")
    t = row["sources"]["layout"]
    assert "bubble" in t or "context" in t or "tensor" in t, "its layout pays some overhead"
    # to first order: the ratio is taken at the figure's rate, the plan runs at the faster one
    assert row["mfu"] == pytest.approx(e["mfu"], rel=5e-3)


def test_fp8_runs_the_attention_and_the_output_layer_in_bf16():
    """An fp8 run spends only its linear layers' FLOPs at the fp8 rate (matching.fp8_work):
    Llama 3.1 8B at 8,192 tokens (a 128K vocabulary, twice the sequence) plans below the MFU
    of Intel's Llama 2 7B at 4,096 that it takes, the same model at the same length does not
    move, and a bf16 plan is untouched."""
    data = refs.references()
    e = next(e for e in data["mfu"] if e["chip"] == "Gaudi2" and e["model"].startswith("LLaMA V2 7B"))
    only = {**data, "mfu": [e]}

    def mfu(model, seq, precision="fp8"):
        return wb.plan(model, tokens=1e9, batch_size=16, seq_len=seq, precision=precision,
                       devices=["Gaudi2"], num_devices=8, references=only, runs=NO_RUNS,
                       strategy="megatron").row("Gaudi2")

    long = mfu("llama-8b", 8192)
    assert long["mfu"] < 0.97 * e["mfu"] and "in bf16" in long["sources"]["bandwidth"]
    assert "in bf16" not in mfu("llama-8b", 8192, "bf16")["sources"].get("bandwidth", "")
    same = mfu("llama-7b", 4096)["sources"]["bandwidth"]
    assert re.search(r"in fp8, (\S+) FLOPs .* reference's \1 ", same), same
