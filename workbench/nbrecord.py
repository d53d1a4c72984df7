"""Results a notebook records for tests (``wb.record``, ``wb.records``), and its ``parameters``
cell read back: a record is a display output (``application/vnd.workbench.record+json`` and a
text/plain twin), saved in the notebook and read back without executing anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .jsonvalues import plain

MIME = "application/vnd.workbench.record+json"
NOT_LITERAL = object()  # a parameter whose value is an expression, not a literal


def _jsonable(name: str, value: Any) -> Any:
    value = plain(value, nonfinite="refuse")  # jsonvalues: a NaN record is refused
    try:
        json.dumps(value)
    except (TypeError, ValueError) as e:  # what JSON cannot hold
        raise TypeError(
            f"wb.record({name!r}, value): {e}: record numbers, str, lists, dicts"
        ) from None
    return value


def record(name: str, value: Any) -> None:
    """Show ``value`` under ``name`` and keep it in the notebook's outputs; returns None."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"wb.record's name must be a non-empty str, got {name!r}")
    value = _jsonable(name, value)
    text = f"{name} = {value!r}"
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(text)
        return None
    if get_ipython() is None:
        print(text)
    else:
        display({MIME: {"name": name, "value": value}, "text/plain": text}, raw=True)
    return None


def records(path: str | Path) -> dict[str, Any]:
    """Every record in a saved notebook, by name (the last one wins)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    out: dict[str, Any] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if MIME in data:
                rec = data[MIME]
                if isinstance(rec, str):
                    rec = json.loads(rec)
                out[rec["name"]] = rec["value"]
    return out


def parameters(path: str | Path) -> dict[str, Any] | None:
    """The names and literal values the cell tagged ``parameters`` assigns, in order
    (``NOT_LITERAL`` for an expression); None when no cell has the tag. Nothing runs."""
    import ast

    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if not cells:
        return None
    out: dict[str, Any] = {}
    lines = [
        line
        for c in cells
        for line in c.source.splitlines()
        if not line.lstrip().startswith(("%", "!"))
    ]
    for node in ast.parse("\n".join(lines)).body:  # IPython magics and shell lines left out
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        value = node.value
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            names, values = [target], [value]
            if isinstance(target, ast.Tuple):  # A, B = 1, 2 (A, B = f(): both expressions)
                names, values = target.elts, [None] * len(target.elts)
                if isinstance(value, ast.Tuple) and len(value.elts) == len(names):
                    values = value.elts
            for n, v in zip(names, values):
                if isinstance(n, ast.Name):
                    try:
                        out[n.id] = ast.literal_eval(v) if v is not None else NOT_LITERAL
                    except (ValueError, TypeError, SyntaxError):
                        out[n.id] = NOT_LITERAL
    return out
