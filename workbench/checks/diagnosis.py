"""What ``wb.doctor`` found: one ``Check`` per question (pass, fail with what to do, or skip
with the reason), the versions a bug report needs, the verdicts on a training run's events,
and the ``Diagnosis`` that shows them all (terminal, Markdown, JSON and HTML).
"""

from __future__ import annotations

import html
import json
import math
import platform
import shutil
import sys
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import markup
from ..backends.record import library_versions
from ..backends.registry import DeviceInfo, backend, fmt_bytes
from ..rundir.run import now, write_json
from ..version import __version__

STATUSES = ("pass", "fail", "skip")
DROP = 0.02  # the loss "falls" when its last quarter averages this much below its first
REPORT_IT = "if it persists, attach report.md and the run directory named above to an issue"
COLOURS = {"pass": markup.GREEN, "fail": markup.RED, "skip": markup.GREY}


@dataclass
class Check:
    """One named check: its status, what was measured (or why it was skipped), the fix."""

    name: str
    status: str  # "pass", "fail" or "skip"
    detail: str  # what was measured; for a skip, the reason
    fix: str | None = None  # for a failure: what to do
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)  # the measured values, for the JSON report

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; known: {', '.join(STATUSES)}")
        if self.status == "fail" and not self.fix:
            raise ValueError(f"the failed check {self.name!r} must say what to do")


def passed(name: str, detail: str, **data) -> Check:
    """A check that passed, with what it measured."""
    return Check(name, "pass", detail, data=data)


def failed(name: str, detail: str, fix: str, **data) -> Check:
    """A check that failed, with what it measured and what to do."""
    return Check(name, "fail", detail, fix, data=data)


def skipped(name: str, reason: str, **data) -> Check:
    """A check that does not apply here, with the reason."""
    return Check(name, "skip", reason, data=data)


# --------------------------------------------------------------------------- versions
def versions(dev: DeviceInfo | None) -> dict[str, str | None]:
    """The versions a bug report needs: libraries, the Habana bridge, the device's driver."""
    found = library_versions()
    found["habana_frameworks"] = (dev.versions.get("habana_frameworks") if dev else None) or found[
        "habana_frameworks"
    ]
    found["driver"], found["driver_source"] = (
        backend(dev.kind).monitoring.driver_version() if dev else (None, "no device")
    )
    return found


def versions_text(found: dict[str, str | None]) -> str:
    """``versions(...)`` in one line, the driver last with where it was read."""
    text = ", ".join(f"{k} {val}" for k, val in found.items() if val and not k.startswith("driver"))
    if found.get("driver"):
        return f"{text}; driver {found['driver']} (from {found.get('driver_source')})"
    return f"{text}; driver: {found.get('driver_source') or 'not read'}"


# --------------------------------------------------------------------------- verdicts on a run
def loss_falls(name: str, run, steps: list[dict]) -> Check:
    """The run completed and its last quarter of losses averages below its first."""
    if run.status != "completed":
        return failed(
            name,
            f"the run ended {run.status}: {run.summary.get('error')} ({run.path})",
            "read the error above; " + REPORT_IT,
        )
    losses = [e["loss"] for e in steps if isinstance(e.get("loss"), (int, float))]
    if len(losses) < 4 or not all(math.isfinite(x) for x in losses):
        return failed(
            name,
            f"losses logged: {losses} ({run.path})",
            "a loss that is missing or not finite "
            "means the step is broken on this device: try precision='fp32'; " + REPORT_IT,
        )
    q = max(1, len(losses) // 4)
    first, last = sum(losses[:q]) / q, sum(losses[-q:]) / q
    text = (
        f"{run.summary['step']} steps, loss {first:.3f} -> {last:.3f} "
        f"(mean of the first and last {q})"
    )
    if last < first * (1 - DROP):
        return passed(name, text, first=first, last=last, run=str(run.path))
    return failed(
        name,
        f"the loss did not fall: {text} ({run.path})",
        "the same run learns on a CPU: compare with WORKBENCH_DEVICE=cpu workbench doctor; "
        + REPORT_IT,
        first=first,
        last=last,
    )


def optimizer_ran(name: str, run, dev: DeviceInfo) -> Check:
    """The run's Trainer stepped the optimizer the backend record names."""
    trainer = run.trainer
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate wraps it
    cls = f"{type(inner).__module__}.{type(inner).__qualname__}"
    want = dev.backend.policy.optimizer
    optim = getattr(trainer.args.optim, "value", trainer.args.optim)
    stepped = bool(inner.state)  # an optimizer's per-parameter state exists once it stepped
    if want == "hpex_fused_adamw":
        ok = type(inner).__name__ == "FusedAdamW" and cls.startswith("habana_frameworks")
    else:
        ok = optim == want and ("fused" not in want or bool(inner.defaults.get("fused")))
    fused = " (fused=True)" if inner.defaults.get("fused") else ""
    text = (
        f"{cls}{fused} stepped, TrainingArguments.optim={optim}; "
        f"the {dev.kind} record asks for {want}"
    )
    if ok and stepped:
        return passed(name, text, optimizer=cls, optim=optim)
    return failed(
        name,
        text if ok else f"expected {want}: {text}",
        "the run did not use the backend's optimizer: check trainer_overrides (optim=) and, on "
        "Gaudi, "
        "that habana_frameworks.torch.hpex imports; " + REPORT_IT,
        optimizer=cls,
        optim=optim,
    )


def clip_ran(name: str, steps: list[dict]) -> Check:
    """Every step event carries a finite gradient norm (clipping computed it)."""
    norms = [e["grad_norm"] for e in steps if isinstance(e.get("grad_norm"), (int, float))]
    if norms and all(math.isfinite(x) for x in norms):
        return passed(
            name,
            f"grad_norm in {len(norms)}/{len(steps)} step events (last {norms[-1]:.3g})",
            last=norms[-1],
        )
    return failed(
        name,
        f"grad_norm in the step events: {norms or 'none'}",
        "gradient clipping did not run or reported no norm: the Trainer computes it at "
        "every optimizer step through accelerate's clip_grad_norm_, on every device; " + REPORT_IT,
    )


def memory_moved(name: str, steps: list[dict], before: dict, dev: DeviceInfo) -> Check:
    """Device memory in the step events rose above what was allocated before the run."""
    if dev.kind == "cpu":
        return skipped(
            name, "the CPU record reports process RSS, not device memory: nothing to watch move"
        )
    peak = max((e.get("mem_peak") or 0 for e in steps), default=0)
    alloc = max((e.get("mem_alloc") or 0 for e in steps), default=0)
    text = (
        f"allocated before {fmt_bytes(before['allocated'])}; "
        f"during the run up to {fmt_bytes(alloc)}, peak {fmt_bytes(peak)}"
    )
    if peak > before["allocated"] and alloc > 0:
        return passed(name, text, before=before["allocated"], peak=peak)
    return failed(
        name,
        f"device memory did not move while a model trained: {text}",
        f"the {dev.kind} memory reader does not see this process's tensors; " + REPORT_IT,
    )


def no_recompiles(
    name: str, steps: list[dict], dev: DeviceInfo, padding: str, start: int | None = None
) -> Check:
    """After warm-up, the compile count grows only at steps that brought a new input shape."""
    counts = [e.get("compiles") for e in steps]
    if all(c is None for c in counts):
        return skipped(
            name, f"the {dev.kind} record reports no compile counter: recompiles cannot be counted"
        )
    ints = [c for c in counts if isinstance(c, int)]
    if ints != counts or any(b < a for a, b in zip(ints, ints[1:])):
        return failed(name, f"the compile counter is not a growing count: {counts}", REPORT_IT)
    late = [
        b["step"]
        for a, b in zip(steps, steps[1:])
        if b.get("phase") == "train"
        and b["compiles"] > a["compiles"]
        and (b.get("shapes_seen") or 0) <= (a.get("shapes_seen") or 0)
    ]
    shapes = max((e.get("shapes_seen") or 0 for e in steps), default=0)
    text = (
        f"{ints[-1] - (ints[0] if start is None else start)} graph compiles over {len(steps)} "
        "steps, "
        f"{shapes} input shape(s), padding={padding}"
    )
    if not late:
        return passed(name, text + "; none after warm-up without a new shape", compiles=counts)
    return failed(
        name,
        f"recompiled after warm-up at steps {late} with no new input shape: {text}",
        "something in the step changes shape or a compile guard every step: keep padding "
        "'bucketed' or 'packed'; " + REPORT_IT,
        compiles=counts,
        late=late,
    )


def step_counts(name: str, counts: dict, dev: DeviceInfo) -> Check:
    """After warm-up, no op ran on the host for want of a device kernel, and torch.compile
    broke no graph (a run's ``after_warmup`` summary)."""
    from ..views.chart import step_counts as words

    if counts.get("cpu_fallbacks") is None and counts.get("graph_breaks_total") is None:
        return skipped(
            name,
            f"the {dev.kind} record counts nothing here: no CPU fallback counter, nothing "
            "compiled (graph breaks are counted under torch.compile)",
        )
    text = words(counts)
    ops = counts.get("fallback_ops") or {}
    if ops:
        return failed(
            name,
            f"ops ran on the CPU after warm-up: {text}",
            f"{', '.join(ops)} has no {dev.kind} kernel: see docs/gaudi.md (CPU fallbacks); "
            + REPORT_IT,
            **counts,
        )
    if counts.get("graph_breaks_total"):
        return failed(
            name,
            f"torch.compile broke the model's graph: {text}",
            "run with TORCH_LOGS=graph_breaks to see where; " + REPORT_IT,
            **counts,
        )
    return passed(name, text, **counts)


# --------------------------------------------------------------------------- the report
def _cell(text: str) -> str:
    """Text for one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass
class Diagnosis:
    """Every check the doctor ran, with the device and versions they ran on.

    ``exit_code`` is 1 when any check failed (``workbench doctor`` exits with it), else 0.
    """

    checks: list[Check]
    device: dict[str, Any] | None  # DeviceInfo.to_dict() of the device checked; None if none
    versions: dict[str, str | None]
    seconds: float = 0.0
    out: Path | None = None
    created: str = field(default_factory=now)

    def check(self, name: str) -> Check:
        """The check called ``name``; an unknown name lists the known ones."""
        found = {c.name: c for c in self.checks}
        if name not in found:
            raise KeyError(f"no check {name!r}; checks: {', '.join(found)}")
        return found[name]

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in STATUSES}

    @property
    def ok(self) -> bool:
        return self.counts["fail"] == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    # ------------------------------------------------------------------ text
    def headline(self) -> str:
        d = self.device
        where = (
            (
                f"{d['kind']} x{d['count']} ({d['name']}, {fmt_bytes(d['total_memory'])}"
                + (f", {d['mode']} mode" if d.get("mode") else "")
                + ")"
            )
            if d
            else "no usable device"
        )
        libs = ", ".join(
            f"{k} {self.versions[k]}" for k in ("torch", "transformers") if self.versions.get(k)
        )
        return f"workbench doctor: {where}; {libs}"

    def summary_line(self) -> str:
        n = self.counts
        line = (
            f"{len(self.checks)} checks: {n['pass']} pass, {n['fail']} fail, "
            f"{n['skip']} skip in {self.seconds:.0f} s"
        )
        return line + (f"; reports in {self.out}/report.json and report.md" if self.out else "")

    def table(self, width: int | None = None) -> str:
        """The checks as a text table for a terminal, a fix under each failure."""
        width = width or max(80, min(shutil.get_terminal_size((100, 20)).columns, 140))
        name_w = max(len("check"), *(len(c.name) for c in self.checks)) + 2
        indent = " " * (name_w + 6 + 8)
        lines = [self.headline(), "", f"{'check':<{name_w}}{'status':<6}{'time':>6}  detail"]
        for c in self.checks:
            secs = f"{c.seconds:.1f}s" if c.seconds >= 0.05 else ""
            head = f"{c.name:<{name_w}}{c.status.upper():<6}{secs:>6}  "
            lines += textwrap.wrap(
                c.detail, width, initial_indent=head, subsequent_indent=indent
            ) or [head]
            if c.fix:
                lines += textwrap.wrap(
                    c.fix,
                    width,
                    initial_indent=indent + "fix: ",
                    subsequent_indent=indent + "     ",
                )
        return "\n".join([*lines, "", self.summary_line()])

    def __repr__(self) -> str:
        return self.table()

    def markdown(self) -> str:
        """The report to paste into an issue."""
        v = versions_text(self.versions)
        rows = [
            f"| {c.name} | {c.status} | {c.seconds:.1f} s | {_cell(c.detail)} |"
            for c in self.checks
        ]
        fixes = [f"- **{c.name}**: {c.fix}" for c in self.checks if c.fix]
        return "\n".join(
            [
                f"## {self.headline()}",
                "",
                f"{self.summary_line().split(';')[0]} ({self.created}; Python "
                f"{platform.python_version()}, "
                f"{platform.platform()})",
                "",
                f"Versions: {v}",
                "",
                "| check | status | time | detail |",
                "|---|---|---|---|",
                *rows,
                *(["", "### What to do", "", *fixes] if fixes else []),
                "",
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "workbench": __version__,
            "created": self.created,
            "seconds": self.seconds,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "counts": self.counts,
            "device": self.device,
            "versions": self.versions,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "checks": [asdict(c) for c in self.checks],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def write(self, out: str | Path) -> tuple[Path, Path]:
        """Write ``report.json`` and ``report.md`` into ``out``; returns their paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        json_path, md_path = out / "report.json", out / "report.md"
        write_json(json_path, self.to_dict())
        md_path.write_text(self.markdown())
        return json_path, md_path

    def _repr_html_(self) -> str:
        def row(c: Check) -> list:
            chip = (
                f"<span style='background:{COLOURS[c.status]};color:white;border-radius:3px;"
                f"padding:0 5px;font-weight:bold'>{c.status}</span>"
            )
            fix = (
                f"<div style='color:{COLOURS['fail']}'>fix: {html.escape(c.fix)}</div>"
                if c.fix
                else ""
            )
            took = f"{c.seconds:.1f}&nbsp;s" if c.seconds >= 0.05 else ""
            return [
                markup.Html(f"<code>{html.escape(c.name)}</code>"),
                markup.Html(chip),
                markup.Html(took),
                markup.Html(html.escape(c.detail) + fix),
            ]

        border = COLOURS["pass" if self.ok else "fail"]
        checks = markup.table(
            [row(c) for c in self.checks],
            ("check", "status", "time", "detail"),
            styles=("white-space:nowrap", "", "text-align:right"),
            font=False,
        )
        return (
            f"<div style='border-left:4px solid {border};padding:4px 8px;{markup.FONT}'>"
            f"<div style='font-weight:bold;margin-bottom:4px'>{html.escape(self.headline())}</div>"
            f"{checks}<div style='margin-top:4px;color:#555'>"
            f"{html.escape(self.summary_line())}</div></div>"
        )
