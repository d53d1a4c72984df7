"""States that were true but misleading: what a run directory says after a rank dies, a kill
inside a resume, two Ctrl-Cs (or Ctrl-C and SIGTERM or SIGKILL) during the last save, and a
kernel restart (docs/runs.md)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

import workbench as wb
from workbench.training.engine import Run

from conftest import wait_for

SMALL = dict(batch_size=4, max_length=32, live=False)


def _script(tmp_path, body: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_launched_run_killed_through_its_rank_0_shows_the_step_it_reached(tmp_path):
    run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=2, max_steps=100000,
                    log_every=1, save_every=10, run_dir=tmp_path, background=True, **SMALL)

    def reached():
        assert run.process.poll() is None, "torchrun exited before step 15"
        return any(e.get("step", 0) >= 15 for e in run.events)

    wait_for(reached, 300, "rank 0 to log step 15")
    workers = [p for p in psutil.Process(run.process.pid).children(recursive=True)
               if "workbench.scaleout.worker" in " ".join(p.cmdline())]
    # rank 0, the run's writer: it leaves no summary (a killed rank 1 makes rank 0's gloo
    # calls fail, and rank 0 then writes its own end)
    next(p for p in workers if p.environ().get("RANK") == "0").send_signal(signal.SIGKILL)
    with pytest.raises(RuntimeError, match="rank 0 failed"):
        run.wait(180)
    logged = max(e["step"] for e in run.events if isinstance(e.get("step"), int))
    assert logged >= 15
    assert wb.runs(tmp_path)["step"].tolist() == [logged], "not step 0"
    reopened = Run.open(run.path)
    assert reopened.status == "failed" and reopened.summary["step"] == logged == reopened.step
    assert reopened.summary["checkpoint"] == str(reopened.last_checkpoint)
    assert reopened.last_checkpoint.name == f"checkpoint-{logged // 10 * 10}"


@pytest.mark.slow
def test_a_kill_inside_a_resume_after_its_spec_was_rewritten_reads_failed_not_completed(tmp_path):
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=6, save_every=3,
                   run_dir=tmp_path / "runs", **SMALL)
    assert run.status == "completed"
    proc = _script(tmp_path, """
        import os, signal, sys
        from workbench.rundir import writer
        import workbench as wb

        real = writer.write_json
        def write_json(path, data):
            real(path, data)
            if path.name == "spec.json":
                os.kill(os.getpid(), signal.SIGKILL)  # the new spec written, nothing trained
        writer.write_json = write_json
        wb.Run.open(sys.argv[1]).resume(max_steps=10, live=False)
    """, str(run.path))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    killed = Run.open(run.path)
    assert killed.spec.args.max_steps == 10
    assert killed.status == "failed", "the resume to 10 died: not 'completed' at step 6"
    assert killed.step == 6 and wb.runs(tmp_path / "runs")["status"].tolist() == ["failed"]
    killed.resume(live=False)  # the spec's 10, from checkpoint-6
    assert killed.status == "completed" and killed.step == 10


VICTIM = """
    import os, signal, sys
    import transformers
    import workbench as wb

    stopping = []

    class StopAt3(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 3:
                stopping.append(3)
                os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C: stop with a checkpoint

    real = transformers.modeling_utils.safe_save_file
    def save_file(tensors, filename, metadata=None):
        if stopping:
            os.kill(os.getpid(), signal.SIGINT)  # the second, while the stop's checkpoint saves
        real(tensors, filename, metadata=metadata)
    transformers.modeling_utils.safe_save_file = save_file

    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=100, save_every=2,
                   batch_size=4, max_length=32, live=False, run_dir="runs", callbacks=[StopAt3()])
    print("RETURNED", run.status)
"""


@pytest.mark.slow
def test_two_ctrl_cs_during_the_last_save_leave_no_checkpoint_that_cannot_resume(tmp_path):
    proc = _script(tmp_path, VICTIM)
    assert "Stopping" in proc.stdout, (proc.stdout[-1000:], proc.stderr[-2000:])
    (path,) = (tmp_path / "runs").iterdir()
    run = Run.open(path)
    assert run.status == "stopped" and "interrupted twice" in run.summary["error"]
    assert run.broken_checkpoints == {}, "the cut-short save would take a rotation slot"
    assert sorted(p.name for p in (path / "checkpoints").iterdir()) == ["checkpoint-2"]
    run.resume(max_steps=4, live=False)
    assert run.status == "completed" and run.step == 4


# A stop's checkpoint cut short by a second signal (the test sends it): Ctrl-C at step 23,
# the stop saves checkpoint-24, and half its weights are on disk when SIGTERM (a kernel
# restart's second signal) or SIGKILL (its third) lands
CUT_BY_A_SIGNAL = """
    import os, sys, time
    import transformers
    import workbench as wb
    from workbench.training.engine import active

    def until(ready, marker):
        open(marker, "w").close()  # the test sends its signal once it sees this file
        deadline = time.monotonic() + 120
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.01)  # a signal's Python handler runs here
        if not ready():
            sys.exit(f"no signal came after {marker}")

    class CtrlCAt23(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 23:
                until(lambda: active().stop_flag.is_set(), "at-23")

    real = transformers.modeling_utils.safe_save_file
    def save_file(tensors, filename, metadata=None):
        real(tensors, filename, metadata=metadata)
        if active().stop_flag.is_set():  # the stop's checkpoint: half of its weights written
            with open(filename, "r+b") as f:
                f.truncate(os.path.getsize(filename) // 2)
            until(lambda: False, "saving")
    transformers.modeling_utils.safe_save_file = save_file

    wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=100, save_every=10,
             batch_size=4, max_length=32, live=False, run_dir="runs", callbacks=[CtrlCAt23()])
"""


@pytest.mark.slow
@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_during_the_stop_checkpoint_leaves_both_good_checkpoints(tmp_path, second):
    """Ctrl-C, then SIGTERM or SIGKILL while the stop's checkpoint saves (a kernel restart's
    SIGINT, SIGTERM, SIGKILL): the cut-short checkpoint-24 must not count among the two that
    Trainer keeps, or resume(max_steps=22) rotates the good checkpoint-20 away and keeps it."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CUT_BY_A_SIGNAL)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for marker, signum in (("at-23", signal.SIGINT), ("saving", second)):
            wait_for(lambda m=marker: (tmp_path / m).exists() or proc.poll() is not None, 300,
                     f"the run to write {marker}")
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and "Stopping" in out, (out[-1000:], err[-2000:])
    (path,) = (tmp_path / "runs").iterdir()
    run = Run.open(path)
    assert run.status == "failed" and [c.name for c in run.checkpoints] == [
        "checkpoint-10", "checkpoint-20"]
    if second == signal.SIGTERM:  # the run's end removes the checkpoint its signal cut short
        assert run.summary["error"].startswith("Terminated: SIGTERM"), run.summary["error"]
        assert "continues from checkpoint-20" in run.summary["error"]
        assert run.broken_checkpoints == {}
    else:  # SIGKILL: nothing ran to remove it; the resume does, before Trainer's rotation
        assert list(run.broken_checkpoints) == ["checkpoint-24"]
    run.resume(max_steps=22, live=False)
    assert run.status == "completed" and run.step == 22
    assert sorted(p.name for p in (path / "checkpoints").iterdir()) == [
        "checkpoint-20", "checkpoint-22"], "both good checkpoints kept, the broken one gone"
    assert [c.name for c in run.checkpoints] == ["checkpoint-20", "checkpoint-22"]


KERNEL_CELL = """
import time, transformers
import workbench as wb

class SlowEval(transformers.TrainerCallback):
    # evaluation outlasts the restart's SIGINT-to-SIGTERM wait: the SIGTERM lands after the
    # stop checkpoint, while the run evaluates
    def on_prediction_step(self, args, state, control, **kw):
        time.sleep(1.0)

run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=100000, save_every=1000,
               batch_size=4, max_length=32, live=False, run_dir={runs!r}, callbacks=[SlowEval()])
"""


@pytest.mark.slow
def test_a_graceful_kernel_restart_leaves_a_stopped_run_with_its_checkpoint(tmp_path):
    """jupyter_client's restart: SIGINT (our stop: a checkpoint), a shutdown request, SIGTERM
    half the wait later, SIGKILL at its end. The run read failed with no error text though its
    stop checkpoint was written: its summary must say what happened."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    km.shutdown_wait_time = 4.0
    km.start_kernel(cwd=str(tmp_path))
    try:
        client = km.client()
        client.start_channels()
        client.wait_for_ready(timeout=120)
        client.execute(KERNEL_CELL.format(runs=str(tmp_path / "runs")))
        wait_for(lambda: any(json.loads(line).get("step", 0) >= 4
                             for p in (tmp_path / "runs").glob("*/events.jsonl")
                             for line in p.read_text().splitlines() if line.strip()),
                 180, "the kernel's run to reach step 4")
        client.stop_channels()
        km.restart_kernel(now=False)
    finally:
        km.shutdown_kernel(now=True)
    (path,) = (tmp_path / "runs").iterdir()
    run = Run.open(path)
    ckpt = run.last_checkpoint
    assert ckpt is not None, "the restart's SIGINT stopped the run with a checkpoint"
    assert run.status == "stopped", (run.status, run.summary.get("error"))
    assert run.summary["checkpoint"] == str(ckpt) and run.step == int(ckpt.name.split("-")[1])


@pytest.mark.slow
def test_sigterm_while_training_ends_the_run_failed_with_its_reason(tmp_path):
    proc = _script(tmp_path, """
        import os, signal
        import transformers
        import workbench as wb

        class TermAt3(transformers.TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == 3:
                    os.kill(os.getpid(), signal.SIGTERM)

        wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=100, save_every=2,
                 batch_size=4, max_length=32, live=False, run_dir="runs", callbacks=[TermAt3()])
    """)
    assert proc.returncode != 0
    (path,) = (tmp_path / "runs").iterdir()
    run = Run.open(path)
    assert run.status == "failed" and run.step == 3
    assert run.summary["error"].startswith("Terminated: SIGTERM: this process was told to end")
    assert "continues from checkpoint-2" in run.summary["error"]
