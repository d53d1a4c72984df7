"""``wb.profile``: torch.profiler over a few training steps of the real engine, after warm-up;
it leaves ``profile/trace.json`` (Perfetto, chrome://tracing) and ``profile/tensorboard/``.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from transformers import TrainerCallback

from .. import runargs
from ..backends.registry import backend
from ..liblogs import native_stderr_without

if TYPE_CHECKING:
    from .overrides import RunOptions  # pyright: ignore[reportMissingModuleSource] a stub only

# What torch's profiler (kineto, c10) prints straight to file descriptor 2 on every profile,
# whatever KINETO_LOG_LEVEL says: its start and stop markers, and that memory allocated
# before the profile is freed inside it (always so: the model and optimizer predate it).
NOISE = re.compile(
    r"(USDT|STAGE):.*SyncActivityProfilerHandler\.cpp|"
    r"Memory block of unknown size was allocated before the profiling started"
)


def _activities(kind: str) -> list:
    """The torch.profiler activities the backend table names for ``kind`` that this torch
    build can record; a warning names any it cannot (the trace then lacks device time)."""
    import warnings

    import torch.profiler
    from torch._C._profiler import ProfilerActivity  # torch's own, where the enum is defined

    # Read at call time: the 1.19 bridge replaces torch.profiler.ProfilerActivity with its own
    # Enum and torch.profiler.profile with a subclass (gaudi-pytorch-bridge @ 5a56187,
    # activity_profiler/activity_profiler.py) whose members supported_activities() never
    # lists: compare by name, and take HPU as recordable when the bridge's enum is in place.
    enum = torch.profiler.ProfilerActivity
    have = {a.name for a in torch.profiler.supported_activities()}
    if enum is not ProfilerActivity and hasattr(enum, "HPU"):
        have.add("HPU")
    # Recent torch builds define ProfilerActivity.HPU (2.6 does not), but kineto records it
    # only where the bridge registered its profiler (Intel's build); elsewhere it is refused.
    activities = backend(kind).policy.profiler_activities
    names = [n.upper() for n in activities if hasattr(enum, n.upper())]
    missing = [n for n in names if n not in have]
    if missing:
        warnings.warn(
            f"this torch build cannot record {', '.join(missing)} activity: the profile "
            f"holds CPU time only (on Gaudi, use the torch of Intel's container)",
            stacklevel=3,
        )
    return [getattr(enum, n) for n in names if n in have]


class _ProfileSteps(TrainerCallback):
    """A TrainerCallback that runs torch.profiler on a schedule: warm-up, then active steps,
    writing into the run directory's ``profile`` folder."""

    def __init__(self, kind: str, warmup: int, steps: int):
        self.kind, self.warmup, self.steps = kind, warmup, steps
        self.out: Path | None = None  # <run directory>/profile, known when training begins
        self.prof, self.recorded = None, ()
        self.quiet = contextlib.ExitStack()  # the profiler's own lines held back while it records

    def _ready(self, prof) -> None:
        # A trace can be saved once: save it, then copy it under the name TensorBoard's
        # profile plugin looks for (<worker>.<time>.pt.trace.json).
        import os
        import shutil
        import socket
        import time

        assert self.out is not None  # set as training begins, before the profiler starts
        prof.export_chrome_trace(str(self.out / "trace.json"))
        tb = self.out / "tensorboard"
        tb.mkdir(parents=True, exist_ok=True)
        worker = f"{socket.gethostname()}_{os.getpid()}"
        shutil.copy(self.out / "trace.json", tb / f"{worker}.{time.time_ns()}.pt.trace.json")

    def on_train_begin(self, args, state, control, **kw):
        from torch.profiler import profile, schedule

        self.out = Path(args.output_dir).parent / "profile"  # output_dir: <run>/checkpoints
        self.out.mkdir(parents=True, exist_ok=True)
        activities = _activities(self.kind)
        self.recorded = tuple(a.name.lower() for a in activities)
        self.prof = profile(
            activities=activities,
            record_shapes=True,
            profile_memory=True,
            schedule=schedule(wait=0, warmup=self.warmup, active=self.steps, repeat=1),
            on_trace_ready=self._ready,
        )
        self.quiet.enter_context(native_stderr_without(NOISE.search))
        self.prof.__enter__()

    def on_step_end(self, args, state, control, **kw):
        if self.prof is not None:
            self.prof.step()

    def on_train_end(self, args, state, control, **kw):
        if self.prof is not None:
            self.prof.__exit__(None, None, None)
        self.quiet.close()


@dataclass
class Profile:
    """What ``wb.profile`` found: the top-ops table and where the traces are."""

    run: Any
    table: Any  # pandas DataFrame
    trace: Path
    tensorboard: Path
    activities: tuple[str, ...] = ()  # what was recorded: "cpu", plus "hpu" or "cuda" where it can

    def _repr_html_(self) -> str:
        head = (
            f"<div style='font:12px sans-serif'>Chrome/Perfetto trace: <code>{self.trace}</code>; "
            f"TensorBoard: <code>tensorboard --logdir {self.tensorboard}</code></div>"
        )
        return head + self.table.to_html(index=False, float_format=lambda v: f"{v:,.3f}")

    def __repr__(self) -> str:
        return f"Profile({self.run.name}, trace={self.trace})\n{self.table.to_string(index=False)}"


def top_ops(prof, n: int = 15, device_kind: str = "cpu"):
    """The ``n`` ops with the most self time, by op and input shapes (a DataFrame).

    ``self_ms`` is device time where the backend has a device activity. On Gaudi the bridge
    merges its device events into the trace file only, so ``self_ms`` is likely zero there:
    read ``profile/trace.json`` or TensorBoard instead."""
    import pandas as pd

    rows = []
    # a device activity beside the CPU
    on_device = len(backend(device_kind).policy.profiler_activities) > 1
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key.startswith("ProfilerStep"):  # the profiler's own per-step marker, not an op
            continue
        self_us = getattr(e, "self_device_time_total", 0) if on_device else e.self_cpu_time_total
        rows.append(
            {
                "op": e.key,
                "self_ms": self_us / 1000,
                "calls": e.count,
                "cpu_total_ms": e.cpu_time_total / 1000,
                "input_shapes": str(e.input_shapes)[:120] if e.input_shapes else "",
            }
        )
    df = pd.DataFrame(rows, columns=["op", "self_ms", "calls", "cpu_total_ms", "input_shapes"])
    return df.sort_values("self_ms", ascending=False).head(n).reset_index(drop=True)


SET_BY_PROFILE = ("max_steps", "eval_every")  # warmup + steps, and no evaluation


@runargs.spelled_out(*SET_BY_PROFILE)
def profile(
    model,
    data,
    *,
    steps: int = 5,
    warmup: int = 2,
    top: int = 15,
    live: str | bool = "auto",
    **options: Unpack[RunOptions],
) -> Profile:
    """Profile ``steps`` training steps after ``warmup`` steps of ``wb.train(model, data)``.

    Parameters
    ----------
    model, data
        As for ``wb.train``.
    steps, warmup : int
        Steps recorded, and steps run first and left out of the record.
    top : int
        Rows of the top-ops table.
    batch_size, max_length, device, ...
        As for ``wb.train`` (every argument but ``max_steps`` and ``eval_every``, which the
        profile sets); the run's ``name`` is ``"profile"`` unless given.
    **trainer_overrides
        TrainingArguments fields, as for ``wb.train``.
    """
    from ..backends.registry import device as pick_device
    from .engine import train

    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    for own in SET_BY_PROFILE:
        if own in options:
            raise ValueError(f"wb.profile sets {own}= itself: leave it out (steps=, warmup=)")
    train_args = {**options, "name": options.get("name") or "profile"}
    kind = pick_device(options.get("device", runargs.default("device"))).kind
    steps_cb = _ProfileSteps(kind, warmup, steps)
    try:
        run = train(
            model,
            data,
            max_steps=warmup + steps,
            callbacks=[steps_cb],
            eval_every=None,
            live=live,
            **train_args,
        )
    finally:  # a run that failed mid-way gets its stderr back too
        steps_cb.quiet.close()
    prof = steps_cb.prof
    out = run.path / "profile"
    return Profile(
        run=run,
        table=top_ops(prof, top, kind),
        trace=out / "trace.json",
        tensorboard=out / "tensorboard",
        activities=steps_cb.recorded,
    )
