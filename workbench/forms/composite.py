"""What the pickers and the train form share: the ``Composite`` base and small rendering helpers.

A composite displays as its root ``VBox`` and turns each control change into one ``update``;
the helpers render counts, tables, histograms and error messages the same way in every widget.
"""

from __future__ import annotations

import base64
import html
import io
import weakref
from typing import Any, cast

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


# Beside the widget view, a composite's output carries its saved view: the same controls'
# values and texts as HTML, no kernel needed. A notebook reopened after its kernel is gone shows
# it in place of the widget (labextension/src/heal.ts, by this mime type), an untrusted one and
# GitHub show it as they are (JupyterLab renders no widget for an untrusted output).
SAVED_MIME = "application/vnd.gaudi-workbench.widget+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _control_html(control) -> str:
    # a dropdown's label is what it shows ("max steps"), its value what the code reads
    value = control.label if isinstance(control, w.Dropdown) else control.value
    if isinstance(value, (list, tuple)):
        value = ", ".join(map(str, value))
    label = html.escape(str(control.description))
    off = " color:#9e9e9e;" if getattr(control, "disabled", False) else ""
    return (
        f"<span style='display:inline-block;min-width:260px;margin:2px 8px 2px 0;{off}'>"
        f"<span style='display:inline-block;width:124px;color:#616161'>{label}</span>"
        f"<code>{html.escape(str(value))}</code></span>"
    )


def saved_view(widget, output_view=None) -> str:
    """``widget`` (a box of controls, HTML, images) as static HTML: each control's description
    and value, each HTML widget's text, each shown image; buttons left out; an ``Output``
    widget as ``output_view(widget)`` (the kernel does not keep what a front end showed in it)."""
    if getattr(getattr(widget, "layout", None), "display", None) == "none":
        return ""
    if isinstance(widget, w.Output):
        return output_view(widget) if output_view else ""
    if isinstance(widget, w.Box):
        inner = "".join(saved_view(c, output_view) for c in widget.children)
        flex = (
            "display:flex;flex-flow:row wrap;align-items:flex-start"
            if isinstance(widget, w.HBox)
            else ""
        )
        return f"<div style='{flex}'>{inner}</div>" if inner else ""
    if isinstance(widget, w.HTML):
        return f"<div>{widget.value}</div>" if widget.value else ""
    if isinstance(widget, w.Image):
        if not widget.value:
            return ""
        data = base64.b64encode(widget.value).decode()
        return f"<img src='data:image/{widget.format};base64,{data}'/>"
    if isinstance(widget, w.Button):
        return ""
    if hasattr(widget, "value") and hasattr(widget, "description"):
        return _control_html(widget)
    return ""


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


# Composites displayed through a display handle: at every cell's end each whose saved view
# changed updates its outputs, so that a notebook saved then holds what it shows.
_SHOWN: weakref.WeakSet = weakref.WeakSet()


def _refresh_shown() -> None:
    """IPython's post_execute callback: bring every shown composite's saved view up to date."""
    for composite in list(_SHOWN):
        composite.refresh_saved()


def _on_cell_end(shell, callback) -> None:
    if callback not in shell.events.callbacks["post_execute"]:
        shell.events.register("post_execute", callback)


class Composite:
    """Displays as its root ``VBox`` (``self.widget``); callbacks run ``update`` once per change.

    A subclass sets ``self._hold = False`` and ``self.widget``, calls ``self._watch(...)`` on
    its controls, and defines ``update(owner)`` (and ``_react(owner)`` if controls depend on
    each other).
    """

    widget: w.VBox
    _after: tuple = ()  # callbacks run after each update (``on_update``)
    _handles: tuple = ()  # the display handles this is shown through
    _saved: str = ""  # the saved view they show

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

    def update(self, owner=None) -> None:
        """Redraw from the controls (``owner``: the one that changed); each composite's own."""

    def show_at_cell_end(self):
        """In a Jupyter kernel, display this at the end of the cell unless the cell displays it
        (its last expression, ``display(...)``) or a form takes it in; returns self."""
        shell = _kernel_shell()
        if shell is not None:
            _UNSHOWN.append(self)
            _on_cell_end(shell, _show_unshown)
        return self

    def shown_elsewhere(self) -> None:
        """Displayed, or part of another widget: not shown again at the cell's end."""
        if self in _UNSHOWN:
            _UNSHOWN.remove(self)

    def saved_view(self) -> str:
        """This composite as static HTML (``saved_view`` of its widget)."""
        return saved_view(self.widget, self._output_view)

    def _output_view(self, output: w.Output) -> str:
        """What an ``Output`` widget of this composite shows, as HTML (none by default)."""
        return ""

    def _repr_mimebundle_(self, **kwargs):
        self.shown_elsewhere()
        bundle = cast(dict[str, Any], self.widget._repr_mimebundle_(**kwargs))  # has a view
        # where widgets do not render (a saved notebook on GitHub): what was picked
        bundle["text/plain"] = repr(self)
        self._saved = self.saved_view()
        bundle["text/html"] = f"<div class='wb-widget-saved'>{self._saved}</div>"
        bundle[SAVED_MIME] = {"model_id": self.widget.model_id}
        return bundle

    def _ipython_display_(self) -> None:
        """Displayed through a display handle (IPython's display protocol), so that its saved
        view can follow it (``refresh_saved``)."""
        from IPython.display import display

        handle = display(self._repr_mimebundle_(), raw=True, display_id=True)
        if handle is not None:
            self._handles = (*self._handles, handle)
            _SHOWN.add(self)
            shell = _kernel_shell()
            if shell is not None:
                _on_cell_end(shell, _refresh_shown)

    def refresh_saved(self) -> None:
        """Update this composite's outputs where its saved view changed since they were shown
        (the front end then draws the widget again, from the same model)."""
        if self._handles and self.saved_view() != self._saved:
            bundle = self._repr_mimebundle_()
            for handle in self._handles:
                handle.update(bundle, raw=True)
