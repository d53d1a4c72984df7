"""A real cluster: Debian's slurmctld and two slurmd, each node in its own network
namespace, each node also running Debian's sshd.

``scripts/slurm-cluster.sh`` starts the cluster (as root: daemons and namespaces); these
tests submit what ``wb.launch_command(format="slurm")`` renders with Slurm's own ``sbatch``,
unchanged, from the login node (the controller's namespace), with a bare environment: the
nodes find the project's Python from the script alone; and they type DeepSpeed's multi-node
command as printed on node n1, which reaches both nodes with pdsh over ssh. The run
directory lies on this machine's filesystem, which every node shares, as a cluster's
storage would be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
        self.ssh = env.get("WB_SLURM_SSH", "").split()  # the nodes that run an sshd

    def login(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """``argv`` on the login node with a bare environment (no venv on its PATH)."""
        return subprocess.run(
            ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "bash", str(CLUSTER), "exec",
             str(self.dir), *argv],
            capture_output=True, text=True, check=check, timeout=timeout,
            cwd=self.dir,  # where sbatch puts a job's slurm-N.out when its script names none
        )

    def on(self, node: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """``command`` (a shell line) on ``node``, as a user logged in there with this
        project's venv active (its ``bin`` first on PATH, nothing else of this process)."""
        venv = Path(sys.executable).parent
        return subprocess.run(
            ["env", "-i", f"PATH={venv}:/usr/bin:/bin", "HOME=/root", "bash", str(CLUSTER), "on",
             str(self.dir), node, "bash", "-c", command],
            capture_output=True, text=True, timeout=timeout,
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


# --------------------------------------------------------------------------- from a notebook
# What a notebook's kernel on the login node runs (this file's Python, a bare environment)
NOTEBOOK = """
import json, sys, time
import workbench as wb
options = json.loads(sys.argv[2])
run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=1, run_dir=sys.argv[1],
                max_length=32, batch_size=4, live=False, **options)
seen, jobs = [], []
run.subscribe(lambda e: seen.append(e.get("step")) if e.get("phase") != "job" else jobs.append(e))
if options.get("background"):
    deadline = time.monotonic() + 240
    while run.step < 3 and run.thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    run.stop()
    run.wait()
print("RESULT " + json.dumps({"status": run.status, "step": run.step, "seen": seen, "jobs": jobs,
                             "checkpoints": [p.name for p in run.checkpoints]}))
"""


def _notebook(cluster, tmp_path, **options) -> tuple[subprocess.CompletedProcess, dict | None]:
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    done = cluster.login(sys.executable, str(script), str(tmp_path / "runs"), json.dumps(options),
                         check=False, timeout=400)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    return done, json.loads(line[len("RESULT "):]) if line else None


def test_a_notebook_on_the_login_node_submits_follows_and_stops_every_rank(cluster, tmp_path):
    """wb.launch(scheduler="slurm") from the login node: Slurm's state printed as it moves,
    rank 0's events followed live, Stop: every rank stops after the same step with one
    checkpoint, and the run reads stopped; wb.runs() shows the job."""
    done, result = _notebook(cluster, tmp_path, nodes=2, scheduler="slurm", background=True,
                             max_steps=100000, log_every=1, save_every=1000)
    assert result is not None, done.stdout + done.stderr
    run = wb.Run.open(next((tmp_path / "runs").iterdir()))
    assert result["status"] == "stopped", _logs(run.path)
    step = result["step"]
    assert step >= 3 and result["checkpoints"] == [f"checkpoint-{step}"]
    assert step in result["seen"], "the notebook followed rank 0's events live"
    ranks = [json.loads(p.read_text()) for p in sorted(run.path.glob("ranks/rank-*.json"))]
    assert [r["step"] for r in ranks] == [step, step] and ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    job = json.loads((run.path / "slurm-job.json").read_text())["job_id"]
    assert f"submitted {run.name} as slurm job {job}" in done.stdout
    assert f"slurm job {job}: RUNNING on n[1-2]" in done.stdout
    assert f"slurm job {job}: COMPLETED" in done.stdout
    # the dashboard's header gets the job's line as a display event (tests/test_dashboard.py)
    assert result["jobs"][-1] == {"phase": "job", "job": f"slurm job {job}: COMPLETED on n[1-2]",
                                  "waiting": False}
    table = cluster.login(sys.executable, "-c", "import workbench as wb, sys; "
                          "print(wb.runs(sys.argv[1])[['status', 'job']].values.tolist())",
                          str(tmp_path / "runs")).stdout
    assert f"['stopped', 'slurm job {job}: COMPLETED on n[1-2]']" in table


def test_a_job_slurm_would_not_run_is_refused_before_anything_is_written(cluster, tmp_path):
    for options, said in (({"partition": "nope"}, "partition='nope' is not one of this cluster's"),
                          ({"nodes": 3}, "nodes=3 x devices=1 is more than the partition has")):
        done, result = _notebook(cluster, tmp_path, scheduler="slurm", max_steps=4, **options)
        assert result is None and said in done.stderr, done.stderr
        assert "Slurm would not run this job" in done.stderr
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_without_sbatch_the_error_says_where_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch on it
    with pytest.raises(FileNotFoundError, match="needs Slurm's sbatch on this machine's PATH"):
        wb.launch("gpt2-tiny", "docstrings-lm", devices=1, nodes=2, scheduler="slurm", max_steps=4,
                  run_dir=tmp_path / "runs", live=False)
    with pytest.raises(ValueError, match="nodes=2 or partition= needs scheduler='slurm'"):
        wb.launch("gpt2-tiny", "docstrings-lm", devices=1, nodes=2, max_steps=4,
                  run_dir=tmp_path / "runs", live=False)
    assert not (tmp_path / "runs").exists()


def test_a_job_cancelled_while_it_waits_fails_its_run_with_slurm_s_reason(cluster, tmp_path):
    blocker = cluster.sbatch("#!/bin/bash\nsleep 300\n", "--nodes=2", "--exclusive")
    wait_for(lambda: cluster.state(blocker) == "RUNNING", 30, "the blocking job to start")
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    notebook = subprocess.Popen(
        ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "bash", str(CLUSTER), "exec",
         str(cluster.dir), sys.executable, str(script), str(tmp_path / "runs"),
         json.dumps({"nodes": 2, "scheduler": "slurm", "max_steps": 4})],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        jobs = tmp_path / "runs"
        found = wait_for(lambda: next(jobs.glob("*/slurm-job.json"), None), 60, "the submission")
        job = json.loads(found.read_text())["job_id"]
        wait_for(lambda: cluster.state(job) == "PENDING", 30, "our job to wait")
        assert wb.Run.open(found.parent).status == "prepared"
        cluster.login("scancel", str(job))
        out, err = notebook.communicate(timeout=60)
    finally:
        notebook.kill()
        cluster.login("scancel", str(blocker), check=False)
    run = wb.Run.open(found.parent)
    assert notebook.returncode != 0 and "CANCELLED" in err
    assert run.status == "failed" and run.step == 0
    assert run.summary["error"].startswith(f"slurm job {job}: CANCELLED")
    assert "before the run started" in run.summary["error"]
    assert f"slurm job {job}: PENDING" in out


def test_a_node_lost_mid_run_requeues_the_job_which_continues_from_the_checkpoint(tmp_path):
    """Node n2 lost while the job trains (every process in its namespace killed, slurmd
    included, as a power loss would): Slurm requeues the batch job (its default, JobRequeue=1);
    the notebook says so, naming the node; the node back, the job runs again and continues
    from the last checkpoint to the end."""
    why = _why_not()
    if why is not None:
        pytest.skip(f"no Slurm cluster on this machine: {why}")
    directory = tmp_path / "cluster"  # its own cluster: this one loses a node
    subprocess.run(["bash", str(CLUSTER), "up", str(directory)], check=True, timeout=120)
    try:
        own = Cluster(directory)
        script = tmp_path / "notebook.py"
        script.write_text(NOTEBOOK)
        notebook = subprocess.Popen(
            ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/root", "PYTHONUNBUFFERED=1", "bash",
             str(CLUSTER), "exec", str(directory), sys.executable, str(script),
             str(tmp_path / "runs"),
             json.dumps({"nodes": 2, "scheduler": "slurm", "max_steps": 20, "log_every": 1,
                         "save_every": 4})],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            found = wait_for(lambda: next((tmp_path / "runs").glob("*/slurm-job.json"), None), 60,
                             "the submission")
            run = wb.Run.open(found.parent)
            job = json.loads(found.read_text())["job_id"]
            wait_for(lambda: run.last_checkpoint is not None, 180, "a checkpoint")
            pids = subprocess.run(["ip", "netns", "pids", own.namespaces[2]], capture_output=True,
                                  text=True).stdout
            subprocess.run(["kill", "-9", *pids.split()], check=True)
            wait_for(lambda: "Restarts=1" in own.login("scontrol", "-o", "show", "job", str(job)).stdout,
                     90, "Slurm to requeue the job")
            assert run.status != "running"
            subprocess.run(["bash", str(CLUSTER), "node", str(directory), "n2"], check=True, timeout=60)
            out, err = notebook.communicate(timeout=300)  # the requeued job begins after 71 s
        finally:
            notebook.kill()
        assert notebook.returncode == 0, out + err[-3000:]
        assert f"slurm job {job}: PENDING" in out and "requeued after node n2" in out, out
        assert run.status == "completed" and run.step == 20, _logs(run.path)
        restart = [e for e in run.events if e.get("phase") == "restart"]
        assert len(restart) == 1 and restart[0]["from"].startswith("checkpoint-"), restart
    finally:
        subprocess.run(["bash", str(CLUSTER), "down", str(directory)], check=True, timeout=120)


# --------------------------------------------------------------------------- DeepSpeed over ssh
def test_deepspeeds_launcher_reaches_both_nodes_over_ssh_and_trains_zero2(cluster, tmp_path):
    """DeepSpeed's multi-node form as wb.launch_command prints it: the hostfile, and the one
    ``deepspeed`` line typed on n1. DeepSpeed's launcher checks passwordless ssh to n1, asks
    nothing else of the user, and starts one launcher per host with pdsh over ssh (sshd in
    each node's namespace, keys made by the cluster script); ZeRO-2 over gloo across the two
    namespaces' addresses: one run, identical weights on n1 and n2, the optimizer state split."""
    if not cluster.ssh:
        pytest.skip("the nodes run no sshd: " + subprocess.run(
            ["bash", str(CLUSTER), "check-ssh"], capture_output=True, text=True).stdout.strip())
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra 'deepspeed'; see the Makefile)")
    cmd = wb.launch_command("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), nodes=2,
                            devices_per_node=1, hosts=["n1", "n2"], strategy="deepspeed",
                            zero_stage=2, accelerator="cpu", run_dir=tmp_path / "runs",
                            max_steps=4, log_every=2, **DATA)
    printed = str(cmd)
    work = tmp_path / "work"  # where the user keeps the hostfile and types the command
    work.mkdir()
    (work / "hostfile").write_text(printed.split("# hostfile\n")[1].split("\n\n")[0] + "\n")
    # DeepSpeed's CPU op, JIT-built, comes from the session's build (tests/conftest.py), which
    # ssh would not pass on: its launcher exports what `.deepspeed_env` lists (runner.py)
    (work / ".deepspeed_env").write_text(f"TORCH_EXTENSIONS_DIR={os.environ['TORCH_EXTENSIONS_DIR']}\n")
    line = printed.split("(reaching the others over ssh):\n")[1].splitlines()[0]
    assert line.startswith("deepspeed --hostfile hostfile ") and "--no_ssh" not in line
    done = cluster.on("n1", f"cd {work} && {line}", timeout=400)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "n2: " in out and "n1: " in out, "pdsh started a launcher on each host"
    run = wb.Run.open(cmd.run_dir)
    assert run.status == "completed" and run.step == 4 and run.summary["world_size"] == 2
    ranks = [json.loads(p.read_text()) for p in sorted(run.path.glob("ranks/rank-*.json"))]
    assert [(r["rank"], r["host"]) for r in ranks] == [(0, "n1"), (1, "n2")]
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    states = sorted(run.last_checkpoint.glob("global_step*/zero_pp_rank_*_optim_states.pt"))
    assert len(states) == 2, "ZeRO-2 split the optimizer state across the two nodes' ranks"


def test_the_cluster_leaves_no_daemon_or_namespace_behind(tmp_path):
    why = _why_not()
    if why is not None:
        pytest.skip(f"no Slurm cluster on this machine: {why}")
    directory = tmp_path / "cluster"
    subprocess.run(["bash", str(CLUSTER), "up", str(directory)], check=True, timeout=120)
    pids = [int(p.read_text()) for p in directory.glob("**/*.pid")]
    namespaces = Cluster(directory).namespaces
    ssh = 2 if Cluster(directory).ssh else 0
    assert len(pids) == 4 + ssh, "munged, slurmctld, two slurmd (and an sshd per node)"
    subprocess.run(["bash", str(CLUSTER), "down", str(directory)], check=True, timeout=120)
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    left = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert alive == [] and not left & set(namespaces)
