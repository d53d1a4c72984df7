"""Runs never lie about their state and lose nothing: one writer, kills at every moment,
bad overrides, broken checkpoints, a full disk, untrusted run directories."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

import workbench as wb
from workbench.rundir.lock import RunBusy
from workbench.training.engine import Run

from conftest import wait_for

LM = dict(max_steps=12, batch_size=4, max_length=32, save_every=4, log_every=2, live=False)

# A training subprocess that SIGKILLs itself at one moment (argv[1]); the moments are hooks
# on the libraries it calls, so the workbench runs unchanged.
VICTIM = textwrap.dedent("""
    import os, signal, sys
    import transformers
    import workbench as wb
    from workbench.rundir import writer

    point = sys.argv[1]
    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    real_write = writer.write_json
    def write_json(path, data):
        if point == "summary" and path.name == "summary.json" and "ended" in data:
            path.with_name(".summary.json.tmp").write_text("{")  # half written, then killed
            die()
        real_write(path, data)
        if point == "spec" and path.name == "spec.json":
            die()
        if point == "created" and path.name == "summary.json" and data["status"] == "prepared":
            die()  # the run directory's first file, before its spec
    writer.write_json = write_json

    from workbench.backends.registry import DeviceInfo
    real_reset = DeviceInfo.reset_peak_memory
    def reset_peak_memory(self):
        if point == "setup":
            die()  # the lock claimed, the device being set up: nothing says "running" yet
        real_reset(self)
    DeviceInfo.reset_peak_memory = reset_peak_memory

    saves = {"weights": 0, "state": 0}
    real_save = transformers.modeling_utils.safe_save_file
    def save_file(tensors, filename, metadata=None):
        saves["weights"] += 1
        real_save(tensors, filename, metadata=metadata)
        if point == "mid_checkpoint" and saves["weights"] == 2:
            with open(filename, "r+b") as f:
                f.truncate(os.path.getsize(filename) // 2)  # the second checkpoint's weights cut short
            die()
    transformers.modeling_utils.safe_save_file = save_file

    real_state = transformers.TrainerState.save_to_json
    def save_to_json(self, path):
        saves["state"] += 1
        if point == "empty_state" and saves["state"] == 2:
            open(path, "w").close()  # transformers writes it in place: a kill leaves 0 bytes
            die()
        real_state(self, path)
    transformers.TrainerState.save_to_json = save_to_json

    class KillAfterFirstSave(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kw):
            if point == "first_checkpoint":
                die()

    wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=12, batch_size=4,
             max_length=32, save_every=4, log_every=2, name="victim", live=False,
             callbacks=[KillAfterFirstSave()])
    print("finished")
""")


def _killed_at(point, tmp_path) -> Run:
    proc = subprocess.run([sys.executable, "-c", VICTIM, point], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    (path,) = (tmp_path / "runs").iterdir()
    return Run.open(path)


@pytest.mark.slow
@pytest.mark.parametrize("point, status, resumes_from", [
    ("created", "failed", None),                   # killed as its summary appeared, before its spec
    ("spec", "failed", None),                      # killed as its spec was written
    ("setup", "failed", None),                     # killed setting up the device, before "running"
    ("first_checkpoint", "failed", "checkpoint-4"),
    ("mid_checkpoint", "failed", "checkpoint-4"),  # checkpoint-8's weights are cut short
    ("empty_state", "failed", "checkpoint-4"),     # checkpoint-8's trainer_state.json is 0 bytes
    ("summary", "failed", "checkpoint-12"),        # killed while writing the final summary
])
def test_a_run_killed_at_any_moment_tells_the_truth_and_resumes(tmp_path, point, status, resumes_from, capsys):
    run = _killed_at(point, tmp_path)
    assert run.status == status, f"killed at {point}: reads {run.status}"
    assert wb.runs(tmp_path / "runs")["status"].tolist() == [status], "wb.runs() lists it as it is"
    assert not list(run.path.glob(".*.tmp")) or point == "summary"
    if resumes_from is None:
        assert run.last_checkpoint is None
        with pytest.raises(FileNotFoundError, match="no checkpoint to resume from"):
            run.resume(live=False)
        return
    assert run.last_checkpoint.name == resumes_from
    assert run.step >= int(resumes_from.split("-")[1]), "the step of a killed run comes from its events"
    if point in ("mid_checkpoint", "empty_state"):
        assert "checkpoint-8" in run.broken_checkpoints
    run.resume(max_steps=16, live=False)
    assert run.status == "completed" and run.summary["step"] == 16 and run.step == 16
    if point in ("mid_checkpoint", "empty_state"):
        assert "checkpoint-8 cannot be resumed from" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_prepared_for_other_machines_stays_prepared_after_its_creator_exits(tmp_path):
    """wb.launch_command prepares a run that torchrun starts elsewhere, later: the notebook
    that prepared it exiting is no failure (unlike wb.train's process dying in setup)."""
    script = textwrap.dedent("""
        import workbench as wb
        wb.launch_command("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), nodes=2, devices_per_node=1,
                          hosts=["a", "b"], max_steps=2)
    """)
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    (path,) = (tmp_path / "runs").iterdir()
    assert Run.open(path).status == "prepared"
    with pytest.raises(FileNotFoundError, match="no checkpoint to resume from"):
        Run.open(path).resume(live=False)
    assert Run.open(path).status == "prepared", "a refused resume does not mark it started"


STOPPABLE = textwrap.dedent("""
    import workbench as wb
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=100000, batch_size=2,
                   max_length=32, save_every=1000, log_every=5, name="long", live=False)
    print("RETURNED", run.status)
""")


@pytest.mark.slow
def test_one_writer_at_a_time_and_stop_from_another_process(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", STOPPABLE], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # the directory exists a moment before its summary and spec are written into it
        spec_file = wait_for(lambda: next((tmp_path / "runs").glob("*-long/spec.json"), None) if proc.poll() is None
                             else pytest.fail(proc.communicate()[1][-2000:]), 120, "the run directory's spec")
        path = spec_file.parent
        run = Run.open(path)
        wait_for(lambda: run.status == "running" and run.step >= 5, 120, "the other process training")
        spec = (path / "spec.json").read_text()
        with pytest.raises(RunBusy, match=rf"being trained by pid {proc.pid}"):
            run.resume(max_steps=10, live=False)
        assert (path / "spec.json").read_text() == spec, "a refused resume writes nothing"
        run.stop()  # from this process: the STOP file
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert "RETURNED stopped" in out, err[-2000:]
    assert run.status == "stopped" and run.last_checkpoint is not None
    assert not (path / "STOP").exists() or run.summary["status"] == "stopped"


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    return wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), run_dir=runs, **LM)


@pytest.mark.parametrize("overrides, message", [
    ({"model": "bert-tiny"}, "not TrainingArguments fields: model"),
    ({"warmup_step": 5}, r"warmup_step \(did you mean warmup_steps\?\)"),
    ({"lr_scheduler_type": "zigzag"}, "would not run"),
    ({"max_steps": 3}, "already at step 12"),
])
def test_a_bad_resume_override_changes_nothing(done, overrides, message):
    before = (done.path / "spec.json").read_text(), (done.path / "summary.json").read_text()
    with pytest.raises(ValueError, match=message):
        Run.open(done.path).resume(live=False, **overrides)
    assert ((done.path / "spec.json").read_text(), (done.path / "summary.json").read_text()) == before
    assert Run.open(done.path).status == "completed"


@pytest.mark.parametrize("max_steps, overrides, message", [
    (20, {"learning_rate": -1e-3}, r"learning_rate=-0.001 is not a learning rate"),
    (20, {"lr": 0}, r"lr=0 is not a learning rate"),
    (20, {"per_device_train_batch_size": 0}, r"per_device_train_batch_size must be at least 1"),
    (20.5, {}, r"max_steps must be a whole number, got 20.5"),
])
def test_a_bad_override_value_is_refused_as_train_refuses_it_and_the_run_stays_as_it_was(
        done, max_steps, overrides, message):
    """A value wb.train would refuse (here: an alias of lr, below 0) is refused by resume()
    before anything is written: the completed run stays completed, and its spec does not
    keep the value (else every plain resume() would fail with it)."""
    from workbench.rundir.lock import WriterLock

    files = ("spec.json", "summary.json", "events.jsonl")
    before = {f: (done.path / f).read_text() for f in files}
    with pytest.raises(ValueError, match=message):
        Run.open(done.path).resume(max_steps=max_steps, live=False, **overrides)
    assert {f: (done.path / f).read_text() for f in files} == before
    assert Run.open(done.path).status == "completed" and not WriterLock(done.path).busy()


def test_resume_of_a_run_at_its_end_trains_nothing_and_says_what_would(done):
    """resume() without max_steps on a completed run: Trainer would take one step past the end
    and rotate a checkpoint away. Refused instead, and the advice is a call that trains."""
    run = Run.open(done.path)
    end, kept = run.step, [p.name for p in run.checkpoints]
    files = ("spec.json", "summary.json", "events.jsonl")
    before = {f: (run.path / f).read_text() for f in files}
    with pytest.raises(ValueError, match=rf"already reached its end \(checkpoint-{end}, "
                                         rf"max_steps={end}\).*resume\(max_steps={2 * end}\)"):
        run.resume(live=False)
    with pytest.raises(ValueError, match=rf"already at step {end}.*one above {end}") as refused:
        run.resume(max_steps=end, live=False)
    assert "leave it out" not in str(refused.value), "leaving it out would train nothing"
    assert {f: (run.path / f).read_text() for f in files} == before
    run = Run.open(done.path)
    assert (run.status, run.step, [p.name for p in run.checkpoints]) == ("completed", end, kept)


def test_resume_keeps_the_previous_arguments_and_train_refuses_a_foreign_checkpoint(done, tmp_path):
    import shutil

    # a copy: the module's run stays at its end for the tests that read it (any order, any worker)
    copy = shutil.copytree(done.path, tmp_path / "copy" / done.path.name)
    run = Run.open(copy).resume(max_steps=14, live=False, learning_rate=1e-4)
    record = run.spec.resumes[-1]
    assert record.origin == "checkpoint-12" and record.previous_args["max_steps"] == 12
    assert run.spec.args.lr == 1e-4, "learning_rate is lr's alias: checked and kept as lr"
    with pytest.raises(ValueError, match=r"resume_from_checkpoint=\.\.\.\) would be ignored"):
        wb.train("gpt2-tiny", "docstrings-lm", run_dir=tmp_path / "new", live=False,
                 resume_from_checkpoint=str(run.last_checkpoint))
    assert not (tmp_path / "new").exists() or not list((tmp_path / "new").iterdir()), \
        "refused before a run directory is made"


def test_a_full_disk_is_named_and_the_last_good_checkpoint_stays(tmp_path, monkeypatch):
    import transformers.modeling_utils as mu

    real, calls = mu.safe_save_file, []

    def full(tensors, filename, metadata=None):
        calls.append(filename)
        if len(calls) == 2:  # the second checkpoint: the disk fills half way
            real(tensors, filename, metadata=metadata)
            with open(filename, "r+b") as f:
                f.truncate(100)
            raise OSError(errno.ENOSPC, "No space left on device", filename)
        real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(mu, "safe_save_file", full)
    with pytest.raises(OSError):
        wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), run_dir=tmp_path, **LM)
    (path,) = tmp_path.iterdir()
    run = Run.open(path)
    summary = run.summary
    assert run.status == "failed" and summary["error"].startswith("disk full at ")
    assert "the last good checkpoint is checkpoint-4" in summary["error"]
    assert not list(path.glob(".*.tmp")) and not (path / ".reserve").exists()
    assert [c.name for c in run.checkpoints] == ["checkpoint-4"] and not run.broken_checkpoints
    monkeypatch.setattr(mu, "safe_save_file", real)
    run.resume(live=False)
    assert run.status == "completed" and run.step == 12


DISK = dict(max_steps=8, batch_size=4, max_length=32, save_every=4, log_every=2, live=False)


def _run_out_of_space(monkeypatch, disk, where: str) -> list[str]:
    """Make the write at ``where`` the one that finds ``disk`` full: the filler tops the disk up
    just before it (``optimizer``: no filler, the 30 MB disk holds checkpoint-4 and
    checkpoint-8's weights but not its optimizer state). Returns the list of the writes that
    raised, filled in as they do."""
    import torch
    import transformers
    import transformers.modeling_utils as mu

    from workbench.rundir import run as runfiles
    from workbench.rundir import writer

    raised, calls = [], {"weights": 0, "trainer_state": 0}

    def witness(name, real, before=None):
        def wrapped(*args, **kwargs):
            if before is not None and not raised:  # once: after the first failure, the run ends as it may
                before(*args, **kwargs)
            try:
                return real(*args, **kwargs)
            except Exception:
                raised.append(name)
                raise
        return wrapped

    def weights(tensors, filename, metadata=None):
        calls["weights"] += 1
        if where == "weights" and calls["weights"] == 2:  # checkpoint-8's model.safetensors
            disk.fill(leave=1 << 20)

    def trainer_state(self, path):
        calls["trainer_state"] += 1
        if where == "trainer_state" and calls["trainer_state"] == 2:
            disk.fill()

    def event(self, e):
        # the first event past checkpoint-8 (on 3 MB: the first of all), made longer than a page
        # of the file: the tail of the page it has left takes a short line even on a full disk,
        # and where the lines' lengths (their throughput's digits) put the next page crossing
        # before checkpoint-8 on a fast run, the disk filled too early (issue 53, flaky)
        if where == "events" and e.get("step", 0) > (8 if disk.mb > 3 else -1):
            e["padding"] = "x" * os.statvfs(disk.path).f_frsize
            disk.fill()

    def summary(path, data):
        if where == "summary" and path.name == "summary.json" and data.get("status") == "running":
            disk.fill()

    monkeypatch.setattr(mu, "safe_save_file", witness("weights", mu.safe_save_file, weights))
    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: (witness("optimizer", real_save) if
                                                                str(f).endswith("optimizer.pt") else real_save)(obj, f, *a, **k))
    monkeypatch.setattr(transformers.TrainerState, "save_to_json",
                        witness("trainer_state", transformers.TrainerState.save_to_json, trainer_state))
    monkeypatch.setattr(runfiles.EventLog, "emit", witness("events", runfiles.EventLog.emit, event))
    monkeypatch.setattr(writer, "write_json", witness("summary", writer.write_json, summary))
    return raised


@pytest.mark.slow
@pytest.mark.parametrize("where, mb, steps, good", [
    ("weights", 30, 8, "checkpoint-4"),        # checkpoint-8's model.safetensors
    ("optimizer", 30, 8, "checkpoint-4"),      # checkpoint-8's optimizer.pt: the disk is simply too small
    ("trainer_state", 45, 8, "checkpoint-4"),  # checkpoint-8's trainer_state.json, its last file
    ("events", 45, 12, "checkpoint-8"),        # the first event past checkpoint-8 (logging every step)
    ("events", 3, 8, None),                    # the first event, before any checkpoint
    ("summary", 3, 8, None),                   # the "running" summary, before training
])
def test_a_full_disk_is_named_the_run_reads_failed_and_the_last_good_checkpoint_resumes(
        small_disk, monkeypatch, where, mb, steps, good):
    disk = small_disk(mb)
    raised = _run_out_of_space(monkeypatch, disk, where)
    last = f"the last good checkpoint is {good}" if good else "there is no good checkpoint yet"
    args = {**DISK, "max_steps": steps, "log_every": 1 if steps == 12 else 2}
    with pytest.raises(OSError, match=rf"^disk full at {re.escape(str(disk.path))}/\S+: \d+ MB free; {last}\. Free some space") as e:
        wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), run_dir=disk.path, **args)
    assert raised[:1] == [where], f"the disk filled in {raised}, not in the {where}"
    assert e.value.errno == errno.ENOSPC
    (path,) = (p for p in disk.path.iterdir() if p.is_dir())
    on_disk = json.loads((path / "summary.json").read_text())
    assert on_disk["status"] == "failed" and on_disk["error"] == str(e.value)
    run = Run.open(path)
    assert run.status == "failed"
    left = sorted((p.name for p in (path / "checkpoints").glob("*")), key=lambda n: int(n.split("-")[1]))
    assert left == [c.name for c in run.checkpoints] and left[-1:] == ([good] if good else []), \
        "the checkpoint the full disk cut short is removed"
    assert not list(path.glob(".*.tmp")) and not (path / ".reserve").exists()
    assert all(json.loads(line) for line in (path / "events.jsonl").read_text().splitlines()), "no half-written event"
    assert run.events[-1] == {"phase": "end", "step": run.events[-1]["step"], "status": "failed"}

    monkeypatch.undo()  # the hooks go; and the user frees some space
    disk.make_room(64)
    if good is None:
        with pytest.raises(FileNotFoundError, match="no checkpoint to resume from"):
            run.resume(live=False)
        return
    run.resume(live=False)
    assert run.status == "completed" and run.step == steps
    assert [c.name for c in run.checkpoints] == [f"checkpoint-{steps - 4}", f"checkpoint-{steps}"]


@pytest.mark.parametrize("first", ["events", "summary"])
def test_a_disk_too_full_for_even_the_last_summary_reads_failed(small_disk, monkeypatch, first):
    """The reserve gives the final summary room, unless something else takes that room too:
    the summary on disk then stays as it was (``running``, or ``prepared`` when not even the
    running one could be written), and readers still see a run that failed."""
    from workbench.rundir import writer

    disk = small_disk(3)
    _run_out_of_space(monkeypatch, disk, first)
    real_write = writer.write_json

    def no_room_at_the_end(path, data):
        if path.name == "summary.json" and data.get("ended"):
            disk.fill()
        real_write(path, data)

    monkeypatch.setattr(writer, "write_json", no_room_at_the_end)
    with pytest.raises(OSError, match=r"^disk full at .*there is no good checkpoint yet"):
        wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), run_dir=disk.path, **DISK)
    (path,) = (p for p in disk.path.iterdir() if p.is_dir())
    on_disk = json.loads((path / "summary.json").read_text())["status"]
    assert on_disk == ("running" if first == "events" else "prepared")
    assert Run.open(path).status == "failed"
    assert wb.runs(disk.path)["status"].tolist() == ["failed"]
    from workbench.rundir.writer import RunWriter

    RunWriter(Run.open(path)).claim().release()  # the lock was released


@pytest.mark.parametrize("failure", ["display", "disk"])
def test_a_resume_that_fails_releases_the_lock_and_changes_nothing(tmp_path, small_disk, monkeypatch, failure):
    """A resume refused or failed after it took the run's lock (its display raised; the disk
    was full for the new spec) leaves the run as it was, free: the next resume() trains."""
    from workbench.rundir import writer
    from workbench.rundir.lock import WriterLock

    disk = small_disk(45) if failure == "disk" else None
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), run_dir=disk.path if disk else tmp_path,
                   **{**DISK, "max_steps": 4})
    before = {f: (run.path / f).read_text() for f in ("spec.json", "summary.json", "events.jsonl")}
    if failure == "display":
        def live(r):
            raise RuntimeError("the display broke")
        with pytest.raises(RuntimeError, match="the display broke"):
            run.resume(max_steps=6, live=live)
    else:
        real_write = writer.write_json

        def full(path, data):
            if path.name == "spec.json":
                disk.fill()
            real_write(path, data)

        monkeypatch.setattr(writer, "write_json", full)
        with pytest.raises(OSError, match=r"^disk full at .*spec\.json: 0 MB free; the last good checkpoint is checkpoint-4"):
            run.resume(max_steps=6, live=False)
        monkeypatch.undo()
        disk.make_room()
    assert not WriterLock(run.path).busy(), "the failed resume kept the run's lock"
    assert {f: (run.path / f).read_text() for f in before} == before
    assert Run.open(run.path).status == "completed"
    run.resume(max_steps=6, live=False)  # not "being trained by pid <this one>"
    assert run.status == "completed" and run.step == 6


def test_a_run_that_fails_before_training_ends_failed_and_says_so(tmp_path, monkeypatch):
    """The device cannot be set up (say, a resumed run on a machine without its device):
    the summary reads failed with the reason, subscribers get the end, the lock is free."""
    from workbench.training import engine

    def no_device(spec, size):
        raise RuntimeError("no hpu here: resume on the machine that has it, or device='cpu'")

    monkeypatch.setattr(engine, "_device_for", no_device)
    ended = []
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), run_dir=tmp_path, background=True,
                   **{**LM, "live": lambda r: r.subscribe(lambda e: e.get("phase") == "end" and ended.append(e))})
    with pytest.raises(RuntimeError, match="no hpu here"):
        run.wait(120)
    assert ended == [{"phase": "end", "step": 0, "status": "failed"}]
    reopened = Run.open(run.path)
    assert reopened.status == "failed" and "no hpu here" in reopened.summary["error"]
    from workbench.rundir.writer import RunWriter

    RunWriter(reopened).claim().release()  # not left busy: the lock was released


def test_opening_a_run_never_runs_code_its_files_ask_for(tmp_path):
    """A run directory from someone else says trust_remote_code and ships an auto_map:
    loading its model must not import that code (trust is the caller's, at load time)."""
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), max_steps=2, batch_size=4,
                   max_length=32, run_dir=tmp_path, live=False)
    marker = tmp_path / "pwned"
    ckpt = run.last_checkpoint
    (ckpt / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                  "from transformers import GPT2LMHeadModel as Evil\n")
    config = json.loads((ckpt / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "evil.Evil", "AutoConfig": "evil.Evil"}
    (ckpt / "config.json").write_text(json.dumps(config))
    spec = json.loads((run.path / "spec.json").read_text())
    spec["model"]["trust_remote_code"] = True
    (run.path / "spec.json").write_text(json.dumps(spec))
    try:
        Run.open(run.path).model  # noqa: B018
    except Exception:  # refusing is fine too; running the code is not
        pass
    assert not marker.exists(), "the run's files made this process run their code"


def test_a_checkpoint_whose_weights_are_cut_short_or_broken_is_named(tmp_path):
    """checkpoint.problem reads each safetensors file with safetensors' own reader: a file
    cut anywhere, or a broken header, is named; a whole one passes."""
    import json as _json

    import torch
    from safetensors.torch import save_file

    from workbench.rundir.checkpoint import problem

    ckpt = tmp_path / "checkpoint-4"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(_json.dumps({"global_step": 4}))
    save_file({"w": torch.zeros(1000), "b": torch.ones(10)}, str(ckpt / "model.safetensors"))
    whole = (ckpt / "model.safetensors").read_bytes()
    assert problem(ckpt) is None
    for cut in (3, 20, len(whole) // 2, len(whole) - 1):
        (ckpt / "model.safetensors").write_bytes(whole[:cut])
        assert problem(ckpt).startswith(f"model.safetensors is cut short or broken ({cut} bytes"), cut
    (ckpt / "model.safetensors").write_bytes(whole[:8] + b"{not json" + whole[17:])
    assert "model.safetensors is cut short or broken" in problem(ckpt)
