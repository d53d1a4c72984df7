"""The libraries' own output while the workbench shows a run: their progress bars and log
records that say nothing to a user (``quiet_libraries``), what native code writes to
stderr (``native_stderr_without``), and transformers' warnings where they are expected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys


class _Drop(logging.Filter):
    """Drops the records ``noise(record)`` says are noise (a filter on their own logger)."""

    def __init__(self, noise):
        super().__init__()
        self.noise = noise

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.noise(record)


# Library log records that say nothing to a user, by logger: DeepSpeed's "Setting accelerator
# to CPU" (its logger writes to stdout and does not propagate: a filter is the only switch that
# is not process-wide); transformers' loss_type None and same-second checkpoint ordering, and
# a LOAD REPORT of a new task head's MISSING weights (what fine-tuning is; other findings show).
NOISE = {
    "DeepSpeed": lambda r: (
        r.levelno < logging.ERROR and f"{os.sep}accelerator{os.sep}" in r.pathname
    ),
    "transformers.modeling_utils": lambda r: (
        str(r.msg).startswith("`loss_type=None`") or new_head_only(r)
    ),
    "transformers.trainer_utils": lambda r: str(r.msg).startswith("mtime may not be reliable"),
}


def new_head_only(record: logging.LogRecord) -> bool:
    """Whether ``record`` is transformers' LOAD REPORT saying only that weights outside the
    model's pretrained body (``base_model_prefix``: the new task head) were initialised."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(record.msg))
    found = re.match(r"(\w+) LOAD REPORT from: ", text)
    cls = getattr(sys.modules.get("transformers"), found.group(1), None) if found else None
    body = getattr(cls, "base_model_prefix", "")
    rows = [[c.strip() for c in line.split("|")] for line in text.splitlines()[1:] if "|" in line]
    rows = [r for r in rows[1:] if r[0] and set(r[0]) - set("-+")]  # past the header and the rule
    return bool(body and rows) and all(
        r[1] == "MISSING" and not r[0].startswith(f"{body}.") for r in rows
    )


@contextlib.contextmanager
def quiet_libraries():
    """Silence the libraries' own progress bars and their noise (``NOISE``) while a run
    trains (our display has the progress); real warnings still reach the output."""
    import datasets
    from transformers.utils import logging as hf_logging

    hf, ds = hf_logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    filters = {name: _Drop(noise) for name, noise in NOISE.items()}
    for name, f in filters.items():
        logging.getLogger(name).addFilter(f)
    try:
        yield
    finally:
        for name, f in filters.items():
            logging.getLogger(name).removeFilter(f)
        if hf:
            hf_logging.enable_progress_bar()
        if ds:
            datasets.enable_progress_bars()


@contextlib.contextmanager
def native_stderr_without(noise):
    """What native (C++) code writes to file descriptor 2 in the block is held back and, but
    for the lines ``noise(line)`` drops, written there at the end. Python's ``sys.stderr``
    in a notebook is not that descriptor; in a terminal it is, and waits too."""
    import tempfile

    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [
                ln
                for ln in held.read().decode(errors="replace").splitlines(keepends=True)
                if not noise(ln)
            ]
            if kept:
                os.write(2, "".join(kept).encode())


@contextlib.contextmanager
def transformers_errors_only():
    """transformers logs errors only for the duration (its warnings are expected here)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
