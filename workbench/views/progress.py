"""Progress outside notebooks: one text line on stderr, rewritten in place, at most 4 times
a second (notebooks get the dashboard instead)."""

from __future__ import annotations

import sys
import time

MIN_INTERVAL = 0.25  # seconds between redraws


def in_notebook() -> bool:
    """True inside a Jupyter kernel (ipykernel), False in a terminal or plain python."""
    ip = sys.modules.get("IPython")
    shell = ip.get_ipython() if ip is not None else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def line(name: str, event: dict, max_steps) -> str:
    """One line of progress for ``event``."""
    parts = [name, f"step {event.get('step', 0)}/{max_steps or '?'}"]
    if event.get("loss") is not None:
        parts.append(f"loss {event['loss']:.4g}")
    if event.get("tokens_per_s"):
        parts.append(f"{event['tokens_per_s']:,.0f} tok/s")
    elif event.get("samples_per_s"):
        parts.append(f"{event['samples_per_s']:,.1f} samples/s")
    if event.get("phase") == "eval":
        parts += [
            f"{k} {v:.4g}"
            for k, v in event.items()
            if k.startswith("eval_") and isinstance(v, float)
        ]
    if event.get("phase") == "end":
        parts.append(event.get("status", ""))
    return " | ".join(parts)


class TextProgress:
    """``bar``: another progress bar owns the line (tqdm's, drawn by the Trainer a user
    attached): then only the end and evaluations are written, each a whole line through
    ``tqdm.write`` (which lifts the bar and draws it again below), never a ``\\r`` line."""

    def __init__(self, run, stream=None, bar: bool = False):
        self.run, self.stream, self.bar = run, stream or sys.stderr, bar
        self.last_draw = 0.0
        self.max_steps = None
        self.ended = False

    def __call__(self, event: dict) -> None:
        if event.get("phase") == "job":  # a submitted run's job: the follower prints it
            return
        if event.get("phase") == "start":
            self.max_steps = event.get("max_steps")
        final = event.get("phase") in ("end", "eval")
        if self.bar:
            if final:
                from tqdm.auto import tqdm  # transformers' own progress bars

                tqdm.write(line(self.run.name, event, self.max_steps), file=self.stream)
            return
        now = time.monotonic()
        if not final and now - self.last_draw < MIN_INTERVAL:
            return
        self.last_draw = now
        if event.get("phase") == "end":
            self.ended = True
        # after the end (trainer.evaluate() once train() returned) nothing redraws the line
        end = "\n" if self.ended else ""
        print(
            f"\r{line(self.run.name, event, self.max_steps)}\033[K",
            end=end,
            file=self.stream,
            flush=True,
        )
