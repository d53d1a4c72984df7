"""A run's event log read incrementally (a poll of an unchanged log costs one ``stat``), and
the running figures the side panel shows.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path
from typing import Any

from ..rundir.events import EventReader
from ..views.chart import downsample

RECENT_EVENTS = 50  # the events a run's detail view shows
LOSS_POINTS = 120  # the loss sparkline's points
LOSS_KEEP = 2400  # points kept in memory: beyond this, every other one is dropped
PACE_POINTS = 20  # logging points of the current segment the step rate is measured over


def _number(value: Any) -> float | None:
    """A finite number, else None (NaN is written to the log as the string "nan")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


class EventTail:
    """The events of ``path`` (a run's ``events.jsonl``), read as they are appended.

    Attributes
    ----------
    step, max_steps, device, mem_total : int, int, str, int or None
        The highest step logged; the last ``start`` event's target, device kind and device memory.
    loss, tokens_per_s, samples_per_s : float or None
        The last training event's values.
    mem_alloc : int or None
        The last event's device memory in use.
    mtime : float or None
        When the log last changed (unix seconds); None while there is no log.
    recent : collections.deque
        The last ``RECENT_EVENTS`` events (a ``samples`` event without its picture).
    samples : dict or None
        The last ``samples`` event of a text-to-image run, its grid (base64 PNG) included.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._reader = EventReader(self.path)
        self._start_over()

    @property
    def mtime(self) -> float | None:
        return self._reader.mtime

    def _start_over(self) -> None:
        self.step: int | None = None
        self.max_steps: int | None = None
        self.device: str | None = None
        self.mem_total: int | None = None
        self.loss = self.tokens_per_s = self.samples_per_s = self.mem_alloc = None
        self.losses: list[list[float]] = []
        self.recent: deque[dict] = deque(maxlen=RECENT_EVENTS)
        self.samples: dict | None = None
        self._pace: deque[tuple[int, float, str]] = deque(maxlen=PACE_POINTS)  # (step, time, phase)

    def poll(self) -> None:
        """Read what was appended since the last poll (one ``stat`` when nothing was)."""
        events, started_over = self._reader.read()
        if started_over:  # rewritten (a resume), shortened or removed: the figures start over
            self._start_over()
        for event in events:
            self._add(event)

    def _add(self, event: dict) -> None:
        step, phase = event.get("step"), event.get("phase")
        if phase == "samples":  # one picture kept: the latest grid
            self.samples = event
            event = {k: v for k, v in event.items() if k != "image"}
        self.recent.append(event)
        if isinstance(step, int) and not isinstance(step, bool):
            self.step = step if self.step is None else max(self.step, step)
        if _number(event.get("mem_alloc")) is not None:
            self.mem_alloc = event["mem_alloc"]
        if phase == "start":  # a start or a resume: the step clock starts again
            self.max_steps = event.get("max_steps", self.max_steps)
            self.device = event.get("device", self.device)
            self.mem_total = event.get("mem_total", self.mem_total)
            self._pace.clear()
        elif phase in ("train", "warmup") and isinstance(step, int):
            # an event without a throughput (or 0) keeps the last one measured
            self.tokens_per_s = _number(event.get("tokens_per_s")) or self.tokens_per_s
            self.samples_per_s = _number(event.get("samples_per_s")) or self.samples_per_s
            loss = _number(event.get("loss"))
            self.loss = loss
            if loss is not None:
                if len(self.losses) >= LOSS_KEEP:
                    self.losses = self.losses[::2]
                self.losses.append([step, loss])
            if _number(event.get("time")) is not None:
                self._pace.append((step, float(event["time"]), phase))

    def loss_series(self) -> list[list[float]]:
        """``[[step, loss], ...]``, at most ``LOSS_POINTS``, evenly thinned, the last one kept."""
        return downsample(self.losses, LOSS_POINTS)

    def eta_s(self, max_steps: int | None) -> float | None:
        """Seconds to reach ``max_steps`` at the recent step rate (``time`` of the logged
        steps since the last start, after warm-up where there are two such points)."""
        if not max_steps or self.step is None:
            return None
        points = [p for p in self._pace if p[2] == "train"]
        if len(points) < 2:
            points = list(self._pace)
        if len(points) < 2:
            return None
        (s0, t0, _), (s1, t1, _) = points[0], points[-1]
        if s1 <= s0 or t1 <= t0:
            return None
        return max(max_steps - self.step, 0) * (t1 - t0) / (s1 - s0)
