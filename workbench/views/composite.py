"""What the pickers and the train form share: the ``Composite`` base and small rendering helpers.

A composite displays as its root ``VBox`` and turns each control change into one ``update``;
the helpers render counts, tables, histograms and error messages the same way in every widget.
"""

from __future__ import annotations

import html
import io
from typing import Any

import ipywidgets as w

from .. import markup

GREEN, RED = markup.GREEN, markup.RED


def control_style() -> dict[str, Any]:
    """Keyword arguments that give every control the same label and field width."""
    return {"style": {"description_width": "90px"}, "layout": w.Layout(width="250px")}


def error_text(e: Exception) -> str:
    """The exception's message, or its type name when it has none."""
    return str(e) or type(e).__name__


def error_html(text: str) -> str:
    """``text`` as an escaped red message block."""
    return (
        f"<div style='color:{RED};font:12px sans-serif;max-width:760px'>{html.escape(text)}</div>"
    )


def human_count(n: float) -> str:
    """``124.4M`` for 124_439_808: one decimal and a B, M or K suffix."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(int(n))


def html_table(header: list[str], rows: list[list[str]]) -> str:
    """A small HTML table; cells are escaped here, except those already wrapped as (html,)."""
    return markup.table(
        [[markup.Html(c[0]) if isinstance(c, tuple) else c for c in row] for row in rows], header
    )


def histogram_png(lengths, max_length: int) -> bytes:
    """PNG of the token-length histogram (matplotlib's Agg canvas; no pyplot state)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x = np.asarray(lengths)
    fig = Figure(figsize=(4.6, 2.6), dpi=80)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.hist(x, bins=min(60, max(10, int(np.unique(x).size))), color="#5c6bc0")
    ax.axvline(max_length, color=RED, linestyle="--", linewidth=1)
    cut = 100.0 * float((x > max_length).mean())
    ax.set_title(f"{x.size} rows; {cut:.1f}% longer than max_length={max_length}", fontsize=9)
    ax.set_xlabel("tokens", fontsize=9)
    ax.tick_params(labelsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


class Composite:
    """Displays as its root ``VBox`` (``self.widget``); callbacks run ``update`` once per change.

    A subclass sets ``self._hold = False`` and ``self.widget``, calls ``self._watch(...)`` on
    its controls, and defines ``update(owner)`` (and ``_react(owner)`` if controls depend on
    each other).
    """

    widget: w.VBox
    _after: tuple = ()  # callbacks run after each update (``on_update``)

    def _watch(self, *controls) -> None:
        for c in controls:
            c.observe(self._changed, names="value")

    def on_update(self, fn) -> None:
        """Call ``fn()`` after every update a control change makes (the form's live code)."""
        self._after = (*self._after, fn)

    def _changed(self, change) -> None:
        if not self._hold:
            self._hold = True
            try:
                self._react(change["owner"])
            finally:
                self._hold = False
            self.update(change["owner"])
            for fn in self._after:
                fn()

    def _react(self, owner) -> None:
        """Adjust dependent controls (options, enabled state) before ``update``."""

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
