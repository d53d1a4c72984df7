"""The HTML the notebook displays share: one palette and one table builder, so every
``_repr_html_`` looks and escapes alike (a cell is text, escaped, unless it is ``Html``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

GREEN = "#2e7d32"  # fits, passed, available
RED = "#c62828"  # does not fit, failed
GREY = "#9e9e9e"  # not available, skipped
LABEL = "#666"  # a row's label
FONT = "font:12px sans-serif"
PAD = "padding:1px 8px"


class Html(str):
    """Markup that goes into a cell as it is (not escaped)."""


def cell(value: Any, style: str = "", tag: str = "td") -> str:
    """One cell: ``value`` escaped (unless it is ``Html``), with ``style`` after the padding."""
    text = value if isinstance(value, Html) else html.escape("" if value is None else str(value))
    css = f"{PAD};{style}" if style else PAD
    return f"<{tag} style='{css}'>{text}</{tag}>"


def table(
    rows: Iterable[Sequence[Any]],
    head: Sequence[Any] | None = None,
    *,
    styles: Sequence[str] | None = None,
    font: bool = True,
) -> str:
    """A table of ``rows`` under an optional ``head``; ``styles[i]`` styles column ``i``'s cells
    (a row may give a cell as ``(value, style)`` to style that cell alone)."""

    def row(values: Sequence[Any]) -> str:
        out = []
        for i, v in enumerate(values):
            style = styles[i] if styles and i < len(styles) else ""
            if isinstance(v, tuple):
                v, style = v
            out.append(cell(v, style))
        return "<tr>" + "".join(out) + "</tr>"

    top = (
        ("<tr>" + "".join(cell(h, "text-align:left", "th") for h in head) + "</tr>") if head else ""
    )
    style = f"border-collapse:collapse;{FONT}" if font else "border-collapse:collapse"
    return f"<table style='{style}'>{top}{''.join(row(r) for r in rows)}</table>"


def key_values(pairs: Iterable[tuple[str, Any]], *, bold: bool = False, font: bool = True) -> str:
    """A two-column table: each key as a grey label, its value beside it (``bold``: in bold)."""
    rows = [(k, Html(f"<b>{html.escape(str(v))}</b>") if bold else v) for k, v in pairs]
    return table(rows, styles=(f"color:{LABEL}", ""), font=font)


def card(title: str, body: str, colour: str) -> str:
    """A boxed block with a coloured left edge and a bold title (a device, a report)."""
    return (
        f"<div style='display:inline-block;border:1px solid #ddd;border-left:4px solid "
        f"{colour};border-radius:4px;padding:4px 6px;{FONT}'>"
        f"<div style='font-weight:bold;margin:2px 8px'>{html.escape(title)}</div>{body}</div>"
    )
