"""Where a warning of the compat layer points: the user's line, found by walking the stack
past the workbench's own frames, dataclasses' generated code and transformers (an argument
class's ``__post_init__`` runs inside both). ``warnings.warn(..., stacklevel=stacklevel())``;
``notice(message)`` is that, on torchrun's rank 0 only (one notice, not one a rank)."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from pathlib import Path

import transformers

from ..backends.torchrun import world


def stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the user's line: the first frame outside
    this package, dataclasses' generated code and transformers (``__post_init__`` runs there)."""
    inner = (str(Path(__file__).resolve().parents[1]), str(Path(transformers.__file__).parent))
    here = inspect.currentframe()
    frame, level = here and here.f_back, 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(inner) or name.startswith("<") or name == dataclasses.__file__):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def notice(message: str) -> None:
    """A ``UserWarning`` at the user's line, from rank 0 only under torchrun (every rank
    builds the same arguments: one notice, as Optimum Habana's ``warn0`` gives)."""
    if world()[0] == 0:
        warnings.warn(message, UserWarning, stacklevel=stacklevel())
