"""The scheduler job a run was submitted as: its id, kept in the run directory as data
(``slurm-job.json``; the id must be a whole number), and its state, asked of the caller's
cluster through Slurm's own commands (``squeue``, then ``scontrol``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

JOB_FILE = "slurm-job.json"
# Slurm's job states in which the job still holds or waits for its nodes (squeue(1) "JOB
# STATE CODES"); every other state is an end (COMPLETED, CANCELLED, FAILED, NODE_FAIL, ...)
WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED")
ACTIVE = (*WAITING, "RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "STOPPED")
ASK_TIMEOUT = 10.0  # seconds for one squeue/scontrol answer


@dataclass(frozen=True)
class JobState:
    """A Slurm job as its controller reports it now: ``state`` (``PENDING``, ``RUNNING``, ...;
    ``UNKNOWN``: not known or not asked), ``reason`` and ``nodes``."""

    job_id: int
    state: str
    reason: str = ""
    nodes: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def __str__(self) -> str:
        why = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        where = f" on {self.nodes}" if self.nodes and self.nodes != "(null)" else ""
        return f"slurm job {self.job_id}: {self.state}{why}{where}"


def job_id(path: str | Path) -> int | None:
    """The Slurm job id a run was submitted as, or None (not submitted, or not a whole
    number: a run directory's file is data, never an argument passed on as it stands)."""
    try:
        value = json.loads((Path(path) / JOB_FILE).read_text()).get("job_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _ask(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=ASK_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def job_state(path: str | Path) -> JobState | None:
    """The state of the run's Slurm job (None: the run was not submitted to Slurm)."""
    job = job_id(path)
    if job is None:
        return None
    out = _ask(["squeue", "-h", "-j", str(job), "-o", "%T|%r|%N"])
    if out and out.strip():
        state, reason, nodes = (out.strip().splitlines()[0].split("|") + ["", ""])[:3]
        return JobState(job, state, reason, nodes)
    out = _ask(["scontrol", "-o", "show", "job", str(job)])  # ended: kept MinJobAge seconds
    if out:
        fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
        state = fields.get("JobState", "UNKNOWN")
        return JobState(job, state, fields.get("Reason", ""), fields.get("NodeList", ""))
    return JobState(job, "UNKNOWN")
