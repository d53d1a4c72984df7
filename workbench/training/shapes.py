"""Moved: static-shape batching is ``workbench.shapes`` now (docs/training.md used this path).

Importing this module warns once and serves every name of ``workbench.shapes``; it goes in
the release after next.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import shapes

warnings.warn(
    "workbench.training.shapes moved to workbench.shapes; import it from there "
    "(this path goes in the release after next)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(shapes, name)


def __dir__() -> list[str]:
    return dir(shapes)
