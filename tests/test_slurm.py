"""A real Slurm: Debian's slurmctld and two slurmd, each node in its own network namespace.

``scripts/slurm-cluster.sh`` starts the cluster (as root: daemons and namespaces); these
tests submit what ``wb.launch_command(format="slurm")`` renders with Slurm's own ``sbatch``,
unchanged, from the login node (the controller's namespace), with a bare environment: the
nodes find the project's Python from the script alone. The run directory lies on this
machine's filesystem, which every node shares, as a cluster's storage would be.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

import workbench as wb

from conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "scripts" / "slurm-cluster.sh"
DATA = dict(max_length=32, batch_size=4)

pytestmark = pytest.mark.slow


def _why_not() -> str | None:
    """Why this machine cannot run the cluster (not root, no Slurm, no namespaces), or None."""
    done = subprocess.run(["bash", str(CLUSTER), "check"], capture_output=True, text=True)
    return None if done.returncode == 0 else done.stdout.strip() or done.stderr.strip()


class Cluster:
    """The running cluster: commands on its login node, as a user would type them there."""

    def __init__(self, directory: Path):
        self.dir = directory
        env = dict(line.split("=", 1) for line in (directory / "env").read_text().splitlines())
        self.namespaces = [env["WB_SLURM_LOGIN"], *env["WB_SLURM_NODES"].split()]

    def login(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """``argv`` on the login node with a bare environment (no venv on its PATH)."""
        return subprocess.run(
            ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "bash", str(CLUSTER), "exec",
             str(self.dir), *argv],
            capture_output=True, text=True, check=check, timeout=60,
        )

    def sbatch(self, script: str, *options: str) -> int:
        path = self.dir / f"job-{time.monotonic_ns()}.sbatch"
        path.write_text(script)
        return int(self.login("sbatch", "--parsable", *options, str(path)).stdout.strip())

    def state(self, job: int) -> str:
        """The job's state as Slurm's controller has it (``scontrol``; kept MinJobAge s)."""
        out = self.login("scontrol", "-o", "show", "job", str(job)).stdout
        return next(f.split("=", 1)[1] for f in out.split() if f.startswith("JobState="))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = _why_not()
    if why is not None:
        pytest.skip(f"no Slurm cluster on this machine: {why} (scripts/slurm-cluster.sh check)")
    directory = tmp_path_factory.mktemp("slurm")
    subprocess.run(["bash", str(CLUSTER), "up", str(directory)], check=True, timeout=120)
    try:
        yield Cluster(directory)
    finally:
        subprocess.run(["bash", str(CLUSTER), "down", str(directory)], check=True, timeout=120)


def _rendered(tmp_path, **options):
    return wb.launch_command("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), nodes=2,
                             devices_per_node=1, format="slurm", accelerator="cpu",
                             run_dir=tmp_path / "runs", **DATA, **options)


def _logs(path) -> str:
    files = sorted(Path(path).glob("logs/**/*.log")) + sorted(Path(path).glob("slurm-*.out"))
    return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-1500:]}" for p in files)


def test_the_rendered_script_runs_on_two_nodes_from_a_bare_login_shell(cluster, tmp_path):
    """sbatch of the script as rendered: one torchrun per node, meeting at the first node's
    address across the namespaces, one run with identical weights on both ranks; the run's
    state true at each moment Slurm moves it (waiting in the queue: prepared; then running,
    then completed); both nodes' logs in the run directory."""
    # a job holding both nodes first, so that ours waits in the queue
    blocker = cluster.sbatch("#!/bin/bash\nsleep 300\n", "--nodes=2", "--exclusive")
    wait_for(lambda: cluster.state(blocker) == "RUNNING", 30, "the blocking job to start")
    cmd = _rendered(tmp_path, max_steps=6, log_every=1, save_every=3)
    job = cluster.sbatch(str(cmd))
    run = wb.Run.open(cmd.run_dir)
    wait_for(lambda: cluster.state(job) == "PENDING", 30, "our job to wait for the nodes")
    assert run.status == "prepared", "a queued job's run has not started"
    cluster.login("scancel", str(blocker))

    seen = []
    def finished():
        seen.append(run.status)
        return cluster.state(job) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")
    wait_for(finished, 240, "the job to end", interval=0.2)
    assert cluster.state(job) == "COMPLETED", _logs(run.path)
    assert run.status == "completed" and run.step == 6, _logs(run.path)
    assert "running" in seen and seen.index("running") < len(seen) - 1
    assert set(seen) <= {"prepared", "running", "completed"}, seen
    ranks = [json.loads(p.read_text()) for p in sorted(run.path.glob("ranks/rank-*.json"))]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    assert run.summary["world_size"] == 2
    agents = sorted(run.path.glob("logs/*/attempt_0/0/stderr.log"))
    assert len(agents) == 2, "each node's torchrun keeps its worker's log in the run directory"
    out = (run.path / f"slurm-{job}.out").read_text()
    assert "Traceback" not in out.split("RendezvousConnectionError")[0], out


def test_scancel_mid_run_leaves_a_run_that_reads_failed_never_running(cluster, tmp_path):
    cmd = _rendered(tmp_path, max_steps=100000, log_every=1, save_every=2)
    job = cluster.sbatch(str(cmd))
    run = wb.Run.open(cmd.run_dir)
    wait_for(lambda: run.status == "running" and run.step >= 3, 180, "the job's first steps")
    cluster.login("scancel", str(job))
    wait_for(lambda: cluster.state(job) == "CANCELLED" and run.status != "running", 60,
             "the cancelled run to stop reading running")
    assert run.status == "failed"
    assert run.step >= 3 and run.last_checkpoint is not None, "it resumes from its last checkpoint"


def test_the_cluster_leaves_no_daemon_or_namespace_behind(tmp_path):
    why = _why_not()
    if why is not None:
        pytest.skip(f"no Slurm cluster on this machine: {why}")
    directory = tmp_path / "cluster"
    subprocess.run(["bash", str(CLUSTER), "up", str(directory)], check=True, timeout=120)
    pids = [int(p.read_text()) for p in directory.glob("**/*.pid")]
    namespaces = Cluster(directory).namespaces
    assert len(pids) == 4, "munged, slurmctld and two slurmd"
    subprocess.run(["bash", str(CLUSTER), "down", str(directory)], check=True, timeout=120)
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    left = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert alive == [] and not left & set(namespaces)
