"""The live dashboard's cost: a tiny-model run with it against the same run headless."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from typing import Any

from workbench.backends.registry import device as pick
from workbench.catalog.modelspec import model as as_model
from workbench.data.dataset import dataset as as_dataset
from workbench.training.engine import train
from workbench.views.dashboard import Dashboard

from .contenders import rotated, timer


class RecordingComm:
    """Stands in for the front end (the widget's comm), so that the dashboard's overhead is
    measured without a browser: it records every message the kernel sends and never answers."""

    def __init__(self):
        self.comm_id = uuid.uuid4().hex
        self.sent: list[tuple[dict, list[bytes]]] = []

    def on_msg(self, callback) -> None:
        """Messages from the front end: there are none."""

    def send(self, data=None, metadata=None, buffers=None) -> None:
        self.sent.append((data, [bytes(b) for b in (buffers or [])]))

    def close(self, *args, **kwargs) -> None:
        """Nothing to close."""

    def deltas(self) -> list[tuple[dict, list[bytes]]]:
        """The ``delta`` messages (new points) sent so far: (content, buffers)."""
        return [
            (d["content"], b)
            for d, b in self.sent
            if d.get("method") == "custom" and d["content"].get("type") == "delta"
        ]


class _Probe:
    """Attaches a live dashboard to each run it is given and times what it takes from the
    training thread (the dashboard runs there: that time is its overhead)."""

    def __init__(self):
        self.comms: list[RecordingComm] = []
        self.kernel: list[float] = []  # time to build and send one message
        self.spent: list[float] = []  # time the dashboard took from training, per run
        self.finals: list[float] = []  # time of the end-of-run update, per run

    def __call__(self, run) -> None:
        comm = RecordingComm()
        d = Dashboard(run, mode="live", sink=comm)
        flush = d.flush
        self.spent.append(0.0)

        def timed_flush():
            t = time.perf_counter()
            flush()
            self.kernel.append(time.perf_counter() - t)

        def timed(event):
            t = time.perf_counter()
            d(event)
            if event.get("phase") == "end":  # after training: the last picture and history
                self.finals.append(time.perf_counter() - t)
            else:
                self.spent[-1] += time.perf_counter() - t

        d.flush = timed_flush
        run.subscribe(timed)
        self.comms.append(comm)

    def messages(self) -> dict[str, float]:
        """Messages per run, the largest one's bytes, and the kernel-side times in ms."""
        deltas = [m for c in self.comms for m in c.deltas()]
        sizes = [
            len(json.dumps({"method": "custom", "content": c})) + sum(len(b) for b in bufs)
            for c, bufs in deltas
        ]
        ms = [1000 * k for k in self.kernel]
        return {
            "per_run": len(deltas) / max(len(self.comms), 1),
            "max_bytes": max(sizes, default=0),
            "mean_kernel_ms": statistics.mean(ms) if ms else 0,
            "max_kernel_ms": max(ms, default=0),
            "end_of_run_ms": 1000 * statistics.median(self.finals) if self.finals else 0,
        }


def run(
    steps: int = 2000, warmup: int | None = None, repeats: int = 5, device: str = "auto"
) -> dict[str, Any]:
    """A tiny-model run with the live dashboard (a stand-in front end that receives every
    message) against the same run headless, side by side."""
    dev = pick(device)
    warmup = warmup if warmup is not None else min(100, steps // 4)
    spec, data = as_model("gpt2", size="tiny"), as_dataset("docstrings-lm")
    probe, walls = _Probe(), []

    def one(display) -> float:
        clock = timer(dev, warmup, steps)
        with tempfile.TemporaryDirectory() as out:
            run = train(
                spec,
                data,
                max_steps=steps,
                batch_size=2,
                max_length=32,
                device=dev.kind,
                live=display,
                run_dir=out,
                callbacks=[clock],
            )
            if display is not False:
                walls.append(run.summary["wall_time_s"])
        return clock.steps_per_s()

    samples: dict[str, list[float]] = {"headless": [], "live": []}
    for r in range(repeats):
        for name in rotated(list(samples), r):
            samples[name].append(one(probe if name == "live" else False))
    med = {k: statistics.median(v) for k, v in samples.items()}
    direct = statistics.median(100 * s / w for s, w in zip(probe.spent, walls))
    return {
        "bench": "dashboard",
        "device": dev.to_dict(),
        "config": {
            "model": "gpt2-tiny",
            "steps": steps,
            "warmup_steps": warmup,
            "batch_size": 2,
            "seq_len": 32,
            "repeats": repeats,
        },
        "results": {k: {"steps_per_s": med[k], "all": samples[k]} for k in samples},
        "messages": probe.messages(),
        # overhead_pct: the time the live dashboard (events in, messages out, the final
        # history and picture) took from the training thread, as a share of the run's wall
        # time, measured in the live runs themselves. The side-by-side throughput ratio is
        # reported too, but identical runs of a ~10 ms step differ by up to 20% from each
        # other on a shared 2-core machine, which swamps an effect of 1%.
        "ratios": {"overhead_pct": direct, "live_vs_headless": med["live"] / med["headless"]},
    }
