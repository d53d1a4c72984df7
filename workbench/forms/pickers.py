"""The model and dataset pickers: what a model needs in memory, what a dataset costs in padding.

Each picker keeps its state on itself (re-running a cell builds a fresh one) and shows bad
input as the library's own message; nothing raises out of a callback.
"""

from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as w

from ..backends.registry import PRECISIONS
from ..catalog.hub import offline_switch
from ..catalog.modelspec import FAMILIES, MINILM, ModelSpec
from ..catalog.modelspec import model as as_model
from ..data import bundled
from ..data.dataset import TASKS, DataSpec
from ..data.dataset import dataset as as_dataset
from ..planning.memory import plan_memory
from ..planning.planner import plan as plan_cost
from ..planning.trainingplan import fmt_hours, fmt_money
from ..runargs import default
from .composite import (
    GREEN,
    RED,
    Composite,
    control_style,
    error_html,
    error_text,
    histogram_png,
    html_table,
    human_count,
    row,
)

HUB = "hub id or local path"
LOCAL, HUB_DATA = "local file", "hub id"
COLUMN_ROLES = ("text", "label", "target")
# task -> the family whose bundled tokenizer measures token lengths (None: images)
TASK_TOKENIZER = {"classification": "bert", "causal_lm": "gpt2", "seq2seq": "t5", "diffusion": None}
STRATEGY_NAMES = {
    "max_length": "pad to max_length",
    "longest": "dynamic padding",
    "bucketed": "bucketed (k=8)",
}
BUCKET_KS = (4, 8, 16)


# --------------------------------------------------------------------------- model picker
class ModelPicker(Composite):
    """Family, size, task, batch, length and precision; parameters and the memory verdict.

    ``value`` is the current ``ModelSpec`` (None while the input is invalid), ``plan`` its
    ``MemoryPlan``, ``hub`` whether its weights need the hub (``"cached"``, ``"download"``,
    ``"offline"``: cannot load; None: no hub) and ``error`` the message shown instead.
    """

    def __init__(
        self,
        family: str = "bert",
        size: str = "tiny",
        batch_size: int | None = None,
        seq_len: int | None = None,
        precision: str = "auto",
        task: str | None = None,
        tokens: int = 0,
    ):
        if family not in FAMILIES:  # a catalog name such as "gpt2-small" (unknown: lists the known)
            spec = as_model(family)
            family, size = spec.family, spec.size if spec.size != "custom" else spec.source or size
        info = FAMILIES[family]
        self._hold = False
        self._seq_len = seq_len or default("max_length")  # the text length, kept across the UNet
        self.value: ModelSpec | None = None
        self.plan = None
        self.fits: bool | None = None
        self.error: str | None = None
        self.hub: str | None = None  # "cached", "download", "offline" (cannot load), None: no hub
        named = size in ("tiny", *info["sizes"])
        self.family = w.Dropdown(
            options=[(f"{f}: {i['about']}", f) for f, i in FAMILIES.items()],
            value=family,
            description="family",
            **control_style(),
        )
        self.size = w.Dropdown(
            options=self._sizes(family),
            value=size if named else HUB,
            description="size",
            **control_style(),
        )
        self.source = w.Text(
            value="" if named else size,
            placeholder="org/name or /path/to/model",
            description="hub id / path",
            continuous_update=False,
            disabled=named,
            **control_style(),
        )
        self.task = w.Dropdown(
            options=info["tasks"],
            value=task or info["tasks"][0],
            description="task",
            **control_style(),
        )
        batch_size = default("batch_size") if batch_size is None else batch_size
        self.batch_size = w.IntText(value=batch_size, description="batch size", **control_style())
        self.seq_len = w.IntText(
            value=seq_len or self._unet_side() or 128,
            description="image side" if family == "unet" else "seq len",
            **control_style(),
        )
        self.precision = w.Dropdown(
            options=PRECISIONS, value=precision, description="precision", **control_style()
        )
        self.tokens = w.IntText(value=tokens, description="tokens (0: off)", **control_style())
        self.summary = w.HTML()
        self.devices = w.HTML()
        self._watch(
            self.family,
            self.size,
            self.source,
            self.task,
            self.batch_size,
            self.seq_len,
            self.precision,
            self.tokens,
        )
        self.widget = w.VBox(
            [
                row([self.family, self.size, self.source]),
                row([self.task, self.batch_size, self.seq_len, self.precision, self.tokens]),
                self.summary,
                self.devices,
            ]
        )
        self.update()

    @staticmethod
    def _sizes(family: str) -> list[tuple[str, str]]:
        sizes = FAMILIES[family]["sizes"]
        return [
            ("tiny (random init, no hub)", "tiny"),
            *(
                (f"{s} ({'pip package' if s == MINILM else 'hub: ' + sizes[s][0]})", s)
                for s in sizes
            ),
            (HUB, HUB),
        ]

    def _unet_side(self) -> int | None:
        """The UNet's image side for the chosen size (what its plan's length means)."""
        info, size = FAMILIES["unet"], self.size.value
        if self.family.value != "unet" or size not in ("tiny", *info["sizes"]):
            return None
        return int(
            (info["tiny"] if size == "tiny" else info["sizes"][size][1]).get("sample_size", 64)
        )

    def _react(self, owner) -> None:
        fam = str(self.family.value)
        if owner is self.family:
            self.size.options = self._sizes(fam)
            self.size.value = "tiny"
            self.task.options = FAMILIES[fam]["tasks"]
            self.task.value = FAMILIES[fam]["tasks"][0]  # the family's own task first
            if self.seq_len.description == "image side":  # leaving the UNet
                self.seq_len.value = self._seq_len
        self.source.disabled = self.size.value != HUB
        self.seq_len.description = "image side" if fam == "unet" else "seq len"
        if owner in (self.family, self.size) and self._unet_side():
            self.seq_len.value = self._unet_side()

    def _spec(self) -> ModelSpec:
        size = self.size.value
        if size == HUB:
            size = self.source.value.strip()
            if not size:
                raise ValueError("type a hub id (org/name) or a local model directory")
        return as_model(str(self.family.value), size=size, task=self.task.value)

    def update(self, owner=None) -> None:
        """Rebuild the spec and its memory plan from the controls."""
        self.value = self.plan = self.error = self.fits = self.hub = None
        if self.family.value != "unet":
            self._seq_len = self.seq_len.value
        try:
            spec = self._spec()
            plan = plan_memory(
                spec, self.batch_size.value, self.seq_len.value, precision=str(self.precision.value)
            )
            table = plan.table()
            costs = self._costs(spec, [d for d in table["device"] if d != "detected"])
        except Exception as e:  # shown in the widget: a callback must never raise
            self.error = error_text(e)
            self.summary.value = error_html(self.error)
            self.devices.value = ""
            return
        self.value, self.plan = spec, plan
        det = table[table["device"] == "detected"].iloc[0]
        self.fits = bool(det["fits"])
        head = (
            f"<b>{html.escape(spec.name)}</b> · {html.escape(spec.task)} · "
            f"<b>{human_count(plan.num_params)}</b> parameters · {self._weights(spec)}"
        )
        where = f"the detected {det['kind']} ({det['name']}, {det['memory_gib']:g} GiB)"
        if det["fits"]:
            verdict = f"<span style='color:{GREEN}'>fits</span>"
        else:
            fix = det["suggestion"] or "no estimate for this device"
            verdict = (
                f"<span style='color:{RED}'>does not fit</span>; cheapest fix: {html.escape(fix)}"
            )
        # "auto" trains each device in its own precision (bf16 on the accelerators, fp32 on
        # a CPU): the line and the table each name theirs, and the line says when they differ
        chips = table.loc[table["device"] != "detected", "precision"]
        shared = chips.iloc[0] if chips.nunique() == 1 else None
        other = (
            f"; the table below: {html.escape(shared)}, the accelerators' precision"
            if shared and shared != det["precision"]
            else ""
        )
        self.summary.value = (
            f"<div style='font:12px sans-serif'>{head}<br>On {html.escape(where)}: needs "
            f"{det['needs_gib']:g} GiB per device in {html.escape(det['precision'])} "
            f"(batch {plan.batch_size} x {plan.seq_len}{other}): {verdict}</div>"
        )
        rows = [
            [
                r["device"],
                f"{r['memory_gib']:g} GiB",
                f"{r['needs_gib']:g} GiB" + ("" if shared else f" in {r['precision']}"),
                (
                    f"<span style='color:{GREEN if r['fits'] else RED}'>"
                    f"{'yes' if r['fits'] else 'no'}</span>",
                ),
                r["suggestion"],
                *costs.get(r["device"], ()),
            ]
            for r in table.to_dict("records")
            if r["device"] != "detected"
        ]
        extra = [f"time for {self.tokens.value:,} tokens", "cost"] if costs else []
        self.devices.value = html_table(
            [
                "device",
                "memory",
                f"needs ({shared})" if shared else "needs",
                "fits",
                "cheapest fix",
                *extra,
            ],
            rows,
        )

    def _weights(self, spec: ModelSpec) -> str:
        """Where the weights come from, as HTML; sets ``hub``: whether loading needs the hub."""
        ident = spec.hub_id
        if ident is None:
            self.hub = None
            return html.escape(f"weights: {spec.source}" if spec.source else "random init")
        switch = offline_switch()
        self.hub = "cached" if spec.in_hub_cache() else "offline" if switch else "download"
        if self.hub == "cached":
            return f"weights: {html.escape(ident)} (in the local hub cache)"
        if not switch:
            return f"weights: {html.escape(ident)}: needs the hub (download)"
        return (
            f"weights: {html.escape(ident)}: <span style='color:{RED}'>needs the hub (download), "
            "but the hub is "
            f"switched off ({html.escape(switch)}): it cannot load offline</span>; use "
            "size='tiny', a "
            f"local directory (hf download {html.escape(ident)} --local-dir DIR where you have a "
            "network), "
            f"or unset HF_HUB_OFFLINE"
        )

    def _costs(self, spec: ModelSpec, devices: list[str]) -> dict[str, tuple[str, str]]:
        """device -> (time, cost) of the token budget (``wb.plan``); empty while the budget is 0."""
        if self.tokens.value <= 0:
            return {}
        p = plan_cost(
            spec,
            tokens=self.tokens.value,
            batch_size=self.batch_size.value,
            seq_len=self.seq_len.value,
            precision=str(self.precision.value),
            devices=devices,
        )
        return {
            r["device"]: (
                fmt_hours(r.get("hours"))
                + (f" on {r['devices']}" if r.get("devices", 1) > 1 else ""),
                fmt_money(r.get("cost_usd")),
            )
            for r in p.rows
        }

    def __repr__(self) -> str:
        if self.value is None:
            return f"ModelPicker(invalid: {self.error})"
        fits = ("fits" if self.fits else "does not fit") + {
            "offline": ", cannot load offline",
            "download": ", needs the hub",
        }.get(self.hub or "", "")
        return (
            f"ModelPicker({self.value.name}, task={self.value.task}, batch "
            f"{self.batch_size.value} x "
            f"{self.seq_len.value}, {self.precision.value}: {fits})"
        )


def pick_model(
    family: str = "bert",
    size: str = "tiny",
    batch_size: int | None = None,
    seq_len: int | None = None,
    precision: str = "auto",
    task: str | None = None,
    tokens: int = 0,
) -> ModelPicker:
    """A model picker over the catalog, with the parameter count and where it fits.

    Parameters
    ----------
    family : str
        ``bert``, ``gpt2``, ``t5``, ``llama``, ``unet``, or a catalog name (``"gpt2-small"``).
    size : str
        ``"tiny"``, a named size, or a hub id / local directory.
    batch_size, seq_len : int
        For the memory plan. ``seq_len`` defaults to 128; for the UNet it is the image
        side (default the model's sample size).
    precision : {"auto", "fp32", "bf16", "fp16"}
    task : str, optional
        Default: the family's first task.
    tokens : int
        A training token budget: above 0, each device's row adds the time and cost of
        training on it (``wb.plan``: MFU from your runs, references or the default).

    Returns
    -------
    ModelPicker
        Displays itself (at the cell's end, unless the cell displays it or a form takes it
        in); ``.value`` is the ``ModelSpec`` (None while the input is invalid),
        ``.plan`` the ``MemoryPlan``, ``.fits`` the verdict on the detected device,
        ``.hub`` whether the weights need the hub (``"offline"``: they cannot load),
        ``.error`` the message shown.

    Examples
    --------
    >>> import workbench as wb
    >>> picker = wb.pick_model("gpt2", size="small")  # doctest: +SKIP
    >>> picker.value  # doctest: +SKIP
    ModelSpec(gpt2-small, task=causal_lm, source='openai-community/gpt2')
    """
    picker = ModelPicker(family, size, batch_size, seq_len, precision, task, tokens)
    return picker.show_at_cell_end()


# --------------------------------------------------------------------------- dataset picker
class DataPicker(Composite):
    """Source, column mapping, a preview, token lengths and the padding waste of each batching.

    ``value`` is the current ``DataSpec`` (None while the input is invalid), ``lengths`` the
    token lengths (numpy array; None for images), ``stats`` the padding statistics.
    """

    def __init__(
        self,
        source: str = "docstrings-topic",
        tokenizer=None,
        max_length: int | None = None,
        batch_size: int | None = None,
        limit: int | None = None,
        task: str | None = None,
        rows: int = 5,
    ):
        self._hold, self._tokenizer, self._rows = False, tokenizer, rows
        self._tokenizers: dict[str, Any] = {}
        self._inspected: dict[str, tuple[str, Any]] = {}
        self._image: str | None = None
        self.value: DataSpec | None = None
        self.lengths = None
        self.stats: dict[str, Any] = {}
        self.error: str | None = None
        kind = DataSpec(source=source).kind
        choice = source if kind == "bundled" else LOCAL if kind == "local" else HUB_DATA
        self.source = w.Dropdown(
            options=[*bundled.BUNDLED, LOCAL, HUB_DATA],
            value=choice,
            description="dataset",
            **control_style(),
        )
        self.path = w.Text(
            value=source if kind == "local" else "",
            placeholder="data.csv, .json, .jsonl, .parquet, .txt",
            description="file",
            continuous_update=False,
            disabled=kind != "local",
            **control_style(),
        )
        self.hub = w.Text(
            value=source if kind == "hub" else "",
            placeholder="org/name",
            description="hub id",
            continuous_update=False,
            disabled=kind != "hub",
            **control_style(),
        )
        self.task = w.Dropdown(
            options=("auto", *TASKS), value=task or "auto", description="task", **control_style()
        )
        self.limit = w.IntText(value=limit or 0, description="rows (0: all)", **control_style())
        self.columns = {
            role: w.Text(description=f"{role} column", continuous_update=False, **control_style())
            for role in COLUMN_ROLES
        }
        max_length = default("max_length") if max_length is None else max_length
        self.max_length = w.IntText(value=max_length, description="max length", **control_style())
        batch_size = default("batch_size") if batch_size is None else batch_size
        self.batch_size = w.IntText(value=batch_size, description="batch size", **control_style())
        self.message = w.HTML()
        self.preview = w.HTML()
        self.histogram = w.Image(format="png", layout=w.Layout(display="none"))
        self.padding = w.HTML()
        self._watch(
            self.source,
            self.path,
            self.hub,
            self.task,
            self.limit,
            *self.columns.values(),
            self.max_length,
            self.batch_size,
        )
        self.widget = w.VBox(
            [
                row([self.source, self.path, self.hub]),
                row([self.task, self.limit, self.max_length, self.batch_size]),
                row(list(self.columns.values())),
                self.message,
                self.preview,
                w.HBox([self.histogram, self.padding]),
            ]
        )
        self.update(self.source)

    @property
    def text(self) -> w.Text:
        return self.columns["text"]

    @property
    def label(self) -> w.Text:
        return self.columns["label"]

    @property
    def target(self) -> w.Text:
        return self.columns["target"]

    def _react(self, owner) -> None:
        self.path.disabled = self.source.value != LOCAL
        self.hub.disabled = self.source.value != HUB_DATA

    def _source(self) -> str:
        choice = self.source.value
        if choice in bundled.BUNDLED:
            return choice
        text = (self.path if choice == LOCAL else self.hub).value.strip()
        if not text:
            raise ValueError(
                "type a file path (csv, json, jsonl, parquet, txt)"
                if choice == LOCAL
                else "type a hub dataset id (org/name)"
            )
        return text

    def _spec(self, refill: bool) -> DataSpec:
        task = None if self.task.value == "auto" else self.task.value
        if self.limit.value < 0:
            raise ValueError(f"rows must be 0 (all) or a positive number, got {self.limit.value}")
        limit = self.limit.value or None
        if refill:  # a new source: its own (or guessed) columns fill the fields
            for field in self.columns.values():
                field.value = ""
            spec = as_dataset(self._source(), task=task, limit=limit)
            for role, field in self.columns.items():
                field.value = spec.columns.get(role, "")
            self._image = spec.columns.get("image")
            return spec
        cols: dict[str, Any] = {
            k: f.value.strip() for k, f in self.columns.items() if f.value.strip()
        }
        if self._image:
            cols["image"] = self._image
        return as_dataset(self._source(), task=task, limit=limit, **cols)

    def _tokenizer_for(self, task: str):
        if self._tokenizer is not None:
            return self._tokenizer
        family = TASK_TOKENIZER.get(task)
        if family and family not in self._tokenizers:
            self._tokenizers[family] = as_model(family).load_tokenizer()
        return self._tokenizers.get(family) if family else None

    def _inspect(self, spec: DataSpec) -> tuple[str, Any]:
        """(preview HTML, token lengths), cached per spec: batch and length changes reuse them."""
        key = json.dumps(spec.to_dict(), sort_keys=True, default=str)
        if key not in self._inspected:
            spec.load()  # checks the column names: a wrong one lists the columns found
            preview = spec.preview(self._rows).to_html(index=False, border=0, escape=True)
            lengths = None
            tok = self._tokenizer_for(spec.task) if spec.columns.get("text") else None
            if tok is not None:
                lengths = spec.lengths(tok).lengths
            self._inspected = {key: (preview, lengths)}  # only the latest: no growth
        return self._inspected[key]

    def update(self, owner=None) -> None:
        """Rebuild the spec (and, for a new source, the column fields), preview and statistics."""
        if owner in (self.max_length, self.batch_size) and self.value is not None:
            self._show_padding()
            return
        self.value, self.lengths, self.stats, self.error = None, None, {}, None
        self.preview.value = self.padding.value = ""
        self.histogram.layout.display = "none"
        self._hold = True  # filling the column fields must not re-enter
        try:
            spec = self._spec(refill=owner in (self.source, self.path, self.hub))
            preview, lengths = self._inspect(spec)
        except Exception as e:  # shown in the widget: a callback must never raise
            self.error = error_text(e)
            self.message.value = error_html(self.error)
            return
        finally:
            self._hold = False
        self.value, self.lengths = spec, lengths
        self.message.value = (
            f"<div style='font:12px sans-serif'><b>{html.escape(spec.name)}</b> · "
            f"{html.escape(spec.task)} · columns "
            f"{html.escape(', '.join(f'{k}={v}' for k, v in spec.columns.items()))}</div>"
        )
        self.preview.value = (
            f"<div style='font:12px sans-serif;max-height:220px;overflow:auto'>{preview}</div>"
        )
        self._show_padding()

    def _show_padding(self) -> None:
        from ..shapes.buckets import padding_stats

        self.stats = {}
        if self.lengths is None:
            self.histogram.layout.display = "none"
            self.padding.value = (
                "<i style='font:12px sans-serif'>no token lengths for an image dataset</i>"
            )
            return
        batch, max_length = self.batch_size.value, self.max_length.value
        if batch < 1 or max_length < 1:
            self.padding.value = error_html("batch size and max length must be at least 1")
            return
        try:
            buckets = {
                k: padding_stats(self.lengths, "bucketed", batch, max_length, k=k)
                for k in BUCKET_KS
            }
            stats = {
                s: padding_stats(self.lengths, s, batch, max_length)
                for s in ("max_length", "longest")
            }
        except Exception as e:  # e.g. no rows left: a message, never a traceback
            self.padding.value = error_html(error_text(e))
            return
        self.stats = {**stats, "bucketed": buckets[8], "buckets": buckets}
        rows = [
            [STRATEGY_NAMES[s], f"{self.stats[s]['waste_pct']:.1f}%", self.stats[s]["shapes"]]
            for s in STRATEGY_NAMES
        ]
        per_k = [
            [f"{k} buckets", f"{b['waste_pct']:.1f}%", b["shapes"]] for k, b in buckets.items()
        ]
        self.padding.value = (
            f"<div style='font:12px sans-serif'>Padding over one epoch, batch {batch}, max length "
            f"{max_length}:{html_table(['batching', 'waste', 'batch shapes'], rows)}<br>"
            "Bucketed, by number of "
            f"buckets:{html_table(['k', 'waste', 'batch shapes'], per_k)}</div>"
        )
        self.histogram.value = histogram_png(self.lengths, max_length)
        self.histogram.layout.display = None

    def __repr__(self) -> str:
        if self.value is None:
            return f"DataPicker(invalid: {self.error})"
        return f"DataPicker({self.value!r})"


def pick_dataset(
    source: str = "docstrings-topic",
    tokenizer=None,
    max_length: int | None = None,
    batch_size: int | None = None,
    limit: int | None = None,
    task: str | None = None,
) -> DataPicker:
    """A dataset picker: preview, column mapping, token lengths and padding waste.

    Parameters
    ----------
    source : str
        A bundled name (``wb.datasets()``), a local file or a hub id.
    tokenizer : optional
        Measures token lengths; default the bundled tokenizer for the task (BERT's for
        classification, GPT-2's for causal LM, T5's for seq2seq; none for images).
    max_length, batch_size : int
        For the padding statistics: pad-to-max, dynamic padding and bucketed batching.
    limit : int, optional
        Keep this many rows (smoke runs).
    task : str, optional
        Default: inferred from the columns.

    Returns
    -------
    DataPicker
        Displays itself (at the cell's end, unless the cell displays it or a form takes it
        in); ``.value`` is the ``DataSpec`` (None while the input is invalid),
        ``.lengths`` the token lengths, ``.stats`` the padding statistics.
    """
    return DataPicker(source, tokenizer, max_length, batch_size, limit, task).show_at_cell_end()
