"""``wb.train``: transformers' Trainer, composed (never subclassed) with device-aware defaults.
``execute`` builds the Trainer from the run's spec and trains; ``Run`` is the live handle.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from .. import runargs
from ..backends import cards
from ..backends.monitor import Unavailable
from ..backends.registry import DeviceInfo, backend
from ..backends.registry import device as pick_device
from ..backends.torchrun import local_rank, world
from ..catalog.modelspec import ModelSpec
from ..data.dataset import DataSpec
from ..liblogs import quiet_libraries
from ..rundir import run as runs
from ..rundir.spec import RunSpec
from ..rundir.writer import ABORTED, DiskFull, Resumption, RunWriter, disk_full_message
from ..views.dashboard import Dashboard, attach
from . import preparation
from .interrupts import Interrupts, Terminated
from .trainer import build, error_text, outcome, tied_keys_quiet
from .trainer import summary as end_summary

if TYPE_CHECKING:
    from transformers import Trainer

    from .overrides import RunOptions  # pyright: ignore[reportMissingModuleSource] a stub only

_ACTIVE: list[Run] = []  # runs training in this process, newest last (for %wb stop)


class Run(runs.RunDir):
    """A run directory plus, in the process that trains it, the live handle: ``stop``,
    ``wait`` and ``resume``. ``wb.Run.open(path)`` reopens any run; ``run.RunDir`` is the
    read side.
    """

    def __init__(self, path: str | Path):
        super().__init__(path)
        self.stop_flag = threading.Event()
        self.thread: threading.Thread | None = None
        self.trainer: Trainer | None = None  # while this process trains the run
        self.dashboard: Dashboard | None = None
        self.callbacks: list = []  # extra TrainerCallbacks for this process's training
        self.process: subprocess.Popen | None = None  # a launched run's torchrun
        self.error: BaseException | None = None
        # whether the model's own Python files may run: the caller's decision (wb.train's
        # model, resume's argument, the worker's --trust-remote-code), never spec.json's
        self.trust_remote_code = False
        # a resume in this process: the run as it found it, put back if it fails before a step
        self.resuming: Resumption | None = None

    @property
    def is_training(self) -> bool:
        return self in _ACTIVE

    def stop(self) -> None:
        """Stop after the current step and save a checkpoint (thread-safe; from another
        process it writes the run's STOP file, which the training process reads)."""
        self.stop_flag.set()
        if not self.is_training:
            super().stop()

    def wait(self, timeout: float | None = None) -> Run:
        """Wait for a background run to finish; re-raises its error.

        With ``timeout`` (seconds), raises ``TimeoutError`` if the run is still training then
        (it goes on; ``run.stop()`` stops it)."""
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():
                raise TimeoutError(
                    f"{self.name} is still training after {timeout:g} s "
                    f"(step {self.step}); run.stop() stops it"
                )
        if self.error is not None and not isinstance(self.error, KeyboardInterrupt):
            raise self.error
        return self

    def resume(
        self,
        max_steps: int | None = None,
        *,
        live: str | bool = "auto",
        background: bool = False,
        callbacks: list | None = None,
        trust_remote_code: bool = False,
        **overrides,
    ) -> Run:
        """Continue from the last checkpoint (weights, optimizer, scheduler, data order).

        Parameters
        ----------
        max_steps : int, optional
            New total number of steps (default: the original target; a run that reached it
            needs a larger one).
        live, background, callbacks
            As for ``wb.train``.
        trust_remote_code : bool
            Let the model's own Python files (its config's ``auto_map``) run. Only this
            argument turns it on: a run directory is data, and a spec.json that asks for it
            is refused until you pass it.
        **overrides
            TrainingArguments fields for the rest of the run.
        """
        return resume(
            self,
            max_steps,
            live=live,
            background=background,
            callbacks=callbacks,
            trust_remote_code=trust_remote_code,
            **overrides,
        )


def active() -> Run | None:
    """The newest run training in this process, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def training(run: Run):
    """Mark ``run`` as training in this process for the duration (``%wb stop`` finds it)."""
    _ACTIVE.append(run)
    try:
        yield run
    finally:
        if run in _ACTIVE:
            _ACTIVE.remove(run)


# --------------------------------------------------------------------------- running
def _device_for(spec: RunSpec, size: int) -> DeviceInfo:
    device = pick_device(spec.args.device)
    if size > 1 and device.backend.deploy.rank_index:
        device = pick_device(f"{device.kind}:{local_rank()}")
    return device


def _no_card(error: BaseException) -> BaseException:
    """The bridge's refusal of a card (every one held) said with the node's cards, their
    holders and what to do (``cards.no_card``); any other error as it is."""
    if cards.ACQUIRE_FAILED not in str(error):
        return error
    said = cards.no_card(backend("hpu").monitoring.cards(), error) or error
    said.__cause__ = error if said is not error else None
    return said


def execute(run: Run, resume_from: Path | None = None, writer: RunWriter | None = None) -> Run:
    """Train ``run`` from its spec in this process (a torchrun worker calls this too).

    Rank 0 is the run's one writer: it holds the lock (``writer``, if the caller claimed it)
    until the end. However the run ends, its summary says so and the lock is released; a
    full disk raises ``DiskFull``."""
    rank, size = world()
    if rank == 0:
        writer = writer or RunWriter(run).claim()
    else:  # only rank 0 writes the run's events and summary
        run.log, writer = runs.NullLog(), None
    try:
        if writer is not None and resume_from is not None:  # before Trainer's rotation sees them
            for name, why in writer.discard_after(resume_from).items():
                print(f"removed {name} ({why}): a save cut short", file=sys.stderr)
        return _train(run, resume_from, writer, size)
    finally:
        if writer is not None:  # released already, unless something failed on the way
            writer.release()


def _train(run: Run, resume_from: Path | None, writer: RunWriter | None, size: int) -> Run:
    try:
        device = _device_for(run.spec, size)
        if writer is not None:
            writer.begin_on(device, size)  # the first device call: on Gaudi it takes a card
            with contextlib.suppress(Unavailable):  # listing the holders records this hold
                device.backend.monitoring.cards()  # for the node's other users (backends.holds)
    except BaseException as e:  # before training: the run ends failed, and says why
        e = _no_card(e)
        if writer is None:
            run.error = e
            raise e
        error = disk_full_message(e, run) or f"{type(e).__name__}: {e}"
        if run.resuming is not None:
            lost = _take_back(run, writer, error)
        else:
            lost = writer.finish(
                {"status": "failed", "error": error, "traceback": traceback.format_exc()}, run.log
            )
        run.error = _ending(e, lost, error)
        raise run.error  # noqa: B904 (_ending set its cause: the error itself, or the one it names)
    run.stop_flag.clear()
    run.error = None
    t0 = runs.monotonic()
    status, error, tb = "completed", None, None
    events = restore = raised = lost = None
    with training(run), quiet_libraries():
        try:
            trainer, events, restore = build(
                run, device, run.stop_flag, run.callbacks, trust_remote_code=run.trust_remote_code
            )
            run.trainer = trainer
            with Interrupts(run), tied_keys_quiet(trainer.model):
                try:
                    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
                except KeyboardInterrupt:
                    status, error = "stopped", ABORTED
                if error is None:
                    status, error = outcome(run, run.stop_flag, events, status)
                # the final evaluation, unless the last step has just had one (eval_every)
                if (
                    status != "failed"
                    and error is None
                    and events.eval_step != trainer.state.global_step
                ):
                    try:
                        trainer.evaluate()
                    except Terminated as e:  # after the run's end (and its checkpoint): it stands
                        run.error = raised = e
        except BaseException as e:  # recorded, then raised
            status, tb = "failed", traceback.format_exc()
            error = disk_full_message(e, run) or error_text(e, device)
            run.error = raised = e
            if isinstance(e, KeyboardInterrupt):
                status = "stopped"
        # the model leaves as it came (generation pads prompts: masks needed)
        if restore is not None:
            restore()
        if writer is not None and status != "completed" and _nothing_trained(run):
            lost = _take_back(run, writer, error or status)
        elif writer is not None:
            summary = end_summary(
                run, run.trainer, device, events, status, error, tb, runs.monotonic() - t0
            )
            # the end event's subscribers see a run that has ended
            lost = writer.finish(
                summary, run.log, ended=lambda: run in _ACTIVE and _ACTIVE.remove(run)
            )
        run.resuming = None  # trained (or ended): nothing to put back
    cause = raised if raised is not None else lost
    if cause is not None:
        run.error = _ending(
            cause, lost, error if cause is raised else disk_full_message(cause, run)
        )
        raise run.error
    return run


def _nothing_trained(run: Run) -> bool:
    """Whether ``run`` is a resume that ended before it trained a step."""
    if run.resuming is None:
        return False
    trainer = run.trainer
    return trainer is None or trainer.state.global_step <= run.resuming.step


def _take_back(run: Run, writer: RunWriter, error: str) -> OSError | None:
    """A resume that failed before a step: the run as it was (status, step, summary, events),
    the failure in its spec's ``resumes``; the live view is told it ended."""
    before, run.resuming = run.resuming, None
    assert before is not None  # _nothing_trained: a resume
    lost = writer.take_back(before, error, run.log)
    run.refresh()
    if run in _ACTIVE:
        _ACTIVE.remove(run)
    run.log.tell({"phase": "end", "step": before.step, "status": "failed", "error": error})
    return lost


def _ending(cause: BaseException, lost: OSError | None, error: str | None) -> BaseException:
    """What ended a run, to raise: ``DiskFull`` (from ``cause``) if the disk filled, else
    ``cause`` (the error, or ``lost``: the final summary could not be written)."""
    if error is not None and error.startswith("disk full"):
        full = DiskFull(error)
        full.__cause__, full.__suppress_context__ = cause, True  # as `raise full from cause`
        return full
    if lost is not None and cause is not lost:
        cause.add_note(f"(the run's summary could not be written either: {lost}; it reads failed)")
    return cause


def _start(
    run: Run, resume_from: Path | None, background: bool, writer: RunWriter | None = None
) -> Run:
    if not background:
        return execute(run, resume_from, writer)

    def target():
        with contextlib.suppress(BaseException):  # kept on run.error; run.wait() re-raises
            execute(run, resume_from, writer)

    run.thread = threading.Thread(target=target, name=f"workbench-{run.name}", daemon=True)
    try:
        run.thread.start()
    except BaseException:
        if writer is not None:
            writer.release()
        raise
    return run


@runargs.spelled_out()
def train(
    model: str | ModelSpec,
    data: str | DataSpec,
    *,
    live: str | bool = "auto",
    background: bool = False,
    callbacks: list | None = None,
    **options: Unpack[RunOptions],
) -> Run:
    """Train ``model`` on ``data`` with transformers' Trainer; returns the Run.

    Parameters
    ----------
    model : str or ModelSpec
        ``wb.model(...)`` or a catalog name such as ``"bert-tiny"``.
    data : str or DataSpec
        ``wb.dataset(...)`` or a bundled name such as ``"docstrings-topic"``.
    max_steps, epochs
        Length of training (default: one epoch).
    batch_size : int
        Per-device batch size.
    lr : float, optional
        Default 1e-3 for random-init models, 5e-5 for pretrained weights.
    precision : {"auto", "fp32", "bf16", "fp16"}
        ``auto`` takes the device's preference (bf16 on Gaudi and recent GPUs, fp32 on CPU).
    device : str
        ``auto``, ``hpu``, ``cuda``, ``cpu``.
    eval_every, save_every, log_every : int, optional
        Steps between evaluations (default: only at the end), checkpoints and events.
        Without ``log_every``, about 50 events per run, one at least every 2 s in one
        process, and (on one GPU or HPU) none sooner than 0.5 s after the last.
    run_dir : path, optional
        Where the run directory is created (default ``./runs``).
    live : {"auto", True, False} or callable
        Live progress display; ``auto`` shows the live dashboard where a front end can
        draw it, a static picture in papermill, a text line in a terminal. A callable
        ``live(run)`` attaches a display of your own (``run.subscribe(fn)``).
    background : bool
        Return at once and train in a thread (``run.stop()``, ``run.wait()``).
    max_length : int
        Sequences are truncated to this many tokens.
    padding : {"auto", "longest", "max_length", "bucketed", "packed"}
        How batches are shaped. ``bucketed``: at most ``buckets`` length buckets chosen to
        minimise padding, every batch padded to its bucket and to full size (few static
        shapes). ``packed`` (causal LM): documents concatenated into full ``max_length``
        blocks. ``longest``: each batch padded to its longest row. ``max_length``: one static
        shape. ``auto``: packed for causal LM, bucketed for classification, else longest
        (max_length on Gaudi).
    buckets : int
        Most distinct sequence lengths with ``padding="bucketed"``.
    packing : {"concat", "isolated"}
        With ``padding="packed"``: ``concat`` trains on the documents as one stream
        (continuous positions, causal attention across documents, SDPA without a mask:
        GPT-2's recipe, the fastest); ``isolated`` keeps each document its own sequence
        (positions restart, attention and loss stay inside it, through a block-diagonal mask).
    compile : bool, optional
        ``torch.compile`` the model (default: on in HPU eager mode only).
    mode : {"eager", "lazy", "compile"}, optional
        Execution mode. ``lazy`` is Gaudi's legacy graph mode (``mark_step``); it is fixed
        per process, so it must be chosen before anything touches the HPU (else a clear
        error says to restart the kernel). ``compile`` is eager plus ``torch.compile``.
    report_to : str or list, optional
        ``"tensorboard"`` or ``"mlflow"``; nothing by default.
    cache_latents : bool
        Text to image: encode every image and caption once (under
        ``$WORKBENCH_CACHE/latents``, reused by runs with the same data, parts, resolution and
        precision) and train the UNet alone; refused with ``crop="random"`` or ``flip=True``.
    callbacks : list of transformers.TrainerCallback, optional
        Extra callbacks for the Trainer (not saved in the run; pass them again to resume).
    sample_prompts, sample_every, sample_steps
        Text-to-image runs: every ``sample_every`` steps (default ``eval_every``) and at the
        last, the prompts sampled with the run's ``seed`` in ``sample_steps`` steps into one
        grid, shown by the dashboard. No prompts (the default): no grids.
    **trainer_overrides
        Any ``transformers.TrainingArguments`` field (e.g. ``max_grad_norm=1.0``).

    Examples
    --------
    >>> import workbench as wb
    >>> run = wb.train("bert-tiny", "docstrings-topic", max_steps=20, live=False)  # doctest: +SKIP
    >>> run.status  # doctest: +SKIP
    'completed'
    """
    runargs.check_live(live)
    if "resume_from_checkpoint" in options:
        raise ValueError(
            "wb.train(resume_from_checkpoint=...) would be ignored: continue a run "
            "with wb.Run.open(run_dir).resume(), or start from its weights with "
            "wb.model(family, size=<model dir>)"
        )
    run = prepare(model, data, **options)
    run.trust_remote_code = isinstance(model, ModelSpec) and model.trust_remote_code  # the caller's
    run.callbacks = list(callbacks or [])
    run.dashboard = attach(run, live, background)
    return _start(run, None, background)


def prepare(model: str | ModelSpec, data: str | DataSpec, **options) -> Run:
    """Check the arguments, create the run directory and its spec.json; train nothing
    (``wb.train`` runs the result here, ``wb.launch`` in torchrun workers)."""
    runs.check_root(options.get("run_dir"))  # before the data is read
    return Run(preparation.prepare(model, data, **options))


def untrusted(run: runs.RunDir, trust_remote_code: bool, fix: str) -> str | None:
    """Why ``run`` cannot be trained without ``trust_remote_code`` from the caller: its
    spec.json asks for the model's own code, and a run directory (data, shared and downloaded)
    never turns that on; None when it does not ask, or the caller trusts it."""
    if trust_remote_code or not (run.path / "spec.json").exists():
        return None
    model = run.spec.model
    if not model.get("trust_remote_code"):
        return None
    source = model.get("source") or model.get("tokenizer") or "its model"
    return (
        f"{run.name}'s spec.json asks for trust_remote_code=True: training it imports Python "
        f"files that {source!r} names. A run directory cannot turn that on, only you can: "
        f"if you trust that code, {fix}"
    )


def resume(
    run: Run,
    max_steps: int | None = None,
    *,
    live: str | bool = "auto",
    background: bool = False,
    callbacks: list | None = None,
    trust_remote_code: bool = False,
    **overrides,
) -> Run:
    """Continue ``run`` from its last checkpoint (``Run.resume`` documents the arguments);
    the lock, the checkpoint and the overrides are checked before anything is written."""
    attached = run.spec.attached if (run.path / "spec.json").exists() else None
    if attached:  # a run of the user's own Trainer (wb.attach): its spec cannot rebuild it
        raise ValueError(
            f"{run.name} cannot be resumed by resume(): {attached['why']}. "
            f"Resume it with {attached['resume']}"
        )
    if not isinstance(trust_remote_code, bool):
        raise TypeError(f"trust_remote_code must be True or False, got {trust_remote_code!r}")
    runargs.check_live(live)
    refusal = untrusted(run, trust_remote_code, "resume(trust_remote_code=True)")
    if refusal is not None:
        raise ValueError(refusal)
    run.trust_remote_code = bool(trust_remote_code)
    if run.status == "prepared":  # claiming its lock would mark it as started
        raise FileNotFoundError(f"{run.name} has no checkpoint to resume from: it never started")
    writer = RunWriter(run).claim("resume")
    before = None  # (summary, spec) once the writes begin
    try:  # every way out of here but training releases the lock
        ckpt = run.last_checkpoint
        if ckpt is None:
            raise FileNotFoundError(
                f"{run.name} has no checkpoint to resume from; start a new run with wb.train(...)"
            )
        for name, why in run.broken_checkpoints.items():
            if int(name.split("-")[-1]) > int(ckpt.name.split("-")[-1]):
                print(
                    f"{name} cannot be resumed from ({why}): resuming from {ckpt.name}",
                    file=sys.stderr,
                )
        spec = preparation.resume_spec(run, ckpt, max_steps, overrides)
        run.callbacks = list(callbacks or [])
        # before the writes: a display that fails changes nothing
        run.dashboard = attach(run, live, background)
        before = run.summary, run.spec
        # "running" first: a kill from here on leaves a run that reads failed (its lock free),
        # never its old end (completed at step 6) under a spec that asks for more (60)
        step = int(ckpt.name.split("-")[-1])
        events = run.log.path.read_bytes() if run.log.path.exists() else b""
        resuming = Resumption(*before, events, spec.resumes[-1], step)
        writer.begin({"max_steps": spec.args.max_steps})
        writer.respec(spec)
        run.log.truncate_after(step)
        run.resuming = resuming
    except BaseException as e:
        if before is not None:  # a write failed (a full disk): the run stays as it was
            with contextlib.suppress(OSError):
                writer.put_back(*before)
        writer.release()
        full = disk_full_message(e, run)
        if full is not None:
            raise DiskFull(full) from e
        raise
    return _start(run, ckpt, background, writer)
