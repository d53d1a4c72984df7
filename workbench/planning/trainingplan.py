"""``TrainingPlan``: what ``wb.plan`` returns. One row per device (fits, devices and strategy,
tokens/s, hours, dollars, and where every figure came from), as a table, the cheapest and the
fastest row, and a notebook view with a bar chart of time and cost that needs no
JavaScript (an SVG image inside the HTML: it shows in saved and untrusted notebooks)."""

from __future__ import annotations

import base64
import html
import textwrap
from dataclasses import dataclass, field
from typing import Any

from .. import markup
from .matching import SIMILAR
from .references import chip_name

COLUMNS = [
    "device",
    "name",
    "fits_one",
    "devices",
    "stack",
    "strategy",
    "memory_gib",
    "precision",
    "mfu",
    "mfu_from",
    "tokens_per_s_device",
    "tokens_per_s",
    "warmup_s",
    "hours",
    "hours_low",
    "hours_high",
    "range_level",
    "usd_per_device_hour",
    "cost_usd",
    "cost_low",
    "cost_high",
    "usd_per_million_tokens",
    "price_date",
    "price_source",
    "launch",
    "note",
]
KINDS = {
    "your mfu": "#6a1b9a",
    "your runs": markup.GREEN,
    "measured by this project": "#00838f",
    "published": "#1565c0",
    "default": markup.GREY,
}


def fmt_hours(h: float | None) -> str:
    """Hours as seconds, minutes, hours or days; "-" for none."""
    if h is None:
        return "-"
    if h < 1 / 60:
        return f"{h * 3600:.1f} s"
    if h < 1:
        return f"{h * 60:.1f} min"
    return f"{h:,.1f} h" if h < 48 else f"{h / 24:,.1f} days"


def fmt_money(x: float | None) -> str:
    """Dollars (cents below $100, "<$0.01" below a cent); "-" for none."""
    if x is None:
        return "-"
    if 0 < x < 0.005:
        return "<$0.01"
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"


def _span(row: dict) -> str:
    """A row's time interval, "-" where it has none (no measured error covers its chip)."""
    if row.get("range_level") is None:
        return "-"
    return f"{fmt_hours(row['hours_low'])} - {fmt_hours(row['hours_high'])}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _near(row: dict) -> bool:
    """Whether a row's MFU is its own or a reference's of a model within SIMILAR x its size
    (the sizes the planner's measured error was measured at)."""
    ratio = row.get("mfu_size_ratio")
    return ratio is None or 1 / SIMILAR <= ratio <= SIMILAR


def _times(ratio: float) -> str:
    """A size ratio as '84x', '1,050x' or '0.012x'."""
    return f"{ratio:,.0f}x" if ratio >= 10 else f"{ratio:.2g}x"


@dataclass
class TrainingPlan:
    """Time and cost of training ``model`` on ``tokens`` tokens, per device.

    Attributes
    ----------
    model, num_params, tokens, batch_size, global_batch, seq_len, precision, flops_per_token
        The inputs (one of the batches), and the FLOPs of one token (None for a UNet).
    unit, flops_per_image
        ``"token"``, or ``"image"`` for a UNet: then ``tokens`` counts images, the
        ``tokens_per_s`` columns are images/s and ``flops_per_image`` is the count.
    rows : list of dict
        One per device, the columns of ``table()`` plus ``sources``: figure -> where it came from.
    stack : str
        The stack planned (``wb.plan``'s ``strategy=``), in words; each row's ``stack`` names
        the one its layout runs as.
    """

    model: str
    num_params: int
    tokens: int
    batch_size: int | None
    seq_len: int
    precision: str
    flops_per_token: int | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    unit: str = "token"
    flops_per_image: int | None = None
    stack: str = "the fastest that fits (any stack)"
    global_batch: int | None = None  # samples a step over all devices, where it was asked

    def table(self, sources: bool = False):
        """The rows as a DataFrame (``sources=True``: one more column, where each figure came
        from)."""
        import pandas as pd

        df = pd.DataFrame([{c: r.get(c) for c in COLUMNS} for r in self.rows], columns=COLUMNS)
        if sources:
            df["sources"] = [r["sources"] for r in self.rows]
        return df

    def row(self, device: str) -> dict[str, Any]:
        """The row of ``device``: as named in the table, or as ``devices=`` takes it
        (``"H100"`` for ``"H100 SXM"``); an unknown one lists the rows there."""
        for r in self.rows:
            if r["device"] == device:
                return r
        try:
            key = (
                "detected"
                if str(device).lower() in ("detected", "this machine")
                else chip_name(str(device), "row")
            )
        except ValueError:
            key = None
        for r in self.rows:
            if r["device"] == key:
                return r
        raise ValueError(
            f"no row {device!r} in this plan; rows: {', '.join(r['device'] for r in self.rows)}"
        )

    def _best(self, key: str) -> dict[str, Any]:
        rows = [r for r in self.rows if r.get(key) is not None]
        if not rows:
            raise ValueError(
                f"no row of this plan has a {key}: "
                + (
                    "pass prices={'H100 SXM': 2.5, ...}"
                    if key == "cost_usd"
                    else "no device has a throughput"
                )
            )
        best = min(rows, key=lambda r: r[key])
        low, high = {"cost_usd": ("cost_low", "cost_high"), "hours": ("hours_low", "hours_high")}[
            key
        ]
        what = "cheapest" if key == "cost_usd" else "fastest"
        # another row whose range reaches below the top of the best one's: the order may swap
        close = [
            r["device"]
            for r in rows
            if r is not best and r.get(low, r[key]) <= best.get(high, best[key])
        ]
        measure = "cost" if key == "cost_usd" else "time"
        if len(rows) == 1:
            answer = f"{best['device']} is the only row with a {measure}: nothing to compare"
        elif close:
            answer = (
                f"it depends: {best['device']} is {what} as planned, but "
                f"{', '.join(close)} {'lies' if len(close) == 1 else 'lie'} within the measured "
                f"error of the planner (the {measure} ranges overlap): which is {what} "
                "depends on the MFU your run reaches on each chip (train a few steps on each and "
                "plan again with runs=, or pass mfu=)"
                + (" and on your prices (prices=)" if key == "cost_usd" else "")
            )
        elif assumed := [r["device"] for r in rows if r.get("mfu_from") == "default"]:
            answer = (
                f"{best['device']} is {what} as planned, but {', '.join(assumed)} "
                f"{'rests' if len(assumed) == 1 else 'rest'} on the stated default MFU, an "
                "assumption no measured error covers: the order is not a measurement (pass mfu=, "
                "or train a few steps on each chip and plan again with runs=)"
            )
        else:
            answer = f"{best['device']} is {what}, beyond the measured error of every other row"
        far = [r for r in rows if not _near(r)] if len(rows) > 1 else []
        if far:  # the error was measured on models near their references' sizes, not this far
            ratios = [_times(x) for x in sorted(r["mfu_size_ratio"] for r in far)]
            span = ratios[0] if len(set(ratios)) == 1 else f"{ratios[0]} to {ratios[-1]}"
            answer = (
                f"{best['device']} is {what} as planned, but the planner's measured error does not "
                f"cover this model: it was measured on published results planned from references "
                f"of a similar size, and {', '.join(r['device'] for r in far)} "
                f"{'takes its' if len(far) == 1 else 'take their'} MFU from a model {span} the "
                "size of this one: the order is an extrapolation, not a measurement (train a few "
                "steps on each chip and plan again with runs=)"
            )
        if best.get("mfu_from") == "default":  # the range measures published figures, not this
            answer += (
                f". {best['device']}'s MFU is the stated default (no published figure for "
                "this model on it): an assumption, not a measurement"
            )
        return {**best, "answer": answer, "overlaps": close}

    def cheapest(self) -> dict[str, Any]:
        """The row with the lowest cost (rows without a price are left out), with ``answer``:
        whether it is cheapest beyond the planner's measured error, or "it depends" (on what),
        and ``overlaps``: the rows whose cost range reaches it."""
        return self._best("cost_usd")

    def fastest(self) -> dict[str, Any]:
        """The row with the shortest time, with ``answer`` and ``overlaps`` as ``cheapest``."""
        return self._best("hours")

    def _title(self) -> str:
        other = {
            r["device"]: r["precision"]
            for r in self.rows
            if r.get("precision") not in (None, self.precision)
        }
        also = "".join(f" ({d}: {p})" for d, p in other.items())
        size = self.batch_size or self.global_batch
        shape = f"{size}" if self.unit == "image" else f"{size} x {self.seq_len}"
        return (
            f"{self.model} ({self.num_params / 1e6:,.1f}M params): {self.tokens:,} {self.unit}s, "
            f"batch {shape} {'per device' if self.batch_size else 'in all'}, "
            f"{self.precision}{also}"
        )

    def __repr__(self) -> str:
        lines = [
            f"TrainingPlan: {self._title()}",
            *textwrap.wrap(
                f"stack: {self.stack}", 96, initial_indent="  ", subsequent_indent="    "
            ),
            f"  {'device':<11}{'devices':>8}  {'stack':<15}{self.unit + 's/s':>12}  "
            f"{'time':>11}  {self._interval()[0]:>21}  {'cost':>10}  MFU from",
        ]
        for r in self.rows:
            lines.append(
                f"  {r['device']:<11}{r.get('devices') or '-':>8}  {r.get('stack') or '-':<15}"
                f"{_num(r.get('tokens_per_s')):>12}  {fmt_hours(r.get('hours')):>11}  "
                f"{_span(r):>21}  {fmt_money(r.get('cost_usd')):>10}  "
                f"{r.get('mfu_from') or r.get('note', '')}"
            )
        for answer in self._notes():
            lines += textwrap.wrap(answer, 96, initial_indent="  ", subsequent_indent="    ")
        return "\n".join(line for line in lines if line.strip())

    def _interval(self) -> tuple[str, str]:
        """The intervals' column name ("80% interval") and what they mean, in one line; "range"
        and "" where no row has one. Every row reads one references record: one level."""
        level = next((r["range_level"] for r in self.rows if r.get("range_level")), None)
        if level is None:
            return "range", ""
        return f"{level:.0%} interval", (
            f"{level:.0%} interval: the time and the cost if the planner errs as it did on the "
            f"middle {level:.0%} of published runs it was not fitted to, by chip family (each "
            "row's sources['range'] says which runs and how often it held; "
            "wb.plan_accuracy(summary=True))"
        )

    def _notes(self) -> list[str]:
        """The lines under the table: what its intervals mean, the notes of rows whose last
        column names where their MFU came from instead (planned on more devices than asked, no
        price), one line a note with its rows, the answers, the prices."""
        rows: dict[str, list[str]] = {}
        for r in self.rows:
            if r.get("mfu_from") and r.get("note"):
                rows.setdefault(r["note"], []).append(r["device"])
        notes = [f"{', '.join(d)}: {n}" for n, d in rows.items()]
        return [self._interval()[1], *notes, *self._answers(), self._prices()]

    def _prices(self) -> str:
        """Each priced row's price with its provider and date, in one line ("" if none)."""
        got = [
            f"{r['device']} ${r['usd_per_device_hour']:g}/device-hour "
            f"({r.get('price_source') or 'no provider'}, {r.get('price_date') or 'no date'})"
            for r in self.rows
            if r.get("usd_per_device_hour") is not None
        ]
        return ("prices: " + "; ".join(got)) if got else ""

    def _answers(self) -> list[str]:
        """The fastest and the cheapest row's ``answer`` (with the planner's measured error:
        "it depends" where ranges overlap), for the printed plan and its notebook view; none
        where no row has a time or a price."""
        out = []
        for key, best in (("hours", self.fastest), ("cost_usd", self.cheapest)):
            if any(r.get(key) is not None for r in self.rows):
                out.append(best()["answer"])
        return out

    # ----------------------------------------------------------------------- the view
    def svg(self) -> str:
        """A bar chart of time and cost per device, as SVG text."""
        rows = [r for r in self.rows if r.get("hours") is not None]
        w, label, bar_h, gap = 640, 90, 14, 6
        half = (w - label - 20) // 2
        h = 28 + len(rows) * (bar_h + gap)
        out = [
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' "
            "font-family='sans-serif' "
            "font-size='11'>",
            f"<text x='{label}' y='12' font-weight='bold'>time</text>",
            f"<text x='{label + half + 10}' y='12' font-weight='bold'>cost</text>",
        ]
        most_h = max((r["hours"] for r in rows), default=1) or 1
        most_c = max((r.get("cost_usd") or 0 for r in rows), default=0) or 1
        for i, r in enumerate(rows):
            y = 22 + i * (bar_h + gap)
            colour = KINDS.get(r.get("mfu_from", ""), "#9e9e9e")
            out.append(
                f"<text x='{label - 4}' y='{y + 11}' "
                f"text-anchor='end'>{html.escape(r['device'])}</text>"
            )
            bw = max(1, (half - 70) * r["hours"] / most_h)
            out.append(
                f"<rect x='{label}' y='{y}' width='{bw:.1f}' height='{bar_h}' fill='{colour}'/>"
            )
            out.append(
                f"<text x='{label + bw + 3:.1f}' "
                f"y='{y + 11}'>{html.escape(fmt_hours(r['hours']))}</text>"
            )
            x = label + half + 10
            if r.get("cost_usd") is None:
                out.append(f"<text x='{x}' y='{y + 11}' fill='#666'>no price</text>")
                continue
            cw = max(1, (half - 70) * r["cost_usd"] / most_c)
            out.append(f"<rect x='{x}' y='{y}' width='{cw:.1f}' height='{bar_h}' fill='{colour}'/>")
            out.append(
                f"<text x='{x + cw + 3:.1f}' "
                f"y='{y + 11}'>{html.escape(fmt_money(r['cost_usd']))}</text>"
            )
        return "".join(out) + "</svg>"

    def _repr_html_(self) -> str:
        heads = (
            "device",
            "fits one",
            "devices, strategy",
            f"{self.unit}s/s",
            "time",
            f"time, {self._interval()[0]}",
            "cost",
            f"$/M {self.unit}s",
            "MFU",
            "from",
        )
        body, notes = [], []
        for r in self.rows:
            colour = KINDS.get(r.get("mfu_from", ""), markup.LABEL)
            mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "-"
            cells = [
                r["device"],
                "yes" if r["fits_one"] else "no",
                r.get("strategy") or "-",
                _num(r.get("tokens_per_s")),
                fmt_hours(r.get("hours")),
                _span(r),
                fmt_money(r.get("cost_usd")),
                fmt_money(r.get("usd_per_million_tokens")),
                mfu,
                r.get("mfu_from") or r.get("note", ""),
            ]
            body.append([*cells[:9], (cells[9], f"color:{colour}")])
            notes += [
                f"<li><b>{html.escape(r['device'])}</b> {html.escape(k)}: {html.escape(v)}</li>"
                for k, v in r["sources"].items()
                if k in ("mfu", "price", "scaling", "layout", "range", "bandwidth")
            ]
        svg = base64.b64encode(self.svg().encode()).decode()
        return (
            f"<div style='{markup.FONT}'><div style='font-weight:bold;margin:2px 8px'>"
            f"{html.escape(self._title())}</div><img src='data:image/svg+xml;base64,{svg}'/>"
            f"{markup.table(body, heads, font=False)}"
            + "".join(
                f"<p style='margin:4px 8px'>{html.escape(a)}</p>"
                for a in [f"stack: {self.stack}", *self._notes()]
                if a
            )
            + f"<details><summary>sources</summary><ul>{''.join(notes)}</ul></details></div>"
        )
