"""A run's spec.json as a typed record: the model's and the data's specs, the run's arguments
(``RunArgs``), its workers (``Launch``) and each resume.

``RunSpec.read(raw, where)`` is the one reader of the file's dict: it upgrades a version-1
file and refuses a value of the wrong type naming the file and the key. A run directory is
data (docs/runs.md): nothing here imports, runs or opens what a spec names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..runargs import FIELDS, RunArgs

VERSION = 2  # spec.json's "version"; files without one are version 1 (written before it)

# What a version-1 file meant by an argument's absence, where that differs from the
# argument's default today: before ``padding=`` every batch was padded to its longest row
# (the default "auto" is resolved when a run is prepared, never stored); before the log
# throttle every logging step was logged.
BEFORE_THE_ARGUMENT: dict[str, Any] = {"padding": "longest", "log_interval_s": 0.0}
WHERE_NOT_HOW = ("run_dir", "name")  # arguments that say where a run is: never in its spec


@dataclass(frozen=True, kw_only=True)
class Launch:
    """How a launched run's workers start: their number, how they share the model, and the
    environment the launching machine chose for them (its free cards)."""

    devices: int
    strategy: str
    zero_stage: int | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Resume:
    """One ``resume()`` of the run: the checkpoint it started from (``origin``, the file's
    ``"from"``), the new total, when, the arguments before it, and how it failed, if it did."""

    origin: str
    max_steps: int | None = None
    at: str | None = None
    previous_args: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None
    ended: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"from": self.origin, "max_steps": self.max_steps, "at": self.at}
        out["previous_args"] = dict(self.previous_args)
        if self.failed is not None:
            out.update(failed=self.failed, ended=self.ended)
        return out


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """A run's spec.json: the model's and the data's specs, the run's arguments, its launch
    and its resumes. ``to_dict`` is what the file holds."""

    model: dict[str, Any]
    data: dict[str, Any]
    args: RunArgs
    launch: Launch | None = None
    resumes: tuple[Resume, ...] = ()
    attached: dict[str, Any] | None = None  # a run an attached Trainer made: how to resume it
    training_arguments: dict[str, Any] | None = None  # that Trainer's own arguments, as shown
    version: int = VERSION

    @property
    def task(self) -> str | None:
        return self.model.get("task")

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with ``changes`` (attributes)."""
        return dataclasses.replace(self, **changes)

    def resumed(self, entry: Resume) -> RunSpec:
        """A copy with ``entry`` last in its resumes."""
        return dataclasses.replace(self, resumes=(*self.resumes, entry))

    def to_dict(self) -> dict[str, Any]:
        args = {k: v for k, v in self.args.to_dict().items() if k not in WHERE_NOT_HOW}
        out: dict[str, Any] = {
            "version": self.version,
            "model": dict(self.model),
            "data": dict(self.data),
            "args": args,
        }
        if self.launch is not None:
            out["launch"] = dataclasses.asdict(self.launch)
        if self.resumes:
            out["resumes"] = [r.to_dict() for r in self.resumes]
        for key in ("attached", "training_arguments"):
            if getattr(self, key) is not None:
                out[key] = dict(getattr(self, key))
        return out

    @classmethod
    def read(cls, raw: Any, where: str = "spec.json") -> RunSpec:
        """The record of a spec.json's parsed ``raw``, upgraded from an older version: every
        value's type checked, a wrong one refused naming ``where``, the key and the fix."""
        try:
            return _read(raw)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"{where} is not a run spec this workbench reads: {e}. A run directory is "
                f"data: open one a workbench wrote, or start a new run"
            ) from None


def _read(raw: Any) -> RunSpec:
    """``RunSpec.read`` without the file's name in the error."""
    _expect(raw, dict, "the file")
    version = raw.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"its version is {version!r}, not a whole number from 1")
    if version > VERSION:
        raise ValueError(
            f"its version {version} is newer than this workbench's ({VERSION}): upgrade "
            f"gaudi-workbench to read it"
        )
    model, data = raw.get("model"), raw.get("data")
    _expect(model, dict, "model")
    _expect(data, dict, "data")
    stored = raw.get("args", {})
    _expect(stored, dict, "args")
    if version == 1:  # the one upgrade step: what an absent argument meant then
        stored = {**BEFORE_THE_ARGUMENT, **stored}
    args = _args(stored)
    launch = raw.get("launch")
    resumes = raw.get("resumes", [])
    _expect(resumes, list, "resumes")
    for key in ("attached", "training_arguments"):
        if raw.get(key) is not None:
            _expect(raw[key], dict, key)
    return RunSpec(
        model=dict(model),
        data=dict(data),
        args=args,
        launch=None if launch is None else _launch(launch),
        resumes=tuple(_resume(r, i) for i, r in enumerate(resumes)),
        attached=raw.get("attached"),
        training_arguments=raw.get("training_arguments"),
    )


def _args(stored: dict[str, Any]) -> RunArgs:
    """The run's arguments from a spec's ``args``, each value by its argument's check."""
    overrides = stored.get("trainer_overrides", {})
    _expect(overrides, dict, "args.trainer_overrides")
    for key, value in stored.items():
        if key in FIELDS:
            FIELDS[key].check(f"args.{key}", value)
    interval = stored.get("log_interval_s")
    if interval is not None and (
        isinstance(interval, bool) or not isinstance(interval, float | int)
    ):
        raise TypeError(f"args.log_interval_s must be a number of seconds, got {interval!r}")
    return RunArgs.from_dict(stored)


def _launch(raw: Any) -> Launch:
    _expect(raw, dict, "launch")
    devices, strategy = raw.get("devices"), raw.get("strategy", "ddp")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"launch.devices must be a whole number from 1, got {devices!r}")
    _expect(strategy, str, "launch.strategy")
    zero = raw.get("zero_stage")
    if zero is not None and (isinstance(zero, bool) or not isinstance(zero, int)):
        raise TypeError(f"launch.zero_stage must be a whole number or null, got {zero!r}")
    env = raw.get("env", {})
    _expect(env, dict, "launch.env")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise TypeError("launch.env must map names to text")
    return Launch(devices=devices, strategy=strategy, zero_stage=zero, env=dict(env))


def _resume(raw: Any, i: int) -> Resume:
    where = f"resumes[{i}]"
    _expect(raw, dict, where)
    origin = raw.get("from")
    _expect(origin, str, f"{where}.from")
    steps = raw.get("max_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)):
        raise TypeError(f"{where}.max_steps must be a whole number or null, got {steps!r}")
    previous = raw.get("previous_args", {})
    _expect(previous, dict, f"{where}.previous_args")
    text = {k: raw.get(k) for k in ("at", "failed", "ended")}
    for k, v in text.items():
        if v is not None:
            _expect(v, str, f"{where}.{k}")
    return Resume(origin=origin, max_steps=steps, previous_args=dict(previous), **text)


def _expect(value: Any, kind: type, what: str) -> None:
    if not isinstance(value, kind):
        name = {dict: "an object", list: "a list", str: "text"}.get(kind, kind.__name__)
        raise TypeError(f"{what} must be {name}, got {type(value).__name__} {value!r:.60}")
