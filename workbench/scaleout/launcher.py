"""Scale-out from a notebook: ``torchrun`` workers (DDP or DeepSpeed), never a home-made engine.

``wb.launch`` writes the run directory (specs cross the process boundary, not live objects),
starts ``torchrun``, and follows rank 0's events into the dashboard.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from .. import runargs
from ..backends.hpu import bridge_installed
from ..backends.registry import backend
from ..backends.registry import device as probe_device
from ..backends.torchrun import child_env
from ..rundir.events import EventReader
from ..rundir.run import STOP_FILE
from ..rundir.writer import RunWriter, hand_over
from ..training.engine import Run, prepare, training
from ..training.interrupts import Interrupts
from ..training.preparation import launch_extra
from ..views.dashboard import attach
from . import launchfiles
from .launchfiles import LaunchCommand, worker_args

if TYPE_CHECKING:
    from ..training.overrides import RunOptions  # pyright: ignore[reportMissingModuleSource] a stub only

STRATEGIES = ("ddp", "deepspeed")
POLL = 0.25  # seconds between looks at rank 0's event log


def deepspeed_config(
    zero_stage: int, precision: str = "auto", offload: bool = False
) -> dict[str, Any]:
    """A ZeRO configuration for the Trainer's ``deepspeed=`` argument ("auto" values are
    filled in by transformers from the TrainingArguments)."""
    if zero_stage not in (1, 2, 3):
        raise ValueError(f"zero_stage must be 1, 2 or 3 for DeepSpeed, got {zero_stage}")
    zero: dict[str, Any] = {"stage": zero_stage, "overlap_comm": True, "contiguous_gradients": True}
    if zero_stage == 3:
        zero.update(
            {
                "stage3_gather_16bit_weights_on_model_save": True,
                "stage3_prefetch_bucket_size": "auto",
                "stage3_param_persistence_threshold": "auto",
            }
        )
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if zero_stage == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        # "auto" is the run's max_grad_norm: DeepSpeed clips. No "optimizer" section: ZeRO wraps
        # the Trainer's own optimizer, with its parameter groups (on Gaudi torch's AdamW)
        "gradient_clipping": "auto",
        "zero_optimization": zero,
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
    }


# Intel's DeepSpeed install instructions (docs.habana.ai, DeepSpeed User Guide): the fork at
# the tag of the Gaudi software release; "installing public DeepSpeed packages is not supported"
GAUDI_DEEPSPEED = (
    "pip install git+https://github.com/HabanaAI/DeepSpeed.git@<your Gaudi software version, "
    "e.g. 1.22.0> (on Gaudi only Intel's fork is supported, not PyPI's deepspeed)"
)


def check_deepspeed() -> None:
    """Refuse strategy="deepspeed" where DeepSpeed is not installed, saying how to get it (on
    Gaudi: Intel's fork), before anything is written."""
    try:
        found = importlib.util.find_spec("deepspeed") is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
        found = False
    if found:
        return
    fix = GAUDI_DEEPSPEED if bridge_installed() else "pip install 'gaudi-workbench[deepspeed]'"
    raise ImportError(f"strategy='deepspeed' needs DeepSpeed, which is not installed here: {fix}")


def _prepare(
    model,
    data,
    devices: int,
    strategy: str,
    zero_stage: int | None,
    train_args: dict,
    target: str | None = None,
) -> Run:
    if strategy not in STRATEGIES:
        stage = re.fullmatch(r"zero\D*([123])", str(strategy).lower())  # "ZeRO-2", "zero stage 2"
        hint = (
            f" (ZeRO is DeepSpeed's: strategy='deepspeed', zero_stage={stage[1]})" if stage else ""
        )
        raise ValueError(f"unknown strategy {strategy!r}{hint}; known: {', '.join(STRATEGIES)}")
    launchfiles.check_count("devices", devices, "devices (one worker process each)")
    if strategy == "deepspeed":
        check_deepspeed()
        train_args["deepspeed"] = deepspeed_config(zero_stage or 2)
    elif zero_stage:
        raise ValueError("ZeRO stages come with DeepSpeed: pass strategy='deepspeed'")
    return prepare(
        model,
        data,
        extra_spec=launch_extra(devices, strategy, zero_stage),
        target=target,
        **train_args,
    )


def _digest(line: str) -> int:
    return int.from_bytes(hashlib.blake2b(line.encode(), digest_size=8).digest(), "little")


class _Follower:
    """Replays the events rank 0 appends to ``events.jsonl`` to this process's subscribers;
    from a log a restarted rank 0 rewrote, only what it had not replayed yet."""

    def __init__(self, run: Run):
        self.run, self.reader = run, EventReader(run.log.path)
        # a 64-bit digest of each event replayed so far: enough to find where a rewritten log
        # departs from what was replayed, without keeping every event of a long run in memory
        self.seen: list[int] = []
        self.rewritten = False

    def poll(self) -> None:
        events, started_over = self.reader.read()  # whole lines only: a partial one waits
        self.rewritten = self.rewritten or started_over
        if self.rewritten and events:  # the kept prefix was replayed already
            digests = [_digest(json.dumps(e, sort_keys=True)) for e in events]
            kept = next(
                (i for i, (a, b) in enumerate(zip(digests, self.seen)) if a != b),
                min(len(events), len(self.seen)),
            )
            self.seen, events, self.rewritten = self.seen[:kept], events[kept:], False
        for event in events:
            self.seen.append(_digest(json.dumps(event, sort_keys=True)))
            for fn in list(self.run.log.subscribers):
                fn(event)


def _die_with_parent() -> None:
    """In the torchrun child: SIGTERM it when this process dies, however it dies (Linux prctl
    PR_SET_PDEATHSIG: it fires when the thread that started torchrun ends)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _exit_codes(launcher_log: str) -> dict[int, int]:
    """rank -> exit code of every failed worker in torchrun's failure report."""
    return {
        int(r): int(c)
        for r, c in re.findall(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)", launcher_log)
    }


def _error_files(run: Run) -> dict[int, dict]:
    """rank -> the error a worker recorded (``@record`` writes torchrun's per-worker
    ``error.json``: the exception as ``"Type: message"``, its traceback and a timestamp), with
    the file's ``st_mtime_ns`` under ``"written_ns"``: the file's own timestamp counts whole
    seconds, and the rank whose peer died reports in the same second as the rank that raised."""
    found = {}
    attempts = [
        p.name for p in run.path.glob("logs/**/attempt_*") if p.name.split("_")[-1].isdigit()
    ]
    # torchrun's last try
    last = max(attempts, key=lambda name: int(name.split("_")[-1]), default="attempt_0")
    for path in sorted(run.path.glob(f"logs/**/{last}/*/error.json")):
        try:
            message = json.loads(path.read_text())["message"]
        except (ValueError, KeyError, TypeError):  # not JSON, or not an object with "message"
            continue
        # one node: local rank = rank; a record without its message string (written by
        # another handler than torch elastic's) names no cause and is passed over
        if isinstance(message, dict) and isinstance(message.get("message"), str):
            found[int(path.parent.name)] = {**message, "written_ns": path.stat().st_mtime_ns}
    return found


def _failure(run: Run, launcher_log: str) -> tuple[int | None, str]:
    """(rank, message) of the failure that caused the others (torchrun SIGTERMs the rest): a
    rank killed by another signal first, then the rank whose recorded exception came first."""
    codes, errors = _exit_codes(launcher_log), _error_files(run)
    killed = sorted(r for r, c in codes.items() if c < 0 and -c != signal.SIGTERM)
    if killed:
        rank = killed[0]
        try:
            name = signal.Signals(-codes[rank]).name
        except ValueError:
            name = f"signal {-codes[rank]}"
        return rank, f"rank {rank} failed (exit code {codes[rank]}, killed by {name})"
    if errors:
        rank = min(errors, key=lambda r: errors[r]["written_ns"])
        return (
            rank,
            f"rank {rank} failed (exit code {codes.get(rank, 1)}): {errors[rank]['message']}",
        )
    if codes:
        rank = min(codes, key=lambda r: (codes[r] == -signal.SIGTERM, r))
        return rank, f"rank {rank} failed (exit code {codes[rank]})"
    return (
        None,
        "torchrun failed before any worker reported (see launcher.log in the run directory)",
    )


def _supervise(run: Run, proc: subprocess.Popen, log_path: Path) -> Run:
    follower = _Follower(run)
    stop_sent = False
    try:
        with training(run), Interrupts(run):
            while proc.poll() is None:
                follower.poll()
                if run.stop_flag.is_set() and not stop_sent:
                    (run.path / STOP_FILE).touch()  # every rank reads it at its next logging step
                    stop_sent = True
                time.sleep(POLL)
    except KeyboardInterrupt:  # a second interrupt: stop the workers now
        proc.terminate()
        proc.wait()
    except BaseException:  # the supervisor itself failed: never leave workers training unwatched
        proc.terminate()
        proc.wait()
        raise
    follower.poll()
    if proc.returncode != 0:
        rank, message = _failure(run, log_path.read_text(errors="replace"))
        restarts = sum(e.get("phase") == "restart" for e in run.events)
        if restarts:  # torchrun gave up: every restart it was allowed failed too
            message += f", after {restarts} restart{'s' * (restarts > 1)} from the last checkpoint"
        # every worker has exited, so the lock is free: the launcher is now the run's writer
        writer = RunWriter(run).claim("record the failure")
        try:
            writer.end({"status": "failed", "error": message, "failed_rank": rank})
        finally:
            writer.release()
        summary = run.summary
        if not any(e.get("phase") == "end" for e in run.events):
            run.log.emit({"phase": "end", "step": summary.get("step", 0), "status": "failed"})
        run.error = RuntimeError(f"{run.name}: {message}")
    return run


SCHEDULERS = ("slurm",)


@runargs.spelled_out()
def launch(
    model,
    data,
    *,
    devices: int = 2,
    strategy: str = "ddp",
    zero_stage: int | None = None,
    max_restarts: int = 0,
    nodes: int = 1,
    scheduler: str | None = None,
    partition: str | None = None,
    live: str | bool = "auto",
    background: bool = False,
    **options: Unpack[RunOptions],
) -> Run:
    """Train with ``devices`` worker processes under ``torchrun`` on this machine.

    Parameters
    ----------
    model, data
        As for ``wb.train``: specs or catalog/bundled names.
    devices : int
        Number of worker processes (one per HPU/GPU; on CPU, processes with gloo).
    strategy : {"ddp", "deepspeed"}
        torch DistributedDataParallel, or DeepSpeed ZeRO through the Trainer.
    zero_stage : {1, 2, 3}, optional
        ZeRO stage for ``strategy="deepspeed"`` (default 2).
    max_restarts : int
        torchrun's ``--max_restarts``: when a worker dies, all of them restart, up to this
        many times, and continue from the newest checkpoint whose files parse (losing at most
        ``save_every`` steps); rank 0 logs a ``restart`` event naming the attempt.
    nodes : int
        Machines, each with ``devices`` workers: more than one needs ``scheduler``.
    scheduler : {"slurm"}, optional
        Submit the script ``wb.launch_command(format="slurm")`` renders with ``sbatch`` from
        this machine (the cluster's login node) instead of starting torchrun here; this
        process follows the job and the run live. The run directory must be on storage every
        node mounts.
    partition : str, optional
        Slurm's partition (default: the cluster's default).
    max_steps, batch_size, lr, ...
        As for ``wb.train`` (``batch_size`` per device).
    **trainer_overrides
        TrainingArguments fields, as for ``wb.train``.

    Each rank's stdout and stderr are kept under ``run.path / "logs"``. Stop stops all ranks
    at the same step with a checkpoint; a crashed rank fails the run, named with its error.
    """
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be 0 or more; got {max_restarts!r}")
    runargs.check_live(live)
    train_args = dict(options)
    if scheduler is not None or nodes != 1 or partition is not None:
        return _submit(
            model, data, devices, strategy, zero_stage, max_restarts, nodes, scheduler,
            partition, train_args, live, background,
        )  # fmt: skip
    run = _prepare(model, data, devices, strategy, zero_stage, train_args)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={devices}",
        f"--max_restarts={max_restarts}",
        f"--log_dir={run.path / 'logs'}",
        "--redirects=3",
        # the spec this call just wrote from the caller's model: the caller's decision
        *worker_args(run.path, run.spec.model["trust_remote_code"]),
    ]
    log_path = run.path / "launcher.log"
    run.dashboard = attach(run, live, background)
    log = open(log_path, "w")
    # no HLS_MODULE_ID of this kernel; HABANA_VISIBLE_MODULES naming free cards when some
    # are held (prepare chose them, or refused before anything was written)
    launch_spec = run.spec.launch
    env = child_env(
        {**launchfiles.restart_env(max_restarts), **(launch_spec.env if launch_spec else {})}
    )
    proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=Path.cwd(),
        env=env,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    run.process = proc
    if background:

        def target():
            _supervise(run, proc, log_path)
            log.close()

        run.thread = threading.Thread(
            target=target, name=f"workbench-launch-{run.name}", daemon=True
        )
        run.thread.start()
        return run
    try:
        _supervise(run, proc, log_path)
    finally:
        log.close()
    if run.error is not None:
        raise run.error
    return run


def _submit(
    model, data, devices, strategy, zero_stage, max_restarts, nodes, scheduler, partition,
    train_args, live, background,
) -> Run:  # fmt: skip
    """``launch(scheduler="slurm")``: check, prepare, submit, follow (``slurm``)."""
    from . import slurm

    if scheduler not in SCHEDULERS:
        raise ValueError(
            f"scheduler={scheduler!r}: "
            + (f"unknown; known: {', '.join(SCHEDULERS)}" if scheduler else "")
            + ("" if scheduler else f"nodes={nodes!r} or partition= needs scheduler='slurm'")
            + " (or render the job for your cluster with wb.launch_command)"
        )
    launchfiles.check_count("nodes", nodes, "machines")
    launchfiles.check_count("devices", devices, "devices per node (one worker process each)")
    if partition is not None and (not isinstance(partition, str) or not partition.strip()):
        raise ValueError(f"partition must be a Slurm partition's name, got {partition!r}")
    device_arg = train_args.get("device", "auto")
    # the nodes' kind: device= names it; "auto" takes this machine's (probed: no card taken)
    kind = backend(device_arg.split(":")[0]).kind if device_arg != "auto" else probe_device().kind
    form: dict[str, Any] = dict(nodes=nodes, devices_per_node=devices, hosts=None,
                strategy=strategy, port=29500, max_restarts=max_restarts, format="slurm",
                accelerator=kind, partition=partition)  # fmt: skip
    slurm.check(LaunchCommand(run_dir="/run-not-written-yet", **form))  # before any write
    run = _prepare(model, data, nodes * devices, strategy, zero_stage, train_args, kind)
    hand_over(run)  # Slurm's workers claim it: this process ending is no failure
    cmd = LaunchCommand(
        run_dir=str(run.path.resolve()),
        trust_remote_code=run.spec.model["trust_remote_code"],  # written by this call
        **form,
    )
    job = slurm.submit(run, cmd)
    print(f"submitted {run.name} as slurm job {job}")
    run.dashboard = attach(run, live, background)
    follower = _Follower(run)
    if background:

        def target():
            with contextlib.suppress(BaseException):  # kept on run.error; run.wait() re-raises
                slurm.follow(run, follower)

        run.thread = threading.Thread(target=target, name=f"workbench-slurm-{job}", daemon=True)
        run.thread.start()
        return run
    slurm.follow(run, follower)
    if run.error is not None:
        raise run.error
    return run


@runargs.spelled_out()
def launch_command(
    model,
    data,
    *,
    nodes: int,
    devices_per_node: int,
    hosts: list[str] | None = None,
    strategy: str = "ddp",
    zero_stage: int | None = None,
    port: int = 29500,
    max_restarts: int = 0,
    format: str = "shell",
    accelerator: str | None = None,
    image: str | None = None,
    **options: Unpack[RunOptions],
) -> LaunchCommand:
    """Prepare a run directory and render what starts it on ``nodes`` machines with
    ``devices_per_node`` devices each; nothing is run.

    Parameters
    ----------
    format : {"shell", "slurm", "kubernetes"}
        ``shell``: the torchrun line for every host in ``hosts`` (or DeepSpeed's hostfile and
        command); ``slurm``: an ``sbatch`` script; ``kubernetes``: a PyTorchJob and an MPIJob
        manifest (needs ``image``).
    max_restarts : int
        torchrun's ``--max_restarts``: the workers restart from the last checkpoint this often.
    accelerator : {"hpu", "cuda", "cpu"}, optional
        The nodes' devices (default: this machine's): the resources the job files request,
        and the device the run's workers train on.
    strategy, zero_stage, max_steps, batch_size, lr, ...
        As for ``wb.launch`` and ``wb.train`` (``batch_size`` per device).

    The run directory must be on a filesystem every node sees (or copied to the same path
    on each): the workers read their specs from it and rank 0 writes the events there.
    """
    train_args = dict(options)
    launchfiles.check(nodes, devices_per_node, hosts, format, strategy, max_restarts, image, port)
    kind = backend(accelerator).kind if accelerator is not None else None
    # the nodes' devices, not this machine's: the workers train on what the job files request
    run = _prepare(model, data, nodes * devices_per_node, strategy, zero_stage, train_args, kind)
    hand_over(run)  # torchrun starts it elsewhere, later: this process exiting is no failure
    kind = run.spec.args.device.split(":")[0]
    return LaunchCommand(
        str(run.path.resolve()),
        nodes,
        devices_per_node,
        list(hosts) if hosts else None,
        strategy,
        port,
        max_restarts,
        format,
        kind,
        image,
        trust_remote_code=run.spec.model["trust_remote_code"],  # written by this call
    )
