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
    # 120px holds the longest label ("tokens (0: off)", "target column") in JupyterLab's
    # 13px font; 90px cut them off (tests/test_browser.py measures every label)
    return {"style": {"description_width": "120px"}, "layout": w.Layout(width="280px")}


def row(controls: list) -> w.HBox:
    """Controls side by side, wrapping onto the next line where the output is narrower."""
    return w.HBox(controls, layout=w.Layout(flex_flow="row wrap"))


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


# Composites made in the running cell and not displayed yet: at the cell's end each shows
# itself, as matplotlib-inline's figures do (its flush_figures, run by IPython's
# post_execute event, displays the figures a cell made). Emptied at every cell's end.
_UNSHOWN: list[Composite] = []


def _kernel_shell():
    """The IPython shell of a Jupyter kernel this runs in, else None (a script, a terminal)."""
    import sys

    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    shell = get_ipython()
    return shell if getattr(shell, "kernel", None) is not None else None


def _show_unshown() -> None:
    """IPython's post_execute callback: display what the cell made and did not display."""
    from IPython.display import display

    unshown = list(_UNSHOWN)
    _UNSHOWN.clear()
    for composite in unshown:
        display(composite)


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

    def show_at_cell_end(self):
        """In a Jupyter kernel, display this at the end of the cell unless the cell displays it
        (its last expression, ``display(...)``) or a form takes it in; returns self."""
        shell = _kernel_shell()
        if shell is not None:
            _UNSHOWN.append(self)
            if _show_unshown not in shell.events.callbacks["post_execute"]:
                shell.events.register("post_execute", _show_unshown)
        return self

    def shown_elsewhere(self) -> None:
        """Displayed, or part of another widget: not shown again at the cell's end."""
        if self in _UNSHOWN:
            _UNSHOWN.remove(self)

    def _repr_mimebundle_(self, **kwargs):
        self.shown_elsewhere()
        bundle = self.widget._repr_mimebundle_(**kwargs)
        # where widgets do not render (a saved notebook on GitHub): what was picked
        bundle["text/plain"] = repr(self)
        return bundle
