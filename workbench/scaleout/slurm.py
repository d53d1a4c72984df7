"""A run submitted to Slurm from the notebook (``wb.launch(..., scheduler="slurm")``).

Slurm starts the workers (``sbatch`` of ``LaunchCommand.slurm``); the run directory, on storage
every node mounts, is the only channel back. This process checks the job (``sbatch
--test-only``) before anything is written, submits it, keeps its id (``rundir.job``) and
follows it: events replayed, the job's state printed, Stop as a STOP file, and a job that ends
without ending its run recorded as the run's failure with Slurm's state and reason. Not
``submitit``: a run is already a directory of specs, started by a script the user can read,
so what remains is ``sbatch --parsable``, ``squeue`` and ``scancel`` (docs/multi-node.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

from ..rundir.job import JOB_FILE, JobState, job_state
from ..rundir.run import STOP_FILE, now, write_json
from ..rundir.writer import RunWriter
from ..training.engine import Run, training
from ..training.interrupts import Interrupts
from .launchfiles import LaunchCommand

ASK_EVERY = 2.0  # seconds between two questions to Slurm's controller while following
FORGOTTEN = 60.0  # seconds a job may read UNKNOWN (controller unreachable) before following ends
POLL = 0.2  # seconds between two reads of the event log
SUBMIT_TIMEOUT = 60.0


def _sbatch() -> str:
    found = shutil.which("sbatch")
    if found is None:
        raise FileNotFoundError(
            "scheduler='slurm' needs Slurm's sbatch on this machine's PATH: run the notebook "
            "on the cluster's login node (or one with Slurm's client and its slurm.conf), or "
            "render the job with wb.launch_command(..., format='slurm') and submit it there"
        )
    return found


def check(cmd: LaunchCommand) -> None:
    """Refuse, before anything is written, a job this cluster would not run: Slurm's own
    answer to ``sbatch --test-only`` of the script's directives, with the fix."""
    script = "\n".join(line for line in cmd.slurm.splitlines() if line.startswith("#")) + "\ntrue\n"
    done = subprocess.run(
        [_sbatch(), "--test-only"],
        input=script,
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT,
    )
    if done.returncode == 0:
        return
    said = " / ".join(line.strip() for line in done.stderr.splitlines() if line.strip())
    low = said.lower()
    if "partition" in low:
        fix = f"partition={cmd.partition!r} is not one of this cluster's: `sinfo -s` lists them"
    elif "node configuration is not available" in low or "node count" in low:
        fix = (
            f"nodes={cmd.nodes} x devices={cmd.devices_per_node} is more than the partition "
            "has: `sinfo -N` lists its nodes"
        )
    elif "gres" in low:
        fix = "the nodes have no such devices: pass device= the nodes' kind (`sinfo -o %G`)"
    else:
        fix = "see Slurm's message"
    raise ValueError(f"Slurm would not run this job: {said}. {fix}")


def submit(run: Run, cmd: LaunchCommand) -> int:
    """Submit ``cmd``'s script (kept as the run's ``job.sbatch``) and record its job id."""
    script = run.path / "job.sbatch"
    script.write_text(cmd.slurm)
    done = subprocess.run(
        [_sbatch(), "--parsable", str(script)],
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"sbatch refused {script}: {done.stderr.strip()}")
    job = int(done.stdout.strip().split(";")[0])  # "id" or "id;cluster"
    write_json(run.path / JOB_FILE, {"job_id": job, "submitted": now(), "script": script.name})
    return job


def _lost_tasks(run: Run, job: int) -> str:
    """Which node's task ended the job, as srun reported it in the job's output (``srun:
    error: n2: task 1: Killed``): the node, the task (one torchrun agent a node) and why."""
    try:
        text = (run.path / f"slurm-{job}.out").read_text(errors="replace")
    except OSError:
        return ""
    failed = re.findall(r"srun: error: Node failure on (\S+)", text)
    if failed:  # the node itself was lost: the others' tasks ended because of it
        return "; ".join(f"node {node} failed (srun: Node failure)" for node in failed[:2])
    found = re.findall(r"srun: error: (\S+): tasks? ([\d,-]+): (.+)", text)
    first = [f for f in found if "Terminated" not in f[2]] or found  # the cause, not the rest
    return "; ".join(f"node {node}, task {task}: {why.strip()}" for node, task, why in first[:2])


def _ended_without_the_run(run: Run, state: JobState) -> None:
    """The job ended and its run did not say so: record the run's failure with Slurm's word
    (the job's processes are gone, so the run's lock is free)."""
    if run.summary.get("ended"):
        return
    began = run.summary.get("status") != "prepared"
    lost = _lost_tasks(run, state.job_id)
    message = (
        f"{state} {'after the run started' if began else 'before the run started'}"
        + (f": {lost}" if lost else "")
        + f"; `scontrol show job {state.job_id}` and the run's slurm-{state.job_id}.out say more"
    )
    writer = RunWriter(run).claim("record the job's end")
    try:
        writer.end({"status": "failed", "error": message, "slurm": state.__dict__})
    finally:
        writer.release()
    run.log.tell({"phase": "end", "step": run.step, "status": "failed"})
    run.error = RuntimeError(f"{run.name}: {message}")


def _show(run: Run, line: str, *, waiting: bool) -> None:
    """The job's state to this process's displays (the dashboard's header): a ``job`` event,
    never written to the run's events, which rank 0 alone writes."""
    for fn in list(run.log.subscribers):
        fn({"phase": "job", "job": line, "waiting": waiting})


def follow(run: Run, follower, *, say=print) -> Run:
    """Follow ``run``'s job to its end (``follower`` replays rank 0's events to this
    process's live view); Stop writes the STOP file; a second interrupt cancels the job."""
    last, asked, unknown_since = None, 0.0, None
    state = job_state(run.path)
    assert state is not None  # submit wrote the run's job file
    try:
        with training(run), Interrupts(run):
            while True:
                follower.poll()
                if run.stop_flag.is_set() and not run.summary.get("ended"):
                    # every rank reads it at its next logging step; written again after rank 0
                    # clears a stale one as it claims the run (a Stop while the job waited)
                    (run.path / STOP_FILE).touch()
                if time.monotonic() - asked >= ASK_EVERY:
                    asked, state = time.monotonic(), job_state(run.path) or state
                    if str(state) != last:
                        requeued = state.state == "PENDING" and "RUNNING" in str(last)
                        lost = _lost_tasks(run, state.job_id) if requeued else ""
                        last = str(state)
                        # requeued (a lost node): it continues from the last checkpoint
                        line = last + (f", requeued after {lost}" if lost else "")
                        say(line)
                        _show(run, line, waiting=state.state == "PENDING")
                    if state.state == "UNKNOWN":  # not answering, or the job was forgotten
                        unknown_since = unknown_since or time.monotonic()
                        if run.summary.get("ended") or time.monotonic() - unknown_since > FORGOTTEN:
                            break
                    elif not state.active:
                        break
                    else:
                        unknown_since = None
                time.sleep(POLL)
    except KeyboardInterrupt:  # a second interrupt: the job is cancelled now
        subprocess.run(["scancel", str(state.job_id)], capture_output=True, timeout=SUBMIT_TIMEOUT)
        raise
    follower.poll()
    run.refresh()
    _ended_without_the_run(run, state)
    return run
