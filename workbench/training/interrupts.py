"""Ctrl-C while training: the first interrupt stops gracefully, a second one aborts; SIGTERM
ends the run at once, saying so.

A Jupyter kernel restart or shutdown sends SIGINT, then SIGTERM half of its wait later (5 s by
default), then SIGKILL (jupyter_client ``KernelManager.shutdown_wait_time``): the SIGINT starts
a stop with a checkpoint, and the SIGTERM must still leave a summary that tells what happened.
"""

from __future__ import annotations

import signal
import sys
import threading

from ..backends.torchrun import world


class Terminated(BaseException):
    """SIGTERM while training (a kernel restart or shutdown, torchrun stopping its workers):
    a BaseException like KeyboardInterrupt, so that no ``except Exception`` swallows it."""


class Interrupts:
    """While training in the main thread, the first SIGINT stops after the current step with a
    checkpoint, a second raises KeyboardInterrupt; SIGTERM raises ``Terminated``."""

    def __init__(self, run):
        self.run, self.previous = run, None
        self.previous_term = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
            if world()[1] == 1:  # torchrun stops ranks with SIGTERM: theirs stays its own
                # (a Python handler waits for a blocked collective; the launcher writes the end)
                self.previous_term = signal.signal(signal.SIGTERM, self._terminate)
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

    def _terminate(self, signum, frame):
        ckpt = self.run.last_checkpoint
        then = (
            f"wb.Run.open({str(self.run.path)!r}).resume() continues from {ckpt.name}"
            if ckpt is not None
            else "it has no checkpoint yet"
        )
        raise Terminated(  # its error starts rundir.writer.TERMINATED: a save it cut short goes
            f"SIGTERM: this process was told to end (a kernel restart or shutdown?); {then}"
        )

    def __exit__(self, *exc):
        # the handlers go back from the main thread only (signal.signal raises elsewhere): an
        # attached run a garbage collection ends on another thread leaves them to the next run
        if threading.current_thread() is not threading.main_thread():
            return False
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        if self.previous_term is not None:
            signal.signal(signal.SIGTERM, self.previous_term)
        return False
