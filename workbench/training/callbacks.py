"""The Trainer's callbacks: events, sample grids, stopping across ranks, HPU lazy-mode steps.

They read and write only what they are handed (an event log, a stop flag, the device
record), never a run.
"""

from __future__ import annotations

import base64
import math
import statistics
import threading
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..rundir.run import EventLog, monotonic

# tasks whose evaluation loss is a per-token cross-entropy: perplexity is exp(loss)
LANGUAGE_MODELS = ("causal_lm", "masked_lm", "seq2seq")


class Events(TrainerCallback):
    """Emits events at logging steps and evaluations; stops on request or on NaN."""

    def __init__(
        self,
        log: EventLog,
        stop: threading.Event,
        task: str,
        device,
        counter,  # samples, tokens, shapes: a CountingCollator, or wb.callback's own steps
        batch_size: int,
        warmup_steps: int,
        world_size: int = 1,
        min_interval: float = 0.0,
        stop_file: Path | None = None,
        save_last: bool = True,
        gap=None,
    ):
        self.log, self.stop, self.task, self.device, self.counter = log, stop, task, device, counter
        # wb.train checkpoints its last step; an attached Trainer as its arguments say, and on stop
        self.save_last = save_last
        self.stop_file = stop_file  # another process asks this one to stop by creating it
        # Reading the loss waits for every queued step: with ``min_interval`` (s) a logging
        # step sooner after the last event is skipped unless it ends the run or checkpoints
        self.min_interval = min_interval
        # ``gap(elapsed)``: seconds without an event after which a step logs however far the
        # next logging step is (None: only at logging steps). A clock read per step, no sync.
        self.gap = gap
        self._last_log: float | None = None
        self.world_size = world_size  # every rank sees its own shard: throughput x ranks
        self.batch_size, self.warmup_steps = batch_size, warmup_steps
        self.nan_step: int | None = None
        self.intervals: list[dict] = []
        self.last: dict[str, Any] = {}
        self.eval: dict[str, float] = {}
        self.eval_step: int | None = None  # the step of the last evaluation
        self._mark = None  # (time, step, samples, tokens) at the start of the interval
        self._restart = True
        self._warm: dict[str, Any] = {}  # the counts when warm-up ended (see counts())
        self._seen: dict[str, Any] = {}  # the counts at the last event
        self._breaks_before = 0  # dynamo's graph breaks in this process before the run
        self._graphs_before = 0  # and the graphs it compiled

    # the Trainer calls these -------------------------------------------------------
    def on_train_begin(self, args, state, control, **kw):
        self.max_steps = state.max_steps
        self.t_start = monotonic()
        self.log.emit(
            {
                "phase": "start",
                "step": state.global_step,
                "max_steps": state.max_steps,
                "device": self.device.kind,
                "mem_total": self.device.total_memory,
                "batch_size": self.batch_size,
                "world_size": self.world_size,
            }
        )
        self._restart = True
        # dynamo counts breaks per process: an earlier compiled run's are not this run's
        self._breaks_before = self.device.graph_breaks() or 0
        self._graphs_before = self.device.dynamo_graphs() or 0
        self._warm = self._counts(state.global_step)

    def on_step_begin(self, args, state, control, **kw):
        if self._restart:  # start timing after a start, an evaluation or a save
            self._restart = False
            self._mark = (monotonic(), state.global_step, self.counter.samples, self.counter.tokens)

    def on_step_end(self, args, state, control, **kw):
        self.counter.consume(args.gradient_accumulation_steps)
        last = state.global_step >= state.max_steps
        if self.stop_file is not None and self.stop_file.exists():
            self.stop.set()  # every step (one stat): a stop takes effect after this step
        stopping = self.stop.is_set()
        if stopping:
            control.should_training_stop = True
            last = True
        if last:  # always log and checkpoint the final step (NaN is checked at the log first)
            control.should_log = True
            control.should_save = control.should_save or self.save_last or stopping
        elif not control.should_log and self.gap is not None:
            now, since = monotonic(), self._last_log or self.t_start
            control.should_log = now - since >= self.gap(now - self.t_start)
        elif (
            control.should_log
            and not control.should_save
            and self._last_log is not None
            and monotonic() - self._last_log < self.min_interval
        ):
            control.should_log = False
        return control

    def on_log(self, args, state, control, logs=None, **kw):
        logs = logs or {}
        if "loss" not in logs:
            return control
        # No sync of our own: the Trainer has just read the loss as a float (.item(),
        # transformers 5 trainer.py:2257), so the host has waited for every queued step and
        # the clock reads the end of the interval (docs/gaudi.md, host syncs).
        now = monotonic()
        t0, s0, n0, k0 = self._mark or (
            now,
            state.global_step,
            self.counter.samples,
            self.counter.tokens,
        )
        dt = max(now - t0, 1e-9)
        steps = max(state.global_step - s0, 1)
        samples, tokens = self.counter.samples - n0, self.counter.tokens - k0
        mem = self.device.memory()
        counts = self._counts(state.global_step)  # host reads only: no device sync
        event = {
            "step": state.global_step,
            "phase": "warmup" if state.global_step <= self.warmup_steps else "train",
            "loss": logs["loss"],
            "lr": logs.get("learning_rate"),
            "grad_norm": logs.get("grad_norm"),  # transformers computes it at every optimizer step
            "epoch": logs.get("epoch"),
            "samples_per_s": self.world_size * samples / dt,
            "tokens_per_s": self.world_size * tokens / dt if tokens else None,
            "step_time": dt / steps,
            "mem_alloc": mem["allocated"],
            "mem_peak": mem["peak"],
            "compiles": counts["compiles"],
            "dynamo_graphs": counts["dynamo_graphs"],
            "cpu_fallbacks": counts["cpu_fallbacks"],
            "host_syncs": counts["host_syncs"],
            "graph_breaks": counts["graph_breaks"],
            "tokens_per_step": tokens / steps if tokens else None,
            **self.counter.stats(),
            "time": now - self.t_start,
        }
        self.log.emit(event)
        if event["phase"] == "warmup":
            self._warm = counts
        self._seen = counts
        self._last_log = now
        self.last = event
        self.intervals.append(event)
        self._mark = (monotonic(), state.global_step, self.counter.samples, self.counter.tokens)
        if not math.isfinite(logs["loss"]):
            self.nan_step = state.global_step
            control.should_training_stop = True
            control.should_save = False  # keep the last good checkpoint
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        metrics = dict(metrics or {})
        if "eval_loss" in metrics and self.task in LANGUAGE_MODELS:
            metrics["eval_perplexity"] = math.exp(min(metrics["eval_loss"], 50))
        keep = {
            k: v
            for k, v in metrics.items()
            if k != "epoch" and not k.endswith(("_runtime", "_per_second", "_steps_per_second"))
        }
        self.eval = {k.removeprefix("eval_"): v for k, v in keep.items()}
        self.eval_step = state.global_step
        self.log.emit(
            {"step": state.global_step, "phase": "eval", **keep, "time": monotonic() - self.t_start}
        )  # for the view's time axis
        self.counter.evaluated()
        self._restart = True

    def on_save(self, args, state, control, **kw):
        self._restart = True

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` spent outside training (sampling a grid) out of the throughput
        interval."""
        if self._mark is not None:
            t, *rest = self._mark
            self._mark = (t + seconds, *rest)

    def _counts(self, step: int) -> dict[str, Any]:
        ops = self.device.fallbacks()
        breaks = self.device.graph_breaks()
        return {
            "step": step,
            "fallback_ops": ops,
            "cpu_fallbacks": None if ops is None else sum(ops.values()),
            "host_syncs": self.device.host_syncs(),
            "compiles": self.device.compiles(),
            "dynamo_graphs": self.device.dynamo_graphs(),
            "graph_breaks": None if breaks is None else breaks - self._breaks_before,
        }

    def counts(self) -> dict[str, Any]:
        """What slows a step, counted from the end of warm-up to the last event: ``steps``,
        ``cpu_fallbacks``, ``fallback_ops`` (by op), ``host_syncs``, ``recompiles`` (the
        device's counter, else dynamo's graphs), ``graph_breaks`` (each None where the device
        cannot count it); ``graph_breaks_total`` counts warm-up too."""
        last = self._seen or self._warm  # what the events saw (not the final save's graphs)
        if not last:
            return {}
        warm = self._warm or last

        def grown(key: str) -> int | None:
            a, b = warm.get(key), last.get(key)
            return b - (a or 0) if b is not None else None

        ops = None
        if last["fallback_ops"] is not None:
            before = warm.get("fallback_ops") or {}
            ops = {k: n - before.get(k, 0) for k, n in last["fallback_ops"].items()}
            ops = {k: n for k, n in ops.items() if n}
        recompiles = grown("compiles") if last["compiles"] is not None else grown("dynamo_graphs")
        # graph breaks mean something only for a run torch.compile traced: dynamo's counters
        # are the process's, and an earlier compiled run leaves them set
        compiled = (last.get("dynamo_graphs") or 0) > self._graphs_before or bool(
            last.get("graph_breaks")
        )
        return {
            "steps": last["step"] - warm["step"],
            "cpu_fallbacks": None if ops is None else sum(ops.values()),
            "fallback_ops": ops,
            "host_syncs": grown("host_syncs"),
            "recompiles": recompiles,
            "graph_breaks": grown("graph_breaks") if compiled else None,
            "graph_breaks_total": last["graph_breaks"] if compiled else None,
        }

    def throughput(self) -> dict[str, float | None]:
        """Medians over the intervals after warm-up (all intervals if there are none)."""
        train = [e for e in self.intervals if e["phase"] == "train"] or self.intervals
        out = {}
        for key in ("samples_per_s", "tokens_per_s", "step_time"):
            vals = [e[key] for e in train if e.get(key) is not None]
            out[key] = statistics.median(vals) if vals else None
        return out


class Samples(TrainerCallback):
    """Text-to-image runs: at every ``every``-th step (None: none) and at the last, a grid of
    samples for fixed prompts and seed, one ``samples`` event (a base64 PNG). Train mode and
    the global random state are restored; the time sampling leaves the throughput. Main
    process only."""

    def __init__(
        self,
        log: EventLog,
        prompts: list[str],
        every: int | None,
        steps: int,
        seed: int,
        device,
        exclude=None,
    ):
        self.log, self.prompts, self.every = log, list(prompts), every
        self.steps, self.seed = steps, seed
        self.device, self.exclude = device, exclude
        self.t_start = monotonic()
        self.done: set[int] = set()  # steps sampled already (a stop request can repeat the last)

    def on_train_begin(self, args, state, control, **kw):
        self.t_start = monotonic()

    def due(self, state, control) -> bool:
        step = state.global_step
        if not state.is_world_process_zero or step in self.done:
            return False
        last = step >= state.max_steps or control.should_training_stop
        return bool(last or (self.every and step % self.every == 0))

    def on_step_end(self, args, state, control, model=None, **kw):
        if model is None or not self.due(state, control):
            return control
        import torch

        from ..diffusion.texttoimage import sample_grid

        # the queued training steps end first: their time is not the sampler's
        self.device.synchronize()
        t0 = monotonic()
        # the sampler draws its noise from a CPU generator of its own (seeded); the global
        # CPU generator (caption dropout, timesteps) is restored all the same
        with torch.random.fork_rng(devices=[]):
            png, columns = sample_grid(model, self.prompts, self.steps, self.seed)
        self.log.emit(
            {
                "phase": "samples",
                "step": state.global_step,
                "time": t0 - self.t_start,
                "prompts": self.prompts,
                "columns": columns,
                "image": base64.b64encode(png).decode("ascii"),
            }
        )
        self.done.add(state.global_step)
        if self.exclude is not None:
            self.exclude(monotonic() - t0)
        return control


class DistStop(TrainerCallback):
    """Across ranks, stop at the same step (else the others hang): every ``every`` steps and
    at the last, one all-reduce of each rank's stop request. ``stop_file``: None where the run
    directory is unknown; ``group``: the process group (None: the default one)."""

    def __init__(self, stop: threading.Event, stop_file: Path | None, every: int, group=None):
        self.stop, self.stop_file, self.every, self.group = stop, stop_file, every, group

    def on_step_end(self, args, state, control, **kw):
        if state.global_step % self.every and state.global_step < state.max_steps:
            return control
        import torch
        import torch.distributed as dist

        asked = self.stop_file is not None and self.stop_file.exists()
        local = self.stop.is_set() or asked
        device = "cpu" if self.group is not None else args.device
        flag = torch.tensor([1 if local else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        if flag.item():
            self.stop.set()
            control.should_training_stop = control.should_save = control.should_log = True
        return control


class MarkStep(TrainerCallback):
    """HPU lazy mode: run the graph so far where optimum-habana's trainer does, so that one
    graph never spans micro-steps or evaluation batches: after every backward (the last one's
    with its gradient clipping), after the optimizer step and after each evaluation step."""

    def __init__(self, device):
        self.device = device

    def _mark(self, args, state, control, **kw):
        self.device.mark_step()

    on_substep_end = on_pre_optimizer_step = on_optimizer_step = on_prediction_step = _mark
