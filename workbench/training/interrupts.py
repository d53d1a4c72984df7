"""Ctrl-C while training: the first interrupt stops gracefully, a second one aborts."""

from __future__ import annotations

import signal
import sys
import threading


class Interrupts:
    """While training in the main thread, the first SIGINT (Ctrl-C, the notebook's stop
    button, Jupyter's interrupt endpoint) stops gracefully after the current step with a
    checkpoint; a second one raises KeyboardInterrupt as usual."""

    def __init__(self, run):
        self.run, self.previous = run, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.run.stop_flag.is_set():
            raise KeyboardInterrupt
        self.run.stop()
        # a notice, not an error: on stdout (a notebook shows stderr as a pink error box)
        print(
            f"\nStopping {self.run.name} after this step (interrupt again to abort).",
            file=sys.stdout,
            flush=True,
        )

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False
