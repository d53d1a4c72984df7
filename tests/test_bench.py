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
