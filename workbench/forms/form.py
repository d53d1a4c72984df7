"""The training form: settings linked to the pickers, a Train button (``wb.train(...,
background=True)`` with its dashboard below) and Show code. Nothing raises out of a callback.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from ..backends.registry import ORDER, PRECISIONS
from ..catalog.modelspec import FAMILIES, ModelSpec
from ..data import bundled
from ..data.dataset import DataSpec, infer_task
from ..runargs import default
from .composite import Composite, control_style, error_html, error_text, row
from .pickers import DataPicker, ModelPicker, pick_dataset, pick_model


def _model_code(spec: ModelSpec) -> str:
    """``wb.model(...)`` that rebuilds ``spec``."""
    kw: dict[str, Any] = {}
    size = spec.source if spec.size == "custom" else spec.size
    if size != "tiny":
        kw["size"] = size
    if spec.task != FAMILIES[spec.family]["tasks"][0]:
        kw["task"] = spec.task
    for key in ("num_labels", "tokenizer", "trust_remote_code"):
        if getattr(spec, key):
            kw[key] = getattr(spec, key)
    if spec.lora is not None:
        kw["lora"] = spec.lora or True
    kw.update(spec.overrides)
    return _call("wb.model", [repr(spec.family)], kw)


def _data_code(spec: DataSpec) -> str:
    """``wb.dataset(...)`` that rebuilds ``spec``."""
    info = bundled.BUNDLED.get(spec.source)
    if info:
        cols = {r: c for r, c in spec.columns.items() if info["columns"].get(r) != c}
        task = info["task"]
    else:
        cols, task = dict(spec.columns), infer_task(spec.columns, None)
    kw: dict[str, Any] = {} if spec.task == task else {"task": spec.task}
    defaults = {"limit": None, "eval_fraction": 0.1, "seed": 0, "config": None}
    kw.update({k: getattr(spec, k) for k, v in defaults.items() if getattr(spec, k) != v})
    return _call("wb.dataset", [repr(spec.source)], {**kw, **cols})


def _call(name: str, args: list[str], kwargs: dict[str, Any]) -> str:
    """``name(arg, ..., key=repr(value), ...)`` as source text."""
    return f"{name}({', '.join([*args, *(f'{k}={v!r}' for k, v in kwargs.items())])})"


class TrainForm(Composite):
    """Training settings, a Train button (background run, live dashboard) and Show code.

    ``run`` is the last ``Run`` started; ``call()`` gives ``(model, data, kwargs)`` of the
    ``wb.train`` call the button makes, ``code()`` the same call as Python.
    """

    def __init__(
        self, model_picker: ModelPicker | None = None, data_picker: DataPicker | None = None
    ):
        made = (model_picker is None, data_picker is None)  # pickers the form makes, it shows
        self.model_picker = model_picker or pick_model()
        self.data_picker = data_picker or pick_dataset()
        self._hold = False
        self._code_live = False  # once shown, the code follows every change of the form
        self._stale = False  # the message is an input error, cleared by the next change
        self.run = None
        self._run_view: tuple = (None, "")  # (run path and status, its saved view)
        mp, dp = self.model_picker, self.data_picker
        self.until = w.Dropdown(
            options=[("max steps", "max_steps"), ("epochs", "epochs")],
            value="max_steps",
            description="train for",
            **control_style(),
        )
        self.max_steps = w.IntText(value=100, description="max steps", **control_style())
        self.epochs = w.FloatText(value=1.0, description="epochs", disabled=True, **control_style())
        self.batch_size = w.IntText(
            value=mp.batch_size.value, description="batch size", **control_style()
        )
        self.lr = w.Text(
            value="",
            placeholder="blank: auto",
            description="lr",
            continuous_update=False,
            **control_style(),
        )
        self.precision = w.Dropdown(
            options=PRECISIONS, value=mp.precision.value, description="precision", **control_style()
        )
        self.device = w.Dropdown(
            options=("auto", *ORDER), value="auto", description="device", **control_style()
        )
        self.max_length = w.IntText(
            value=dp.max_length.value, description="max length", **control_style()
        )
        # one number on screen: the pickers' plan and padding follow the form
        self._links = [
            w.link((self.batch_size, "value"), (mp.batch_size, "value")),
            w.link((self.batch_size, "value"), (dp.batch_size, "value")),
            w.link((self.precision, "value"), (mp.precision, "value")),
            w.link((self.max_length, "value"), (dp.max_length, "value")),
        ]
        self.train_button = w.Button(description="Train", button_style="success", icon="play")
        self.code_button = w.Button(description="Show code", icon="code")
        self.message = w.HTML()
        self.code_view = w.HTML()
        self.output = w.Output()
        self.train_button.on_click(lambda _: self.train())
        self.code_button.on_click(lambda _: self.show_code())
        self._watch(
            self.until,
            self.max_steps,
            self.epochs,
            self.batch_size,
            self.lr,
            self.precision,
            self.device,
            self.max_length,
        )
        for picker in (mp, dp):  # after the picker's own update: its value is the new one
            picker.on_update(self._refresh_code)
        embedded = [p for p, new in zip((self.model_picker, self.data_picker), made) if new]
        for picker in embedded:  # shown inside the form, not again at the cell's end
            picker.shown_elsewhere()
        embedded = [p.widget for p in embedded]
        self.widget = w.VBox(
            [
                *embedded,
                row([self.until, self.max_steps, self.epochs, self.lr]),
                row([self.batch_size, self.max_length, self.precision, self.device]),
                w.HBox([self.train_button, self.code_button]),
                self.message,
                self.code_view,
                self.output,
            ]
        )

    def _react(self, owner) -> None:
        self.max_steps.disabled = self.until.value != "max_steps"
        self.epochs.disabled = self.until.value != "epochs"

    def update(self, owner=None) -> None:
        if self._stale:
            self.message.value, self._stale = "", False
        self._refresh_code()

    def _refresh_code(self) -> None:
        if self._code_live:
            self.show_code()

    def call(self) -> tuple[ModelSpec, DataSpec, dict[str, Any]]:
        """``(model, data, kwargs)`` of the ``wb.train`` call; ValueError says what is wrong."""
        model, data = self.model_picker.value, self.data_picker.value
        if model is None:
            raise ValueError(f"pick a valid model first: {self.model_picker.error}")
        if data is None:
            raise ValueError(f"pick a valid dataset first: {self.data_picker.error}")
        kw: dict[str, Any] = {}
        if self.until.value == "max_steps":
            if self.max_steps.value < 1:
                raise ValueError(f"max steps must be at least 1, got {self.max_steps.value}")
            kw["max_steps"] = self.max_steps.value
        else:
            if self.epochs.value <= 0:
                raise ValueError(f"epochs must be positive, got {self.epochs.value:g}")
            kw["epochs"] = self.epochs.value
        kw["batch_size"] = self.batch_size.value
        if self.lr.value.strip():
            try:
                kw["lr"] = float(self.lr.value)
            except ValueError:
                raise ValueError(
                    f"lr must be a number such as 1e-3 (blank: auto), got {self.lr.value!r}"
                ) from None
        for key in ("precision", "device", "max_length"):
            if getattr(self, key).value != default(key):
                kw[key] = getattr(self, key).value
        kw["background"] = True
        return model, data, kw

    def code(self) -> str:
        """The ``wb.train(...)`` call the Train button makes, as Python to paste into a cell."""
        model, data, kw = self.call()
        lines = [
            f"    {_model_code(model)},",
            f"    {_data_code(data)},",
            *(f"    {k}={v!r}," for k, v in kw.items()),
        ]
        return "import workbench as wb\n\nrun = wb.train(\n" + "\n".join(lines) + "\n)\n"

    def show_code(self) -> None:
        """Show the equivalent ``wb.train(...)`` call below the buttons, and from now on keep
        it in step with the form (while the input is invalid: what is wrong, instead)."""
        self._code_live = True
        try:
            text = self.code()
        except Exception as e:
            self.code_view.value = error_html(
                f"no code while the input is invalid: {error_text(e)}"
            )
            return
        self.code_view.value = (
            f"<pre style='font:12px monospace;background:#f5f5f5;padding:6px'>"
            f"{html.escape(text)}</pre>"
        )

    def train(self) -> None:
        """Start ``wb.train(..., background=True)``; its dashboard shows in ``output``."""
        from ..training.engine import train

        # a run stops "training" before its end event reaches subscribers (this form among
        # them), so a click as soon as the form says it ended starts a new run
        if self.run is not None and self.run.is_training:
            self.message.value = error_html(
                f"{self.run.name} is still training; stop it first (form.run.stop())"
            )
            self._stale = True
            return
        error = None
        try:
            model, data, kw = self.call()
        except Exception as e:
            error = e
        else:
            self.output.clear_output()
            with self.output:  # the dashboard displays itself here
                # caught in here: inside IPython, Output's __exit__ would swallow the
                # exception into a traceback display, and the form would not know
                try:
                    self.run = train(model, data, **kw)
                except Exception as e:  # task mismatch, unavailable device, ...
                    error = e
        if error is not None:  # a message, not a traceback
            self.message.value, self._stale = error_html(error_text(error)), True
            return
        run, self._stale = self.run, False
        assert run is not None  # train returned it
        self.message.value = (
            f"<div style='font:12px sans-serif'>started {html.escape(run.name)}</div>"
        )
        # The run ends on its own thread; its "end" event tells the form (one that failed
        # before the subscription: its summary says so already)
        run.subscribe(lambda event: self._ended(run) if event.get("phase") == "end" else None)
        if run.summary.get("ended"):
            self._ended(run)

    def _ended(self, run) -> None:
        """Show how ``run`` ended: completed, stopped, or failed with the reason and its fix."""
        if run is not self.run:  # a later run replaced it in the form
            return
        try:
            self._say_how(run)
        finally:  # the saved view shows the finished chart, also in a notebook saved now
            self.refresh_saved()

    def _say_how(self, run) -> None:
        s = run.summary
        status = html.escape(s.get("status", "?"))
        where = f"{html.escape(run.name)} {status} at step {s.get('step', 0)}"
        if s.get("status") == "failed":
            self.message.value = error_html(
                f"{run.name} failed at step {s.get('step', 0)}: "
                f"{s.get('error') or 'no reason recorded'}"
            )
        elif s.get("status") == "stopped":
            how = (
                "checkpoint kept: form.run.resume() continues"
                if run.last_checkpoint is not None
                else s.get("error") or "no checkpoint"
            )
            self.message.value = (
                f"<div style='font:12px sans-serif'>{where} ({html.escape(how)})</div>"
            )
        else:
            self.message.value = (
                f"<div style='font:12px sans-serif'>{where} of {s.get('max_steps', '?')}</div>"
            )

    def _output_view(self, output: w.Output) -> str:
        """The run's saved view once it has ended (its chart, from its directory), else a line
        saying it trains."""
        from ..views.dashboard import saved_run_output

        run = self.run
        if run is None:
            return ""
        if not run.summary.get("ended"):
            return f"<div style='font:12px sans-serif'>{html.escape(run.name)} training</div>"
        key = (str(run.path), run.summary.get("status"))
        if self._run_view[0] != key:
            self._run_view = (key, saved_run_output(run)["text/html"])
        return self._run_view[1]

    def __repr__(self) -> str:
        run = f", run={self.run.name} ({self.run.status})" if self.run is not None else ""
        return f"TrainForm({self.model_picker!r}, {self.data_picker!r}{run})"


def train_form(
    model_picker: ModelPicker | None = None, data_picker: DataPicker | None = None
) -> TrainForm:
    """A form that trains the picked model on the picked dataset, or shows the code to.

    Parameters
    ----------
    model_picker : ModelPicker, optional
        From ``pick_model()``; default a new one, shown inside the form.
    data_picker : DataPicker, optional
        From ``pick_dataset()``; default a new one, shown inside the form.

    Returns
    -------
    TrainForm
        Displays itself (at the cell's end, unless the cell displays it). Batch size,
        precision and max length are linked to the pickers.
        Train starts ``wb.train(..., background=True)`` (``form.run``); Show code prints
        the same call.
    """
    return TrainForm(model_picker, data_picker).show_at_cell_end()
