"""The benchmarks run end to end (tiny settings: this checks the harness, not speed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_engine_bench_measures_three_ways_side_by_side(tmp_path):
    out = tmp_path / "engine.json"
    proc = subprocess.run([sys.executable, "-m", "workbench.bench", "engine", "--json", str(out),
                           "--steps", "2", "--repeats", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert set(result["results"]) == {"raw", "trainer", "workbench"}
    assert all(r["steps_per_s"] > 0 for r in result["results"].values())
    assert set(result["ratios"]) == {"wb_vs_raw", "wb_vs_trainer"}
    assert result["ratios"]["wb_vs_raw"] == pytest.approx(
        result["results"]["workbench"]["steps_per_s"] / result["results"]["raw"]["steps_per_s"])
    assert "wb_vs_raw" in proc.stdout


@pytest.mark.parametrize("bench,args,ratio", [
    ("dashboard", ["--steps", "40", "--repeats", "1"], "overhead_pct"),
    ("scaling", ["--steps", "10", "--repeats", "1"], "2_vs_1"),
])
def test_dashboard_and_scaling_benches_run(tmp_path, bench, args, ratio):
    out = tmp_path / f"{bench}.json"
    proc = subprocess.run([sys.executable, "-m", "workbench.bench", bench, "--json", str(out), *args],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert ratio in result["ratios"] and all(
        v.get("steps_per_s", v.get("tokens_per_s", 0)) > 0 for v in result["results"].values())
    if bench == "dashboard":
        assert result["messages"]["per_run"] >= 1 and result["messages"]["max_bytes"] < 2048
