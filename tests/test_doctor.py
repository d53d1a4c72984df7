"""``wb.doctor`` / ``workbench doctor``: for real on the CPU (in-process and through the CLI),
failing on purpose, and against the Habana bridge TEST DOUBLE (tests/fakes).

On the double only the checks that need no HPU tensor run: versions, device, memory and
compile-counter. The others cannot: the double provides ``torch.hpu``'s API backed by the
CPU but registers no ``hpu`` device type in torch, so no model or tensor can move to
``"hpu"`` (the gpt2.* and bert.* runs, bf16, profile), and it has no HCCL process-group
backend (all-reduce, launch).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import workbench as wb
from workbench.backends.registry import BACKENDS
from workbench.checks import checkup, diagnosis
from workbench.commands import cli

ON_CPU_SKIPPED = {  # check -> words its reason must contain
    "gpt2.memory": "process RSS", "bert.memory": "process RSS", "all-reduce": "--multi", "launch": "--multi",
}
if BACKENDS["cpu"].calls.compiles() is None:  # the CPU record counts no compiles (today: only Gaudi's does)
    ON_CPU_SKIPPED.update({n: "no compile counter" for n in ("compile-counter", "gpt2.recompiles", "bert.recompiles")})
ON_CPU_SKIPPED.update({n: "counts nothing" for n in ("gpt2.counts", "bert.counts")})  # no compile on CPU


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread: fast and steady on a busy 2-core machine (results do not change)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("doctor") / "doctor"
    return wb.doctor(out, device="cpu")


def test_wb_doctor_is_the_function_even_after_its_module_is_imported():
    assert wb.doctor is checkup.doctor and callable(wb.doctor)


@pytest.mark.slow
def test_the_cpu_doctor_names_every_check_and_none_fails(cpu_report):
    r = cpu_report
    assert [c.name for c in r.checks] == list(checkup.CHECKS)
    assert r.counts["fail"] == 0 and r.ok and r.exit_code == 0, r.table()
    assert {c.name for c in r.checks if c.status == "skip"} == set(ON_CPU_SKIPPED)
    for name, words in ON_CPU_SKIPPED.items():
        assert words in r.check(name).detail, f"{name} says why it was skipped"
    for key in checkup.RUNS:
        train = r.check(f"{key}.train").data
        assert train["last"] < train["first"], f"the {key} loss fell"
        assert "adamw_torch_fused" == r.check(f"{key}.optimizer").data["optim"]
        assert r.check(f"{key}.clip").data["last"] > 0
    bf16 = r.check("bf16").data
    assert bf16["loss_rel"] <= checkup.BF16_TOL["loss"] and 0 < bf16["grads_rel"] <= checkup.BF16_TOL["grads"]
    assert json.loads(open(r.check("profile").data["trace"]).read())["traceEvents"]
    assert r.versions["torch"] == torch.__version__ and r.device["kind"] == "cpu"


@pytest.mark.slow
def test_the_reports_are_written_and_rendered(cpu_report):
    r = cpu_report
    saved = json.loads((r.out / "report.json").read_text())
    assert [(c["name"], c["status"]) for c in saved["checks"]] == [(c.name, c.status) for c in r.checks]
    assert saved["exit_code"] == 0 and saved["counts"] == r.counts
    md = (r.out / "report.md").read_text()
    text, page = r.table(), r._repr_html_()
    for c in r.checks:
        assert f"| {c.name} | {c.status} |" in md
        assert f"{c.name} " in text and f"<code>{c.name}</code>" in page
    assert "What to do" not in md, "no failure, nothing to do"
    assert text.splitlines()[-1].startswith(f"{len(r.checks)} checks: ")


@pytest.mark.slow
def test_multi_runs_the_all_reduce_and_the_launch_on_cpu(tmp_path, one_thread):
    r = wb.doctor(tmp_path, device="cpu", multi=True, only=["all-reduce", "launch"])
    assert [(c.name, c.status) for c in r.checks] == [("all-reduce", "pass"), ("launch", "pass")], r.table()
    ranks = r.check("all-reduce").data["ranks"]
    assert [x["rank"] for x in ranks] == [0, 1] and all(x["backend"] == "gloo" and x["value"] == 3 for x in ranks)


@pytest.mark.slow
def test_the_cli_prints_the_json_report_alone_on_stdout_and_writes_both_reports(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "d"
    proc = subprocess.run([sys.executable, "-m", "workbench.commands.cli", "doctor", "--only", "versions,bert", "--json",
                           "--out", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)  # libraries' messages went to stderr
    assert [c["name"] for c in printed["checks"]] == ["versions", *(f"bert.{c}" for c in checkup.RUN_CHECKS)]
    assert printed["ok"] is True and "doctor: PASS bert.train" in proc.stderr
    assert json.loads((out / "report.json").read_text())["checks"] == printed["checks"]
    assert "| bert.train | pass |" in (out / "report.md").read_text()


def test_the_cli_prints_the_table(tmp_path, capsys):
    assert cli.main(["doctor", "--only", "versions,device,memory", "--out", str(tmp_path)]) == 0
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines()]
    assert [["versions", "PASS"], ["device", "PASS"], ["memory", "PASS"]] == [
        x for x in rows if x[:1] in (["versions"], ["device"], ["memory"])]


def test_the_cli_refuses_unknown_checks(capsys):
    assert cli.main(["doctor", "--only", "gtp2"]) == 2
    assert "unknown check 'gtp2'; known: versions, device" in capsys.readouterr().err


def test_the_cli_checks_the_device_it_is_given(tmp_path, capsys):
    """``--device`` is ``wb.doctor``'s ``device=``: a device this machine lacks is a failed
    check (exit 1), a misspelt one refused (exit 2)."""
    assert cli.main(["doctor", "--device", "cpu", "--only", "device", "--out", str(tmp_path)]) == 0
    assert cli.main(["doctor", "--device", "cuda", "--only", "device", "--out", str(tmp_path)]) == 1
    assert cli.main(["doctor", "--device", "hpuu", "--out", str(tmp_path / "no")]) == 2
    assert "unknown device 'hpuu'; known: hpu, cuda, cpu" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_a_misspelt_device_is_refused_before_anything_is_written(tmp_path):
    """``device="hpuu"`` is bad input, not a finding: it was diagnosed ("FAIL device", every
    other check skipped) and the reports written; a device this machine lacks stays a finding."""
    with pytest.raises(ValueError, match="^unknown device 'hpuu'; known: hpu, cuda, cpu"):
        wb.doctor(tmp_path / "out", device="hpuu", echo=False)
    assert not (tmp_path / "out").exists()
    lacking = wb.doctor(tmp_path / "out", device="cuda", only="device", echo=False)
    assert lacking.exit_code == 1 and (tmp_path / "out" / "report.json").exists()


def test_a_failing_check_names_the_fix_and_the_exit_code_is_1(tmp_path, monkeypatch, capsys):
    cpu = BACKENDS["cpu"]
    broken = dataclasses.replace(
        cpu, calls=dataclasses.replace(cpu.calls, memory=lambda i: {"allocated": 5, "peak": 1, "total": 0})
    )
    monkeypatch.setitem(BACKENDS, "cpu", broken)  # the memory reader's output is the check's input
    assert cli.main(["doctor", "--only", "memory", "--out", str(tmp_path)]) == 1
    printed = capsys.readouterr().out
    assert "FAIL" in printed and "fix: expected bytes" in printed
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["exit_code"] == 1 and saved["checks"][0]["status"] == "fail" and saved["checks"][0]["fix"]
    assert "### What to do" in (tmp_path / "report.md").read_text()


def _steps(losses, compiles=None, shapes=None, norms=None, peaks=None):
    n = len(losses)
    return [{"step": i + 1, "phase": "warmup" if i < 3 else "train", "loss": losses[i],
             "compiles": compiles[i] if compiles else None, "shapes_seen": shapes[i] if shapes else 1,
             "grad_norm": norms[i] if norms else 1.0, "mem_peak": peaks[i] if peaks else 0,
             "mem_alloc": peaks[i] if peaks else 0} for i in range(n)]


def test_the_verdicts_fail_on_runs_that_are_broken(tmp_path):
    run = SimpleNamespace(status="completed", summary={"step": 8}, path=tmp_path)
    assert diagnosis.loss_falls("t", run, _steps([2.0] * 8)).status == "fail"
    assert diagnosis.loss_falls("t", run, _steps([2, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3])).status == "pass"
    assert diagnosis.loss_falls("t", run, _steps([2, 1.9, float("nan"), 1.7])).status == "fail"
    hpu = SimpleNamespace(kind="hpu")
    late = _steps([1] * 6, compiles=[4, 6, 6, 6, 7, 7])
    assert diagnosis.no_recompiles("r", late, hpu, "bucketed").status == "fail"
    new_shape = _steps([1] * 6, compiles=[4, 6, 6, 6, 7, 7], shapes=[1, 1, 1, 1, 2, 2])
    fine = diagnosis.no_recompiles("r", new_shape, hpu, "bucketed", start=1)
    assert fine.status == "pass" and fine.detail.startswith("6 graph compiles over 6 steps, 2 input shape(s)")
    assert diagnosis.clip_ran("c", _steps([1] * 4, norms=[None] * 4)).status == "fail"
    flat = _steps([1] * 4, peaks=[100] * 4)
    assert diagnosis.memory_moved("m", flat, {"allocated": 100}, hpu).status == "fail"
    assert diagnosis.memory_moved("m", flat, {"allocated": 10}, hpu).status == "pass"
    # any op on the CPU fails, SDPA's kernel choice too: the HPU answers it (docs/gaudi.md)
    sdp = {"steps": 4, "cpu_fallbacks": 8, "fallback_ops": {"aten::_fused_sdp_choice": 8},
           "recompiles": 0, "graph_breaks_total": 0}
    failing = diagnosis.step_counts("s", sdp, hpu)
    assert failing.status == "fail" and "aten::_fused_sdp_choice" in failing.fix, failing


def test_on_the_hpu_double_the_checks_without_tensors_pass(fake_hpu, tmp_path):
    from habana_frameworks.torch.hpu.metrics import fake_compile

    fake_compile(2)
    only = ["versions", "device", "memory", "compile-counter"]
    r = wb.doctor(tmp_path, device="hpu", only=only)
    assert [(c.name, c.status) for c in r.checks] == [(n, "pass") for n in only], r.table()
    assert r.versions["habana_frameworks"] == "0.0.0-fake"
    assert r.versions["driver"] is None and "no hl-smi" in r.versions["driver_source"]
    dev = r.check("device").data
    assert dev["device"]["count"] == 8 and dev["device"]["generation"] == "Gaudi2" and dev["chip"] == "Gaudi2"
    assert r.check("memory").data["total"] == wb.device("hpu").memory()["total"] > 0
    assert "of 96.0 GiB HBM" in r.check("memory").detail, "the usable limit beside the chip's HBM"
    assert r.check("compile-counter").data["compiles"] == wb.device("hpu").compiles() >= 2


def test_an_unreadable_compile_counter_fails_on_hpu(fake_hpu, tmp_path, monkeypatch):
    from habana_frameworks.torch.hpu import metrics

    def gone(name):
        raise AttributeError("metric_global")

    monkeypatch.setattr(metrics, "metric_global", gone)  # a bridge without the metrics API
    r = wb.doctor(tmp_path, device="hpu", only="compile-counter")
    c = r.check("compile-counter")
    assert c.status == "fail" and "metric_global" in c.fix and r.exit_code == 1
