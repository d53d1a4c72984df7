"""Scale-out with real torch.distributed processes: torchrun, gloo, two CPU workers."""

from __future__ import annotations

import json
import os
import shlex
import signal
from pathlib import Path

import psutil
import pytest

import workbench as wb
from workbench.scaleout.launcher import deepspeed_config

from conftest import wait_for

DATA = dict(max_length=32, batch_size=4)


pytestmark = pytest.mark.usefixtures("runs_in_tmp")


def _ranks(run):
    return [json.loads(p.read_text()) for p in sorted(run.path.glob("ranks/rank-*.json"))]


def _wait_for_step(run, step: int) -> None:
    """Wait until rank 0 has logged ``step``; fail at once if the launcher exits first."""
    def reached():
        assert run.process.poll() is None, f"torchrun exited with {run.process.returncode} before step {step}"
        return any(e.get("step", 0) >= step for e in run.events)

    wait_for(reached, 180, f"rank 0 to log step {step}")


def _finish(run, timeout: float = 600):
    """Wait for a launched run; if it is still going after ``timeout``, stop its workers and
    fail with the tail of every rank's log, so a hang names itself."""
    try:
        return run.wait(timeout)
    except TimeoutError:
        run.process.terminate()
        logs = [f"--- {p.relative_to(run.path)}\n{p.read_text(errors='replace')[-2000:]}"
                for p in sorted(run.path.glob("logs/**/*.log")) + [run.path / "launcher.log"] if p.exists()]
        raise AssertionError(f"{run.name} did not finish in {timeout:g} s\n" + "\n".join(logs)) from None


@pytest.mark.slow
def test_two_gloo_workers_train_identically_and_the_notebook_sees_rank_0(tmp_path):
    seen = []
    run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=2, max_steps=30,
                    log_every=2, live=lambda r: r.subscribe(seen.append), **DATA)
    assert run.status == "completed" and run.summary["world_size"] == 2
    ranks = _ranks(run)
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"], "both ranks end with identical parameters"
    train = [e for e in seen if e.get("phase") in ("warmup", "train")]
    assert [e["step"] for e in train] == list(range(2, 31, 2)), "the display got rank 0's events live"
    assert sum(e["loss"] for e in train[-3:]) < 0.95 * sum(e["loss"] for e in train[:3])
    assert seen[0]["phase"] == "start" and seen[0]["world_size"] == 2 and seen[-1]["phase"] == "end"
    for rank in (0, 1):
        assert list(run.path.glob(f"logs/**/attempt_0/{rank}/stderr.log")), f"rank {rank}'s stderr is kept"


@pytest.mark.slow
def test_stop_stops_both_ranks_at_the_same_step_with_a_checkpoint():
    run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=2, max_steps=100000,
                    log_every=2, save_every=1000, live=False, background=True, **DATA)
    _wait_for_step(run, 6)
    run.stop()
    _finish(run, 180)
    assert run.status == "stopped"
    steps = {r["step"] for r in _ranks(run)}
    assert len(steps) == 1, "both ranks stopped at the same step"
    assert (run.path / "checkpoints" / f"checkpoint-{steps.pop()}").exists()


@pytest.mark.slow
def test_a_crashed_rank_fails_the_run_and_is_named():
    run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=2, max_steps=100000,
                    log_every=2, live=False, background=True, **DATA)
    _wait_for_step(run, 4)
    workers = [p for p in psutil.Process(run.process.pid).children(recursive=True)
               if "workbench.scaleout.worker" in " ".join(p.cmdline())]
    victim = next(p for p in workers if p.environ().get("RANK") == "1")
    victim.send_signal(signal.SIGKILL)
    with pytest.raises(RuntimeError, match="rank 1 failed"):
        _finish(run, 180)
    assert run.status == "failed" and run.summary["failed_rank"] == 1
    assert "rank 1 failed" in run.summary["error"] and "SIGKILL" in run.summary["error"]
    assert run.process.poll() is not None and all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in workers)


def test_launch_command_for_two_nodes_of_eight_hpus():
    cmd = wb.launch_command("llama-tiny", "docstrings-lm", nodes=2, devices_per_node=8,
                            hosts=["gaudi-a", "gaudi-b"], max_steps=100)
    args = shlex.split(cmd.torchrun)
    assert args[:6] == ["torchrun", "--nnodes=2", "--nproc_per_node=8", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=gaudi-a:29500", f"--rdzv_id={cmd.run_dir.split('/')[-1]}"]
    assert args[-3:] == ["-m", "workbench.scaleout.worker", cmd.run_dir]
    spec = json.loads(open(f"{cmd.run_dir}/spec.json").read())
    assert spec["launch"] == {"devices": 16, "strategy": "ddp", "zero_stage": None, "env": {}}
    ds = wb.launch_command("llama-tiny", "docstrings-lm", nodes=2, devices_per_node=8,
                           hosts=["gaudi-a", "gaudi-b"], strategy="deepspeed", zero_stage=3)
    assert ds.hostfile == "gaudi-a slots=8\ngaudi-b slots=8\n"
    assert "--num_nodes=2" in ds.deepspeed and "--master_addr=gaudi-a" in ds.deepspeed
    with pytest.raises(ValueError, match="nodes=2 but 1 hosts"):
        wb.launch_command("llama-tiny", "docstrings-lm", nodes=2, devices_per_node=8, hosts=["a"])


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_zero_configs(stage):
    cfg = deepspeed_config(stage)
    assert cfg["zero_optimization"]["stage"] == stage
    assert cfg["train_micro_batch_size_per_gpu"] == "auto" and cfg["bf16"] == {"enabled": "auto"}
    assert ("stage3_gather_16bit_weights_on_model_save" in cfg["zero_optimization"]) == (stage == 3)
    cmd = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=1, devices_per_node=2, hosts=["h"],
                            strategy="deepspeed", zero_stage=stage)
    spec = json.loads(open(cmd.run_dir + "/spec.json").read())
    assert spec["args"]["trainer_overrides"]["deepspeed"]["zero_optimization"]["stage"] == stage
    with pytest.raises(ValueError, match="ZeRO stages come with DeepSpeed"):
        wb.launch("gpt2-tiny", "docstrings-lm", devices=2, zero_stage=2)


@pytest.mark.slow
def test_deepspeed_zero2_on_two_cpu_processes():
    """DeepSpeed does run here: CPU accelerator, gloo. `make test` builds it from source
    against the installed torch (it ships only as an sdist)."""
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra 'deepspeed'; see the Makefile)")
    run = _finish(wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), devices=2, strategy="deepspeed",
                            zero_stage=2, max_steps=8, log_every=2, live=False, background=True, **DATA))
    assert run.status == "completed"
    ranks = _ranks(run)
    assert len(ranks) == 2 and ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    states = sorted(p.name for p in run.last_checkpoint.glob("global_step*/zero_pp_rank_*_optim_states.pt"))
    assert states == ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"], \
        "ZeRO partitioned the optimizer state across the two ranks"


PARENT = """
import sys, time
import workbench as wb
run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=2, max_steps=100000, log_every=2,
                max_length=32, batch_size=4, live=False, background=True)
print(run.path, flush=True)
while True:
    time.sleep(60)
"""


def _workers(path) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if "workbench.scaleout.worker" in " ".join(p.info["cmdline"] or []) and str(path) in " ".join(p.info["cmdline"])]


@pytest.mark.slow
def test_killing_the_launching_process_ends_its_workers_and_stop_works_from_anywhere(tmp_path):
    import subprocess
    import sys

    from workbench.training.engine import Run

    parents = []

    def parent():
        proc = subprocess.Popen([sys.executable, "-c", PARENT], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        parents.append(proc)
        run = Run.open(proc.stdout.readline().strip())
        wait_for(lambda: run.step >= 4, 180, "rank 0's events")
        return proc, run

    try:
        # 1. the notebook that launched is killed: torchrun and its workers end with it
        proc, run = parent()
        assert len(_workers(run.path)) >= 2  # the two ranks (and torchrun itself, titled pt_elastic)
        proc.kill()
        wait_for(lambda: not _workers(run.path), 120, "the orphaned workers to end")
        assert run.status == "failed", "nobody trains it any more"
        # 2. stop() from a process that did not launch it: every rank stops at one step, with a checkpoint
        proc, run = parent()
        Run.open(run.path).stop()
        wait_for(lambda: run.summary.get("status") == "stopped", 180, "the launched run to stop")
        assert run.last_checkpoint is not None
    finally:
        for proc in parents:
            proc.kill()
        for p in _workers(""):  # this test's leftovers only (they run in tmp_path): other sessions' workers live on
            try:
                if Path(p.cwd()).is_relative_to(tmp_path):
                    p.kill()
            except psutil.Error:
                pass


@pytest.mark.slow
def test_a_rank_that_raises_is_named_with_its_exception(tmp_path, monkeypatch):
    """rank 1 raises mid-run (a sitecustomize on its path makes it): the run's error is that
    exception, read from torchrun's per-worker error file, not a warning from its log."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1':\n"
        "    import transformers\n"
        "    step = transformers.Trainer.training_step\n"
        "    def boom(self, *a, **k):\n"
        "        if self.state.global_step >= 3:\n"
        "            raise RuntimeError('boom on rank 1')\n"
        "        return step(self, *a, **k)\n"
        "    transformers.Trainer.training_step = boom\n")
    monkeypatch.setenv("PYTHONPATH", f"{hook}{':' + os.environ['PYTHONPATH'] if os.environ.get('PYTHONPATH') else ''}")
    run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=2, max_steps=100000,
                    log_every=2, live=False, background=True, **DATA)
    with pytest.raises(RuntimeError, match="rank 1 failed"):
        _finish(run, 300)
    assert run.summary["failed_rank"] == 1
    assert "RuntimeError: boom on rank 1" in run.summary["error"], run.summary["error"]
