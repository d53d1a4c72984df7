"""wb.plan: time and cost per device, from runs, references or a default, with sources."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from base64 import b64decode
from pathlib import Path

import pytest

import workbench as wb
from workbench.backends.chips import CHIPS
from workbench.backends.registry import DeviceInfo
from workbench.planning import references as refs
from workbench.planning.flops import flops_per_token

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
                        precision="bf16", devices=["H200"], mfu=r["mfu"], runs="/nonexistent")
            assert p.flops_per_token == result["figures"]["flops_per_token"]
            row = p.row("H200")
            assert row["devices"] == 1 and row["mfu_from"] == "your mfu"
            assert row["tokens_per_s_device"] == pytest.approx(r["tokens_per_s"], rel=1e-9), (key, way)
            assert row["hours"] == pytest.approx(1e9 / r["tokens_per_s"] / 3600, rel=1e-9)
            checked += 1
    assert checked >= 5


def test_the_h200_row_takes_this_projects_own_measurement_and_says_so():
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=32, seq_len=1024, devices=["H200"], runs="/nonexistent")
    row = p.row("H200")
    entry = next(e for e in refs.references()["mfu"] if e["chip"] == "H200")
    assert row["mfu_from"] == "measured by this project" and row["mfu"] == entry["mfu"]
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
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["Gaudi2"], runs="/nonexistent")
    row, default = p.row("Gaudi2"), refs.references()["default"]
    assert row["mfu_from"] == "default" and row["mfu"] == pytest.approx(default["mfu"])
    assert row["sources"]["mfu"].startswith("default")
    peak = CHIPS["Gaudi2"].tflops["bf16"] * 1e12
    assert row["tokens_per_s_device"] == pytest.approx(default["mfu"] * peak / p.flops_per_token)


def test_a_model_too_big_for_one_device_gets_the_fewest_devices_that_hold_it():
    p = wb.plan("llama-70b", tokens=10**9, batch_size=1, seq_len=2048, devices=["H100", "H200"], runs="/nonexistent")
    for name in ("H100 SXM", "H200"):
        row = p.row(name)
        n = row["devices"]
        assert not row["fits_one"] and n > 1 and "ZeRO-3" in row["strategy"]
        ckpt = "checkpointing" in row["strategy"]
        mp = wb.plan_memory("llama-70b", batch_size=1, seq_len=2048, precision="bf16")
        assert mp.replan(zero_stage=3, devices=n, grad_checkpointing=ckpt).fits(name)
        assert not mp.replan(zero_stage=3, devices=n // 2, grad_checkpointing=True).fits(name)
        eff = refs.references()["scaling"]["efficiency"]
        assert row["tokens_per_s"] == pytest.approx(row["tokens_per_s_device"] * n * eff)
        assert "scaling" in row["sources"]
    assert p.row("H200")["devices"] <= p.row("H100 SXM")["devices"]  # 141 GB against 80 GB


def test_costs_follow_the_prices_and_yours_override_them(tmp_path):
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100", "Gaudi3"], runs="/nonexistent")
    shipped = refs.prices()["H100 SXM"]
    h100 = p.row("H100 SXM")
    assert h100["cost_usd"] == pytest.approx(h100["hours"] * shipped["usd_per_device_hour"])
    assert h100["usd_per_million_tokens"] == pytest.approx(h100["cost_usd"] / 1000)
    assert p.row("Gaudi3").get("cost_usd") is None and "prices=" in p.row("Gaudi3")["note"]
    assert p.cheapest()["device"] == "H100 SXM"  # the only priced row
    assert wb.plan("gpt2-small", tokens=1e9, batch_size=8, seq_len=512, devices=["H100"],
                   runs="/nonexistent").row("H100 SXM")["cost_usd"] == pytest.approx(h100["cost_usd"])
    mine = tmp_path / "prices.json"
    mine.write_text(json.dumps({"Gaudi3": 1.0, "H100": 50}))
    for prices in ({"Gaudi3": 1.0, "H100": 50}, mine):
        p2 = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, devices=["H100", "Gaudi3"],
                     prices=prices, runs="/nonexistent")
        assert p2.row("H100 SXM")["cost_usd"] == pytest.approx(h100["hours"] * 50)
        assert p2.cheapest()["device"] == "Gaudi3"
        assert "your prices" in p2.row("Gaudi3")["sources"]["price"]


def test_cheapest_and_fastest_are_the_table_minima():
    p = wb.plan("gpt2-medium", tokens=10**9, batch_size=8, seq_len=1024, runs="/nonexistent",
                prices={"Gaudi2": 1.0, "Gaudi3": 2.0})
    df = p.table()
    assert p.fastest()["device"] == df.loc[df["hours"].idxmin(), "device"]
    assert p.cheapest()["device"] == df.loc[df["cost_usd"].idxmin(), "device"]
    assert list(df["device"]) == ["Gaudi2", "Gaudi3", "A100 80GB", "H100 SXM", "H200", "detected"]


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


def test_a_unet_is_sized_but_gets_no_made_up_throughput():
    p = wb.plan("unet-sd15", tokens=10**6, batch_size=8, devices=["H100"], runs="/nonexistent")
    row = p.row("H100 SXM")
    assert row["devices"] >= 1 and row["memory_gib"] > 0
    assert row.get("hours") is None and "UNet" in row["note"]


def test_the_notebook_view_draws_time_and_cost_without_scripts():
    p = wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, runs="/nonexistent")
    page = p._repr_html_()
    assert "<script" not in page and "sources" in page
    svg = b64decode(page.split("data:image/svg+xml;base64,")[1].split("'")[0]).decode()
    root = ET.fromstring(svg)  # well-formed
    bars = [e for e in root.iter() if e.tag.endswith("rect")]
    priced = [r for r in p.rows if r.get("cost_usd") is not None]
    timed = [r for r in p.rows if r.get("hours") is not None]
    assert len(bars) == len(timed) + len(priced)
    assert "TrainingPlan" in repr(p) and "H200" in repr(p)


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

    assert importlib.import_module("workbench.bench.mfu").flops_per_token is flops_per_token


def test_the_plan_benchmark_estimates_this_projects_runs_from_published_figures_only():
    import importlib

    bench_plan = importlib.import_module("workbench.bench.plan")
    out = bench_plan._references_only()
    measured = [e for e in refs.references()["mfu"] if e["kind"] == "measured"]
    assert len(out) == len(measured)
    for e in measured:
        got = out[f"{e['chip']} {e['model']}"]
        assert got["estimate_from"].startswith("published") and "BENCHMARKS.md" not in got["estimate_from"]
        spec = wb.model(e["catalog"])
        published = {r["mfu"] for r in refs.references()["mfu"] if r["kind"] == "published"}
        mfu = got["estimate_mfu"]
        assert mfu in published
        peak = CHIPS[e["chip"]].tflops[e["precision"]] * 1e12
        assert got["estimate_tokens_per_s"] == pytest.approx(mfu * peak / flops_per_token(spec, e["seq_len"]))
        assert got["error_pct"] == pytest.approx(100 * (got["estimate_tokens_per_s"] / e["tokens_per_s"] - 1))
    settings = bench_plan._settings(8, 128)
    assert settings["fit"] == (8, 128) and {v for k, v in settings.items() if k != "fit"} == {
        (4, 128), (16, 128), (8, 64), (8, 256)}


def test_the_model_picker_shows_time_and_cost_for_a_token_budget():
    from workbench.views.pickers import pick_model

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
                runs="/nonexistent", references=mine)
    assert p.row("H100 SXM")["mfu"] == pytest.approx(0.5)
    assert p.row("A100 80GB")["mfu_from"] == "default"  # 312 TFLOP/s: no entry with its peak is left
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"mfu": []}))
    with pytest.raises(ValueError, match="references: .* has no 'scaling' entry"):
        wb.plan("gpt2-small", tokens=10**9, batch_size=8, seq_len=512, references=broken)
