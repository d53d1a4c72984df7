"""Launch files: what starts one run on several machines, rendered as text (run nowhere here):
the ``torchrun`` line, DeepSpeed's hostfile and command, a Slurm script, and Kubeflow's
PyTorchJob and the MPI operator's MPIJob (the form Intel's Gaudi-on-Kubernetes guide uses).
Every form runs the same worker, ``python -m workbench.scaleout.worker RUN_DIR``.
"""

from __future__ import annotations

import numbers
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends.registry import backend

FORMATS = ("shell", "slurm", "kubernetes")
WORKER = ("-m", "workbench.scaleout.worker")
# the PersistentVolumeClaim that holds the run directories (shared storage)
CLAIM = "workbench-runs"
STOP_BEFORE_LIMIT = 120  # seconds before a Slurm time limit at which the run is asked to stop
# a host name (RFC 1123's characters, and '_' as /etc/hosts allows), or an IPv4 or IPv6 address
HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[?[0-9A-Fa-f:.]+\]?")
TORCHRUN_PORT = 23456  # the PyTorchJob operator's default port (PyTorchJobDefaultPort)


def worker_args(run_dir: str | Path, trust_remote_code: bool = False) -> list[str]:
    """The arguments after ``python``/``torchrun`` that run one worker of ``run_dir``;
    ``trust_remote_code`` is the caller's, never read back from the run directory."""
    return [*WORKER, str(run_dir), *(["--trust-remote-code"] if trust_remote_code else [])]


def restart_env(max_restarts: int) -> dict[str, str]:
    """The environment torchrun needs for restarts that work (none without restarts): torchrun
    2.x keeps its rendezvous store across restarts (dynamic_rendezvous.py), so a restarted
    group could dial a dead rank's port; opting out gives every attempt a fresh store."""
    return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if max_restarts else {}


def check_count(name: str, value, what: str) -> None:
    """Refuse a count of ``what`` that is not a whole number of at least 1 (a bool, a string,
    2.5, None), naming the argument, the value and the fix."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        text = str(value).strip()  # "2" and 2.0 say which count was meant
        meant = isinstance(value, (str, float)) and re.fullmatch(r"[1-9][0-9]*(\.0*)?", text)
        fix = f"{name}={int(float(text))}" if meant else f"a count such as {name}=2"
        raise ValueError(
            f"{name} must be a whole number of {what}, at least 1; got {value!r}: pass {fix}"
        )


def check(
    nodes: int,
    devices_per_node: int,
    hosts: list[str] | None,
    format: str,
    strategy: str,
    max_restarts: int,
    image: str | None,
    port: int,
) -> None:
    """One clear error for the first bad argument of ``wb.launch_command``."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; known: {', '.join(FORMATS)}")
    check_count("nodes", nodes, "machines")
    check_count("devices_per_node", devices_per_node, "worker processes per machine")
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be 0 or more; got {max_restarts!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be a TCP port, 1 to 65535, got {port!r}: e.g. port=29500")
    if isinstance(hosts, str):  # a string's letters are not hosts
        raise ValueError(
            f"hosts must be a list of host names, one per node, got the string {hosts!r}: pass "
            f"hosts={hosts.replace(',', ' ').split()!r}"
        )
    bad = [h for h in hosts or () if not isinstance(h, str) or not HOST.fullmatch(h)]
    if bad:
        raise ValueError(f"hosts must be names as `hostname` prints them, or IPs; got {bad[0]!r}")
    if image is not None and format != "kubernetes":
        raise ValueError(f"image= is for format='kubernetes' (pods); leave it out for {format!r}")
    if format == "shell":
        if hosts is None or len(hosts) != nodes:
            given = "no" if hosts is None else len(hosts)
            raise ValueError(
                f"nodes={nodes} but {given} hosts given; list one host per node "
                f"(hosts=['node-0', 'node-1', ...])"
            )
        if strategy == "deepspeed" and max_restarts:
            raise ValueError(
                "max_restarts needs torchrun: DeepSpeed's own launcher restarts nothing. "
                "Start the printed .torchrun line instead (it runs DeepSpeed runs too)"
            )
    elif hosts is not None:
        where = (
            "the allocation's nodes (scontrol show hostnames)"
            if format == "slurm"
            else "the operator's pods"
        )
        raise ValueError(
            f"hosts= is for format='shell'; with format={format!r} the hosts are {where}: leave "
            "it out"
        )
    if format == "kubernetes" and not image:
        raise ValueError(
            "format='kubernetes' needs image='registry/name:tag': a container image with "
            "this package installed (on Gaudi, built on Intel's PyTorch container)"
        )


def _dns_label(name: str, room: int) -> str:
    """``name`` as a DNS-1035 label (lowercase letters, digits, '-', starting with a letter)
    short enough that ``room`` more characters still fit in 63."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    label = label if label[:1].isalpha() else f"wb-{label}"
    return label[: 63 - room].rstrip("-")


def _yaml(doc: dict) -> str:
    import yaml  # PyYAML comes with transformers and papermill

    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


@dataclass
class LaunchCommand:
    """The commands and job files that run one training job on several machines: ``str()`` is
    the chosen ``format``, every form an attribute (``torchrun``, ``hostfile``/``deepspeed``,
    ``slurm``, ``pytorchjob()``/``mpijob()``, ``kubernetes``). Nothing is run here.
    """

    run_dir: str
    nodes: int
    devices_per_node: int
    hosts: list[str] | None
    strategy: str
    port: int
    max_restarts: int = 0
    format: str = "shell"
    accelerator: str = "cpu"  # the nodes' device kind: which resource the launch files request
    image: str | None = None
    claim: str = CLAIM
    trust_remote_code: bool = False  # the caller's model said so (workers get the flag)
    # the interpreter the Slurm script starts torchrun with: the one that prepared the run (a
    # venv on the cluster's shared storage), so no node depends on the submitter's PATH
    python: str = field(default_factory=lambda: sys.executable)
    partition: str | None = None  # Slurm's partition (default: the cluster's default one)

    # ------------------------------------------------------------------ torchrun
    def torchrun_args(
        self, endpoint: str | None = None, rdzv_id: str | None = None, conf: str | None = None
    ) -> list[str]:
        """torchrun's argv for one node: c10d rendezvous at ``endpoint`` (default: the first
        host), restarts, each rank's output under ``logs/`` (no node rank: c10d assigns them)."""
        endpoint = endpoint or f"{(self.hosts or ['localhost'])[0]}:{self.port}"
        extra = [f"--rdzv_conf={conf}"] if conf else []
        extra += [f"--max_restarts={self.max_restarts}"] if self.max_restarts else []
        return [
            "torchrun",
            f"--nnodes={self.nodes}",
            f"--nproc_per_node={self.devices_per_node}",
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint={endpoint}",
            f"--rdzv_id={rdzv_id or Path(self.run_dir).name}",
            *extra,
            f"--log_dir={Path(self.run_dir) / 'logs'}",
            "--redirects=3",
            *worker_args(self.run_dir, self.trust_remote_code),
        ]

    @property
    def env(self) -> dict[str, str]:
        """Environment every torchrun agent needs (``restart_env``)."""
        return restart_env(self.max_restarts)

    def _exports(self, prefix: str = "", sep: str = " ") -> str:
        return "".join(f"{prefix}{k}={shlex.quote(v)}{sep}" for k, v in self.env.items())

    @property
    def torchrun(self) -> str:
        """The command to start on every node (c10d rendezvous on the first host)."""
        return self._exports() + shlex.join(self.torchrun_args())

    # ------------------------------------------------------------------ DeepSpeed
    @property
    def hostfile(self) -> str:
        """DeepSpeed's hostfile (one line per host: DeepSpeed refuses a host named twice)."""
        return "".join(f"{h} slots={self.devices_per_node}\n" for h in self.hosts or [])

    def _deepspeed_args(self, *extra: str) -> list[str]:
        return [
            "deepspeed",
            "--hostfile",
            "hostfile",
            *extra,
            f"--num_nodes={self.nodes}",
            f"--num_gpus={self.devices_per_node}",
            f"--master_addr={(self.hosts or ['localhost'])[0]}",
            f"--master_port={self.port}",
            "--no_local_rank",
            "--module",
            *worker_args(self.run_dir, self.trust_remote_code)[1:],
        ]

    @property
    def deepspeed(self) -> str:
        """The command to start once, on the first host (it reaches the others with pdsh over
        ssh). ``--no_local_rank``: the worker reads LOCAL_RANK from its environment."""
        return shlex.join(self._deepspeed_args())

    def deepspeed_node(self, rank: int) -> str:
        """The command to start on node ``rank`` instead, without ssh (DeepSpeed's
        ``--no_ssh --node_rank``: every node starts its own, as with torchrun)."""
        return shlex.join(self._deepspeed_args("--no_ssh", f"--node_rank={rank}"))

    # ------------------------------------------------------------------ Slurm
    @property
    def slurm(self) -> str:
        """An ``sbatch`` script: one task per node, each a torchrun agent started by ``srun``,
        meeting at the allocation's first node."""
        gres = backend(self.accelerator).deploy.slurm_gres
        name = _dns_label(Path(self.run_dir).name, 0)
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name={name}",
            f"#SBATCH --nodes={self.nodes}",
            "#SBATCH --ntasks-per-node=1",
        ]
        if gres:
            lines.append(f"#SBATCH --gres={gres}:{self.devices_per_node}")
        elif self.accelerator != "cpu":
            lines.append(
                f"# {backend(self.accelerator).title}: add your site's GRES line for "
                f"{self.devices_per_node} devices per node (Slurm has no standard name for them)"
            )
        if self.partition:
            lines.append(f"#SBATCH --partition={self.partition}")
        lines += [
            f"#SBATCH --output={Path(self.run_dir) / 'slurm-%j.out'}",
            # before a time limit ends the job, Slurm signals this script, which asks every
            # rank to stop with a checkpoint; so does `scancel --batch --signal=USR1 JOB`
            f"#SBATCH --signal=B:USR1@{STOP_BEFORE_LIMIT}",
            "",
            "# The run directory must be on storage every node mounts at this same path:",
            "# the workers read their specs from it and rank 0 writes the events there.",
            "set -euo pipefail",
            *self._exports("export ", "\n").splitlines(),  # srun passes the environment on
            f"RUN_DIR={shlex.quote(self.run_dir)}",
            "# torchrun as a module of this Python: a node need not have it on its PATH",
            f"PYTHON={shlex.quote(self.python)}",
            'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        ]
        args = self.torchrun_args(endpoint="ENDPOINT", rdzv_id="RDZV_ID")
        args = ["PYTHON", "-m", "torch.distributed.run", *args[1:]]
        args = [a.replace(self.run_dir, "RUN_DIR") for a in args]
        text = shlex.join(
            ["srun", f"--nodes={self.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1", *args]
        )
        text = (
            text.replace("ENDPOINT", f'"$HEAD_NODE:{self.port}"')
            .replace("RDZV_ID", '"$SLURM_JOB_ID"')
            .replace("RUN_DIR", '"$RUN_DIR"')
            .replace("PYTHON", '"$PYTHON"', 1)
        )
        # srun in the background: bash runs a trap only between commands, and `wait`
        # returns early (status > 128) when one runs, so wait again until srun has ended
        ending = [
            "trap 'touch \"$RUN_DIR/STOP\"' USR1",
            text + " &",
            "SRUN=$!",
            "while true; do",
            '  STATUS=0; wait "$SRUN" || STATUS=$?',
            '  kill -0 "$SRUN" 2>/dev/null || break',
            "done",
            'exit "$STATUS"',
        ]
        return "\n".join(lines + ending) + "\n"

    # ------------------------------------------------------------------ Kubernetes
    def _devices(self) -> dict[str, Any]:
        """A device container's resources and security context: the devices, plus what the
        backend's pods need beside them (``k8s_pod``: hugepages, memory, capabilities)."""
        b = backend(self.accelerator)
        if not b.deploy.k8s_resource:
            return {}
        needs = b.deploy.k8s_pod
        limits = {b.deploy.k8s_resource: str(self.devices_per_node)}  # a quantity
        # hugepages are requested and limited alike, and a pod with them needs a memory figure
        # (Kubernetes' hugepages rules); the device is an extended resource, limits only
        pairs = (("memory", needs.memory), ("hugepages-2Mi", needs.hugepages_2mi))
        sized = {k: v for k, v in pairs if v}
        out: dict[str, Any] = {
            "resources": {
                "limits": {**limits, **sized},
                **({"requests": dict(sized)} if sized else {}),
            }
        }
        if needs.capabilities:
            out["securityContext"] = {"capabilities": {"add": list(needs.capabilities)}}
        return out

    def _pod(self, container: dict[str, Any], devices: bool = False) -> dict[str, Any]:
        """A pod template with the run directories' volume mounted where the run directory is;
        ``devices``: the pod drives the devices, with what the backend's pods need."""
        needs = backend(self.accelerator).deploy.k8s_pod if devices else None
        mounts = [{"name": "runs", "mountPath": str(Path(self.run_dir).parent)}]
        volumes: list[dict[str, Any]] = [
            {"name": "runs", "persistentVolumeClaim": {"claimName": self.claim}}
        ]
        if needs is not None and needs.shm:  # the default /dev/shm is 64 MB
            mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
            volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        spec: dict[str, Any] = {
            "containers": [{**container, "image": self.image, "volumeMounts": mounts}],
            "volumes": volumes,
        }
        if needs is not None and needs.host_ipc:
            spec = {"hostIPC": True, **spec}
        return {"spec": spec}

    def pytorchjob(self) -> dict[str, Any]:
        """A Kubeflow training-operator PyTorchJob (kubeflow.org/v1): one Master and
        ``nodes - 1`` Workers, one torchrun agent a pod, meeting at a c10d rendezvous on the
        master (the operator sets PET_MASTER_ADDR and PET_MASTER_PORT in every pod)."""
        name = _dns_label(Path(self.run_dir).name, len("-worker-") + 5)
        command = self.torchrun_args(endpoint="$(PET_MASTER_ADDR):$(PET_MASTER_PORT)", rdzv_id=name)

        def replicas(n: int) -> dict[str, Any]:  # restarts: torchrun's, inside the pods
            container = {
                "name": "pytorch",
                "command": list(command),  # the operator finds its container by this name
                **(
                    {"env": [{"name": k, "value": v} for k, v in self.env.items()]}
                    if self.env
                    else {}
                ),
                "ports": [{"name": "pytorchjob-port", "containerPort": TORCHRUN_PORT}],
                **self._devices(),
            }
            return {
                "replicas": n,
                "restartPolicy": "Never",
                "template": self._pod(container, devices=True),
            }

        specs = {
            "Master": replicas(1),
            **({"Worker": replicas(self.nodes - 1)} if self.nodes > 1 else {}),
        }
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name},
            "spec": {
                "nprocPerNode": str(self.devices_per_node),
                "runPolicy": {"cleanPodPolicy": "None"},
                "pytorchReplicaSpecs": specs,
            },
        }

    def mpijob(self) -> dict[str, Any]:
        """An MPI-operator MPIJob (kubeflow.org/v2beta1): ``nodes`` Worker pods running sshd
        and a Launcher whose ``mpirun`` starts one torchrun agent per Worker, meeting at a c10d
        rendezvous on Worker 0 (``<job>-worker-0.<job>`` in the job's Service)."""
        name = _dns_label(Path(self.run_dir).name, len("-worker-") + len(str(self.nodes - 1)))
        args = self.torchrun_args(
            endpoint=f"{name}-worker-0.{name}:{self.port}", rdzv_id=name, conf="is_host=IS_HOST"
        )
        agent = (
            self._exports("export ", "; ")
            + "exec "
            + shlex.join(args).replace("IS_HOST", "$((OMPI_COMM_WORLD_RANK==0))")
        )
        launcher = {
            "name": "mpi-launcher",
            "command": ["mpirun"],
            "args": [
                "--allow-run-as-root",
                "-np",
                str(self.nodes),
                "--map-by",
                "ppr:1:node",
                "-x",
                "PATH",
                "bash",
                "-c",
                agent,
            ],
        }
        # An image's sshd has no host keys until they are made (Intel's MPIJob examples run
        # ssh-keygen -A before sshd); Debian and Ubuntu's sshd also needs /run/sshd.
        worker = {
            "name": "mpi-worker",
            "command": ["/bin/bash", "-c"],
            "args": ["ssh-keygen -A && mkdir -p /run/sshd && exec /usr/sbin/sshd -De"],
            **self._devices(),
        }
        return {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": name},
            "spec": {
                "slotsPerWorker": 1,
                "runPolicy": {"cleanPodPolicy": "Running"},
                "mpiImplementation": "OpenMPI",
                "sshAuthMountPath": "/root/.ssh",
                "mpiReplicaSpecs": {
                    "Launcher": {
                        "replicas": 1,
                        "restartPolicy": "OnFailure",
                        "template": self._pod(launcher),
                    },
                    "Worker": {
                        "replicas": self.nodes,
                        "restartPolicy": "Never",
                        "template": self._pod(worker, devices=True),
                    },
                },
            },
        }

    @property
    def kubernetes(self) -> str:
        """Both manifests as YAML documents: apply one of them, for the operator your cluster
        runs."""
        needs = backend(self.accelerator).deploy.k8s_pod
        sizes = (
            f"# device pods ask for memory {needs.memory} and hugepages-2Mi "
            f"{needs.hugepages_2mi} (Intel's Kubernetes quick start): set them to what your "
            "nodes reserve\n"
            if needs.hugepages_2mi
            else ""
        )
        return (
            f"# PyTorchJob for Kubeflow's training operator; the run directory on PVC "
            f"{self.claim!r}\n{sizes}"
            f"{_yaml(self.pytorchjob())}---\n"
            "# or: MPIJob for the MPI operator (Intel's Gaudi-on-Kubernetes guide uses this form)\n"
            f"{_yaml(self.mpijob())}"
        )

    # ------------------------------------------------------------------ display
    def __str__(self) -> str:
        if self.format == "slurm":
            return self.slurm
        if self.format == "kubernetes":
            return self.kubernetes
        assert self.hosts is not None  # format='shell' names them (checked when made)
        if self.strategy == "deepspeed":
            nodes = "".join(
                f"# on {h} (node {i}):\n{self.deepspeed_node(i)}\n"
                for i, h in enumerate(self.hosts)
            )
            return (
                f"# hostfile\n{self.hostfile}\n# on {self.hosts[0]} (reaching the others over "
                "ssh):\n"
                f"{self.deepspeed}\n\n# or without ssh, the hostfile on every node:\n{nodes}"
            )
        return f"# on each of {', '.join(self.hosts)}:\n{self.torchrun}\n"

    def _repr_markdown_(self) -> str:
        return f"```{'yaml' if self.format == 'kubernetes' else 'bash'}\n{self}```"
