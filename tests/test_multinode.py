"""Past one machine: two torchrun "nodes" on loopback, elastic restarts, the launch files.

What runs for real here: two torchrun agents on 127.0.0.1 meeting at a c10d rendezvous,
started from the very lines ``wb.launch_command`` prints, training over gloo; and
torchrun restarting killed workers, which continue from the last checkpoint. What is
rendered only (DeepSpeed's ssh form, Slurm, Kubernetes) is checked against the tools'
own parsers and the operators' published fields.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import workbench as wb

from conftest import wait_for

DATA = dict(max_length=32, batch_size=4)


pytestmark = pytest.mark.usefixtures("runs_in_tmp")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(path).glob("ranks/rank-*.json"))]


def _logs(path) -> str:
    """Every rank's and agent's log tail, for a failure message that names a hang."""
    files = sorted(Path(path).glob("logs/**/*.log")) + sorted(Path(path).glob("agent-*.log"))
    return "\n".join(f"--- {p.name} ({p.parent})\n{p.read_text(errors='replace')[-1500:]}" for p in files)


# --------------------------------------------------------------------------- two nodes
@pytest.mark.slow
def test_two_torchrun_nodes_on_loopback_from_the_printed_commands_restart_together():
    """Two agents on 127.0.0.1 run the printed line as two machines would, each in its
    shell; one node's worker is killed after a checkpoint, and both nodes restart from it."""
    port = _free_port()
    cmd = wb.launch_command("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), nodes=2, devices_per_node=1,
                            hosts=["127.0.0.1", "127.0.0.1"], port=port, max_steps=16, log_every=2, save_every=4,
                            max_restarts=1, **DATA)
    header, line = [x for x in str(cmd).splitlines() if x.strip()]
    assert header == "# on each of 127.0.0.1, 127.0.0.1:"
    assert f"--rdzv_endpoint=127.0.0.1:{port}" in shlex.split(line) and "--nnodes=2" in shlex.split(line)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # this environment's torchrun
    agents = [subprocess.Popen(["bash", "-c", line], env=env, stdout=open(Path(cmd.run_dir) / f"agent-{node}.log", "w"),
                               stderr=subprocess.STDOUT) for node in (0, 1)]
    run = wb.Run.open(cmd.run_dir)

    def node_1_worker():
        assert all(a.poll() is None for a in agents), _logs(run.path)
        if run.last_checkpoint is None:
            return None
        return next((p for p in psutil.Process(agents[1].pid).children(recursive=True)
                     if "workbench.scaleout.worker" in " ".join(p.cmdline()) and p.name() != "torchrun"), None)

    try:
        wait_for(node_1_worker, 240, "a checkpoint and node 1's worker").send_signal(signal.SIGKILL)
        wait_for(lambda: all(a.poll() is not None for a in agents), 240, "both torchrun agents to end")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_logs(cmd.run_dir)}") from None
    finally:
        for a in agents:
            a.kill()
    assert [a.returncode for a in agents] == [0, 0], _logs(cmd.run_dir)
    assert run.status == "completed" and run.summary["world_size"] == 2
    ranks = _ranks(run.path)
    assert [r["rank"] for r in ranks] == [0, 1] and {r["step"] for r in ranks} == {16}
    assert ranks[0]["params_sha256"] == ranks[1]["params_sha256"], "both nodes end with identical weights"
    events = run.events
    assert events[0]["phase"] == "start" and events[0]["world_size"] == 2
    restarts = [e for e in events if e.get("phase") == "restart"]
    assert len(restarts) == 1 and restarts[0]["attempt"] == 1 and restarts[0]["step"] >= 4, restarts
    assert [e["step"] for e in events if e.get("phase") in ("warmup", "train")] == list(range(2, 17, 2))
    assert events[-1] == {**events[-1], "phase": "end", "status": "completed", "step": 16}
    # each agent ran one worker, local rank 0, in its own log directory. torchrun counts
    # restarts per agent: the node whose worker died is on attempt 1; the other one is on
    # attempt 1 too when its own worker failed first (gloo: the peer closed the connection),
    # else it re-joined on attempt 0 -- a race between the two nodes, which is why the workers
    # do not go by TORCHELASTIC_RESTART_COUNT
    tries = {a: {p.parents[2] for p in run.path.glob(f"logs/*/attempt_{a}/0/stderr.log")} for a in (0, 1)}
    assert len(tries[0]) == 2 and len(tries[1]) in (1, 2), sorted(str(p) for p in run.path.glob("logs/**"))
    assert restarts[0]["torchrun_restarts"] in (0, 1)


# --------------------------------------------------------------------------- elastic restarts
def _worker(run, rank: int) -> psutil.Process:
    """The live worker process of ``rank`` under the run's torchrun."""
    def find():
        assert run.process.poll() is None, f"torchrun exited with {run.process.returncode}\n{_logs(run.path)}"
        for p in psutil.Process(run.process.pid).children(recursive=True):
            try:
                if "workbench.scaleout.worker" in " ".join(p.cmdline()) and p.environ().get("RANK") == str(rank):
                    return p
            except psutil.NoSuchProcess:
                continue
        return None

    return wait_for(find, 120, f"rank {rank}'s worker")


def _finish(run, timeout: float):
    try:
        return run.wait(timeout)
    except TimeoutError:
        run.process.terminate()
        raise AssertionError(f"{run.name} did not finish in {timeout:g} s\n{_logs(run.path)}") from None


@pytest.mark.slow
def test_a_killed_rank_0_restarts_the_group_from_the_last_checkpoint(tmp_path, monkeypatch):
    # the restarted rank 0 comes up late (a sitecustomize on its path makes it): the other
    # rank must wait for it, not dial the dead rank 0's address left in a reused store
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, time\n"
        "if os.environ.get('RANK') == '0' and os.environ.get('TORCHELASTIC_RESTART_COUNT') == '1':\n"
        "    time.sleep(3)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
    seen = []
    run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=2, max_steps=18,
                    log_every=2, save_every=6, max_restarts=1, live=lambda r: r.subscribe(seen.append),
                    background=True, **DATA)
    wait_for(lambda: run.process.poll() is None and run.last_checkpoint is not None, 180, "a first checkpoint")
    _worker(run, 0).send_signal(signal.SIGKILL)  # rank 0: the writer, holding the run's lock
    # rank 1, stopped by the agent meanwhile, records its error whole or not at all
    # (WholeErrorFile, tests/test_worker_errors.py): torch elastic's agent once died here
    # parsing a half-written one
    _finish(run, 300)
    assert run.status == "completed", run.summary.get("error")
    restarts = [e for e in seen if e.get("phase") == "restart"]
    assert len(restarts) == 1 and restarts[0]["attempt"] == 1, restarts
    back_to = restarts[0]["step"]
    assert back_to >= 6 and restarts[0]["from"] == f"checkpoint-{back_to}"
    before = [e["step"] for e in seen[: seen.index(restarts[0])] if e.get("phase") in ("warmup", "train")]
    assert 0 <= max(before) - back_to <= 6, "at most save_every steps are trained again"
    # the log on disk reads as one run: the steps past the checkpoint dropped, the restart kept
    steps = [e["step"] for e in run.events if e.get("phase") in ("warmup", "train")]
    assert steps == list(range(2, 19, 2)) and [e["phase"] for e in run.events].count("restart") == 1
    ranks = _ranks(run.path)
    assert {r["step"] for r in ranks} == {18} and ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    assert list(run.path.glob("logs/**/attempt_1/0/stderr.log")), "the second attempt's logs are kept"


@pytest.mark.slow
def test_when_restarts_run_out_the_run_fails_naming_the_rank_and_cause():
    run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), devices=2, max_steps=100000, log_every=2,
                    max_restarts=1, live=False, background=True, **DATA)
    wait_for(lambda: run.process.poll() is None and run.step >= 2, 180, "rank 0's first steps")
    _worker(run, 1).send_signal(signal.SIGKILL)
    wait_for(lambda: any(e.get("phase") == "restart" for e in run.events), 180, "the restart event")
    restart = next(e for e in run.events if e.get("phase") == "restart")
    assert restart["attempt"] == 1 and restart["from"] is None, "no checkpoint yet: the restart begins anew"
    wait_for(lambda: run.step >= 2, 180, "the restarted ranks' first steps")
    _worker(run, 1).send_signal(signal.SIGKILL)
    with pytest.raises(RuntimeError, match="rank 1 failed"):
        _finish(run, 180)
    assert run.status == "failed" and run.summary["failed_rank"] == 1
    assert "SIGKILL" in run.summary["error"] and "after 1 restart from the last checkpoint" in run.summary["error"]


def test_the_follower_replays_a_rewritten_log_without_repeating_itself(tmp_path):
    """A restarted rank 0 replaces events.jsonl (the steps past its checkpoint dropped):
    the notebook's display gets the new events once, and none of the kept ones again."""
    from workbench.rundir.run import RunDir
    from workbench.scaleout.launcher import _Follower

    rank0, notebook = RunDir(tmp_path), RunDir(tmp_path)  # the writer, and the launching process's view
    got = []
    notebook.subscribe(got.append)
    follower = _Follower(notebook)
    for step in (2, 4, 6):
        rank0.log.emit({"phase": "train", "step": step})
    follower.poll()
    rank0.log.truncate_after(4)
    rank0.log.emit({"phase": "restart", "step": 4, "attempt": 1})
    rank0.log.emit({"phase": "train", "step": 6, "loss": 1.0})
    follower.poll()
    assert [(e["phase"], e["step"]) for e in got] == [("train", 2), ("train", 4), ("train", 6), ("restart", 4), ("train", 6)]
    rank0.log.emit({"phase": "train", "step": 8})
    follower.poll()
    assert got[-1]["step"] == 8 and len(got) == 6


# --------------------------------------------------------------------------- DeepSpeed
@pytest.mark.slow
def test_deepspeeds_multi_node_forms_are_what_its_own_launcher_accepts():
    """DeepSpeed's multi-node launcher reaches the hosts with pdsh over ssh and refuses a
    hostfile naming one host twice, so that form cannot run on one machine: the rendered
    files are read with DeepSpeed's own parsers."""
    runner = pytest.importorskip("deepspeed.launcher.runner", reason="DeepSpeed is not installed")
    cmd = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=2, devices_per_node=8, hosts=["gaudi-a", "gaudi-b"],
                            strategy="deepspeed", zero_stage=2, port=29600)
    assert dict(runner._parse_hostfile(cmd.hostfile.splitlines())) == {"gaudi-a": 8, "gaudi-b": 8}
    with pytest.raises(ValueError, match="multiple entries for localhost"):
        runner._parse_hostfile(["localhost slots=1", "localhost slots=1"])
    argv = shlex.split(cmd.deepspeed)
    assert argv[0] == "deepspeed"
    args = runner.parse_args(argv[1:])
    assert (args.hostfile, args.num_nodes, args.num_gpus, args.master_addr, args.master_port) == \
        ("hostfile", 2, 8, "gaudi-a", 29600)
    assert args.module and args.no_local_rank, "the worker takes one argument: no --local_rank appended"
    assert [args.user_script, *args.user_args] == ["workbench.scaleout.worker", cmd.run_dir]
    assert runner.PDSH_LAUNCHER == args.launcher == "pdsh" and not args.no_ssh
    for rank in (0, 1):
        node = runner.parse_args(shlex.split(cmd.deepspeed_node(rank))[1:])
        assert node.no_ssh and node.node_rank == rank and node.no_local_rank and node.master_addr == "gaudi-a"


@pytest.mark.slow
def test_deepspeed_two_nodes_on_loopback_without_ssh():
    """DeepSpeed's --no_ssh form (each node starts its own launcher with its node rank)
    does run on one machine, when the hostfile names the loopback twice by two names."""
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (extra 'deepspeed'; see the Makefile)")
    import re

    cmd = wb.launch_command("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), nodes=2, devices_per_node=1,
                            hosts=["localhost", "127.0.0.1"], strategy="deepspeed", zero_stage=2, port=_free_port(),
                            max_steps=4, log_every=2, **DATA)
    printed = str(cmd)
    Path("hostfile").write_text(printed.split("# hostfile\n")[1].split("\n\n")[0] + "\n")  # as printed
    nodes = re.findall(r"^# on (\S+) \(node (\d)\):\n(.+)$", printed, re.M)
    assert [(host, int(rank)) for host, rank, _ in nodes] == [("localhost", 0), ("127.0.0.1", 1)]
    agents = []
    for _host, rank, line in nodes:
        argv = shlex.split(line)
        argv[0] = str(Path(sys.executable).with_name("deepspeed"))  # this environment's launcher
        log = open(Path(cmd.run_dir) / f"agent-{rank}.log", "w")
        agents.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
    try:
        wait_for(lambda: all(a.poll() is not None for a in agents), 600, "both DeepSpeed launchers to end")
    except AssertionError:
        raise AssertionError(_logs(cmd.run_dir)) from None
    finally:
        for a in agents:
            a.kill()
    assert [a.returncode for a in agents] == [0, 0], _logs(cmd.run_dir)
    run = wb.Run.open(cmd.run_dir)
    assert run.status == "completed" and run.summary["world_size"] == 2
    ranks = _ranks(run.path)
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["params_sha256"] == ranks[1]["params_sha256"]
    states = sorted(p.name for p in run.last_checkpoint.glob("global_step*/zero_pp_rank_*_optim_states.pt"))
    assert len(states) == 2, "ZeRO-2 split the optimizer state across the two nodes' ranks"


# --------------------------------------------------------------------------- Slurm, rendered
@pytest.mark.slow
def test_the_slurm_script_parses_and_starts_one_torchrun_per_node(tmp_path):
    cmd = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=3, devices_per_node=8, format="slurm",
                            accelerator="cuda", max_restarts=2, port=29555)
    script = tmp_path / "job.sbatch"
    script.write_text(str(cmd))
    subprocess.run(["bash", "-n", str(script)], check=True)
    sbatch = dict(line[len("#SBATCH "):].split("=", 1) for line in str(cmd).splitlines() if line.startswith("#SBATCH "))
    assert sbatch == {"--job-name": sbatch["--job-name"], "--nodes": "3", "--ntasks-per-node": "1",
                      "--gres": "gpu:8", "--output": f"{cmd.run_dir}/slurm-%j.out",
                      "--signal": "B:USR1@120"}
    # run it with stand-ins for Slurm's commands: scontrol names the allocation, srun records its argv
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "scontrol").write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames n[07-09]" ] && printf "n07\\nn08\\nn09\\n"\n')
    (bin_ / "srun").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                               "print(json.dumps(sys.argv[1:] + [os.environ.get('TORCH_DISABLE_SHARE_RDZV_TCP_STORE')]))\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "n[07-09]", "SLURM_JOB_ID": "4242"}
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True).stdout
    srun = json.loads(out)
    assert srun[:3] == ["--nodes=3", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert srun[3:] == [sys.executable, "-m", "torch.distributed.run", "--nnodes=3", "--nproc_per_node=8", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=n07:29555", "--rdzv_id=4242", "--max_restarts=2",
                        f"--log_dir={cmd.run_dir}/logs", "--redirects=3", "-m", "workbench.scaleout.worker", cmd.run_dir,
                        "1"], "restarts get a fresh rendezvous store each (launchfiles.restart_env)"
    gaudi = str(wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=2, devices_per_node=8, format="slurm",
                                  accelerator="hpu"))
    assert "--gres" not in gaudi.replace("add your site's GRES", "") and "Intel Gaudi: add your site's GRES" in gaudi


# --------------------------------------------------------------------------- Kubernetes, rendered
def _roundtrip(data: dict, model: str, api):
    """``data`` read into the generated model class and written back: a misspelt or unknown
    field vanishes, a missing required one raises."""
    class Response:  # ApiClient.deserialize reads JSON from a response's .data
        def __init__(self, d):
            self.data = json.dumps(d)

    obj = api.deserialize(Response(data), model)
    return api.sanitize_for_serialization(obj)


def test_the_pytorchjob_manifest_reads_into_the_operators_models():
    """Kubeflow training operator v1.9 (PyPI kubeflow-training, models generated from its
    OpenAPI spec): the manifest survives a round trip through KubeflowOrgV1PyTorchJob."""
    training = pytest.importorskip("kubeflow.training", reason="kubeflow-training is not installed (dev extra)")
    cmd = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=2, devices_per_node=8, format="kubernetes",
                            accelerator="hpu", image="registry.example/workbench:1", max_restarts=3)
    job = cmd.pytorchjob()
    assert _roundtrip(job, "KubeflowOrgV1PyTorchJob", training.ApiClient()) == job
    import yaml

    docs = [d for d in yaml.safe_load_all(cmd.kubernetes)]
    assert [d["kind"] for d in docs] == ["PyTorchJob", "MPIJob"] and docs[0] == job
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Master": 1, "Worker": 1}
    container = specs["Master"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["resources"]["limits"]["habana.ai/gaudi"] == "8"
    assert container["command"] == [
        "torchrun", "--nnodes=2", "--nproc_per_node=8", "--rdzv_backend=c10d",
        "--rdzv_endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)", f"--rdzv_id={job['metadata']['name']}",
        "--max_restarts=3", f"--log_dir={cmd.run_dir}/logs", "--redirects=3", "-m", "workbench.scaleout.worker", cmd.run_dir]
    assert container["env"] == [{"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"}]
    assert "&id" not in cmd.kubernetes, "plain YAML: no anchors shared between replicas"
    spec = json.loads((Path(cmd.run_dir) / "spec.json").read_text())
    assert spec["args"]["device"] == "hpu", "the workers train on the Gaudi cards the pods request"
    mount = container["volumeMounts"][0]["mountPath"]
    assert cmd.run_dir.startswith(mount + "/"), "the run directory is on the shared volume"
    gpus = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=1, devices_per_node=4, format="kubernetes",
                             accelerator="cuda", image="x").pytorchjob()
    assert list(gpus["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    assert gpus["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"] == \
        {"limits": {"nvidia.com/gpu": "4"}}


def _check_mpijob(job: dict) -> list[str]:
    """The MPI operator's own checks on an MPIJob, written from kubeflow/mpi-operator at commit
    caa3c47fc42eb762635f78045ec0fcd1a89eb038 (v0.8.2): pkg/apis/kubeflow/validation/validation.go
    (names, replica specs, policies) and the v2beta1 CRD, manifests/base/kubeflow.org_mpijobs.yaml
    (the fields a spec and a replica spec may have). Returns the problems found."""
    import re

    problems = []
    if (job.get("apiVersion"), job.get("kind")) != ("kubeflow.org/v2beta1", "MPIJob"):
        problems.append("not a kubeflow.org/v2beta1 MPIJob")
    spec = job.get("spec", {})
    known = {"launcherCreationPolicy", "mpiImplementation", "mpiReplicaSpecs", "runLauncherAsWorker", "runPolicy",
             "slotsPerWorker", "sshAuthMountPath"}
    problems += [f"spec.{k} is not a field" for k in set(spec) - known]
    replicas = spec.get("mpiReplicaSpecs") or {}
    workers = (replicas.get("Worker") or {}).get("replicas", 1)
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", f"{job['metadata']['name']}-worker-{workers - 1}") or \
            len(f"{job['metadata']['name']}-worker-{workers - 1}") > 63:
        problems.append("metadata.name: the last worker's hostname is not a DNS-1035 label")
    if not isinstance(spec.get("slotsPerWorker"), int) or spec["slotsPerWorker"] < 0:
        problems.append("spec.slotsPerWorker: required, not negative")
    if spec.get("runPolicy", {}).get("cleanPodPolicy") not in ("None", "Running", "All"):
        problems.append("spec.runPolicy.cleanPodPolicy: required, one of None, Running, All")
    if not spec.get("sshAuthMountPath"):
        problems.append("spec.sshAuthMountPath: required")
    if spec.get("mpiImplementation") not in ("OpenMPI", "Intel", "MPICH"):
        problems.append("spec.mpiImplementation: one of OpenMPI, Intel, MPICH")
    if "Launcher" not in replicas:
        problems.append("spec.mpiReplicaSpecs[Launcher]: required")
    for role, rs in replicas.items():
        problems += [f"{role}.{k} is not a field" for k in set(rs) - {"replicas", "restartPolicy", "template"}]
        if not isinstance(rs.get("replicas"), int):
            problems.append(f"{role}.replicas: required")
        if rs.get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append(f"{role}.restartPolicy: one of Never, OnFailure")
        if not rs.get("template", {}).get("spec", {}).get("containers"):
            problems.append(f"{role}.template.spec.containers: at least one")
    if replicas.get("Launcher", {}).get("replicas") != 1:
        problems.append("Launcher.replicas: must be 1")
    if workers < 1:
        problems.append("Worker.replicas: at least 1")
    return problems


def test_the_mpijob_manifest_passes_the_mpi_operators_checks(tmp_path):
    kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes client is not installed (dev extra)")
    cmd = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=2, devices_per_node=8, format="kubernetes",
                            accelerator="hpu", image="registry.example/workbench:1", port=29501, max_restarts=1)
    job = cmd.mpijob()
    assert _check_mpijob(job) == []
    broken = json.loads(json.dumps(job))
    broken["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    broken["spec"]["slotsPerWorkers"] = 1
    assert _check_mpijob(broken) == ["spec.slotsPerWorkers is not a field", "Launcher.replicas: must be 1"]
    api = kubernetes.client.ApiClient()
    for role, rs in job["spec"]["mpiReplicaSpecs"].items():  # pod templates: Kubernetes' own core/v1 models
        assert _roundtrip(rs["template"], "V1PodTemplateSpec", api) == rs["template"], role
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"]["habana.ai/gaudi"] == "8"
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert "resources" not in launcher, "the launcher only runs mpirun: no devices"
    assert launcher["args"][launcher["args"].index("-np") + 1] == "2" and job["spec"]["slotsPerWorker"] == 1
    # what mpirun runs on each Worker, run by bash with a stand-in torchrun: Open MPI's rank 0 hosts the rendezvous
    assert launcher["args"][-3:-1] == ["bash", "-c"]
    (tmp_path / "torchrun").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                                       "print(json.dumps(sys.argv[1:] + [os.environ.get('TORCH_DISABLE_SHARE_RDZV_TCP_STORE')]))\n")
    (tmp_path / "torchrun").chmod(0o755)
    name = job["metadata"]["name"]
    for rank in (0, 1):
        env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "OMPI_COMM_WORLD_RANK": str(rank)}
        argv = json.loads(subprocess.run(["bash", "-c", launcher["args"][-1]], env=env, capture_output=True,
                                         text=True, check=True).stdout)
        assert argv[:5] == ["--nnodes=2", "--nproc_per_node=8", "--rdzv_backend=c10d",
                            f"--rdzv_endpoint={name}-worker-0.{name}:29501", f"--rdzv_id={name}"]
        assert argv[5:7] == [f"--rdzv_conf=is_host={int(rank == 0)}", "--max_restarts=1"]
        assert argv[-4:] == ["-m", "workbench.scaleout.worker", cmd.run_dir, "1"], "the store opt-out reaches torchrun"


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, message", [
    (dict(format="helm"), "unknown format 'helm'; known: shell, slurm, kubernetes"),
    (dict(nodes=0), "nodes must be a whole number of machines, at least 1; got 0: pass a count such as nodes=2"),
    (dict(devices_per_node=0), "devices_per_node must be a whole number of worker processes per machine, at least 1; got 0"),
    (dict(hosts=["a"]), "nodes=2 but 1 hosts given; list one host per node"),
    (dict(hosts=None), "nodes=2 but no hosts given"),
    (dict(hosts="a,b"), "hosts must be a list of host names, one per node, got the string 'a,b': "
                        "pass hosts=['a', 'b']"),  # was "nodes=2 but 3 hosts given": its letters
    (dict(strategy="ZeRO-3"), "unknown strategy 'ZeRO-3' (ZeRO is DeepSpeed's: strategy='deepspeed', "
                              "zero_stage=3); known: ddp, deepspeed"),
    (dict(format="slurm"), "hosts= is for format='shell'; with format='slurm' the hosts are the allocation's nodes"),
    (dict(format="kubernetes", hosts=None), "format='kubernetes' needs image="),
    (dict(max_restarts=-1), "max_restarts must be 0 or more; got -1"),
    (dict(strategy="deepspeed", max_restarts=1), "max_restarts needs torchrun"),
    (dict(format="slurm", hosts=None, accelerator="tpu"), "unknown device 'tpu'; known: hpu, cuda, cpu"),
    # each was rendered into the job files before: a port no node can dial, a host name that is
    # no name (quoted, so run nowhere, but a rendezvous nobody reaches), an image nothing pulls
    (dict(port=70000), "port must be a TCP port, 1 to 65535, got 70000: e.g. port=29500"),
    (dict(port="29500"), "port must be a TCP port, 1 to 65535, got '29500'"),
    (dict(port=0), "port must be a TCP port, 1 to 65535, got 0"),  # each node would pick its own
    (dict(hosts=["a;rm -rf /", "b"]), "hosts must be names as `hostname` prints them, or IPs; got 'a;rm -rf /'"),
    (dict(hosts=["node a", "b"]), "hosts must be names as `hostname` prints them, or IPs; got 'node a'"),
    (dict(image="registry/x:1"), "image= is for format='kubernetes' (pods); leave it out for 'shell'"),
])
def test_bad_launch_command_arguments_name_the_fix(kwargs, message):
    args = {"nodes": 2, "devices_per_node": 8, "hosts": ["a", "b"], **kwargs}
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        wb.launch_command("gpt2-tiny", "docstrings-lm", **args)
    assert not list(Path("runs").glob("*")), "nothing is prepared for a bad call"


def test_bad_max_restarts_for_launch():
    with pytest.raises(ValueError, match="max_restarts must be 0 or more; got -2"):
        wb.launch("gpt2-tiny", "docstrings-lm", devices=2, max_restarts=-2)
