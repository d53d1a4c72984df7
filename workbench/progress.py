"""Progress while a run trains: one line, updated in place, at most 4 times a second.

In a notebook it is one HTML output updated through a display handle (so a saved or
papermill-executed notebook holds one final line, not thousands); elsewhere one text
line on stderr rewritten with a carriage return.
"""

from __future__ import annotations

import sys
import time

MIN_INTERVAL = 0.25  # seconds between redraws


def in_notebook() -> bool:
    """True inside a Jupyter kernel (ipykernel), False in a terminal or plain python."""
    ip = sys.modules.get("IPython")
    shell = ip.get_ipython() if ip is not None else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _line(run, event: dict) -> str:
    max_steps = event.get("max_steps") or run.summary.get("max_steps") or "?"
    parts = [f"{run.name}", f"step {event.get('step', 0)}/{max_steps}"]
    if event.get("loss") is not None:
        parts.append(f"loss {event['loss']:.4g}")
    if event.get("tokens_per_s"):
        parts.append(f"{event['tokens_per_s']:,.0f} tok/s")
    elif event.get("samples_per_s"):
        parts.append(f"{event['samples_per_s']:,.1f} samples/s")
    if event.get("phase") == "eval":
        parts += [f"{k} {v:.4g}" for k, v in event.items() if k.startswith("eval_") and isinstance(v, float)]
    if event.get("phase") == "end":
        parts.append(event.get("status", ""))
    return " | ".join(parts)


class TextProgress:
    def __init__(self, run, notebook: bool):
        self.run, self.notebook = run, notebook
        self.last_draw = 0.0
        self.max_steps = None
        self.handle = None

    def __call__(self, event: dict) -> None:
        if event.get("phase") == "start":
            self.max_steps = event.get("max_steps")
        event = {**event, "max_steps": self.max_steps}
        final = event.get("phase") in ("end", "eval")
        now = time.monotonic()
        if not final and now - self.last_draw < MIN_INTERVAL:
            return
        self.last_draw = now
        line = _line(self.run, event)
        if self.notebook:
            from IPython.display import HTML, display

            html = HTML(f"<pre style='margin:0'>{line}</pre>")
            if self.handle is None:
                self.handle = display(html, display_id=True)
            else:
                self.handle.update(html)
        else:
            end = "\n" if event.get("phase") == "end" else ""
            print(f"\r{line}\033[K", end=end, file=sys.stderr, flush=True)


def attach(run, live) -> None:
    """Subscribe a progress display to ``run`` according to ``live`` (auto, True, False)."""
    if live is False:
        return
    run.subscribe(TextProgress(run, notebook=in_notebook()))
