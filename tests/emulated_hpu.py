"""Run code on the emulated Gaudi (tests/fakes) in a fresh Python, never in pytest's own.

Once the double's device extension is in a process, torch takes ``hpu`` as that process's
accelerator for good (``torch.accelerator``, default devices, ``torch.compile`` backends), so
later unrelated tests would see a Gaudi. Tests therefore hand a body of code to
:func:`run_on_hpu` (fixture ``on_hpu`` in conftest): it runs in a new interpreter with the
double and the repository on ``PYTHONPATH``, fresh card files, runs and working folder under
the test's ``tmp_path``, and returns the dict the body leaves in ``out``. One process can do
several checks (the bridge's mode is fixed per process: eager and compile share one, lazy
needs its own). The body can use the helpers below (``train``, ``placed``, ``marks``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FAKES = TESTS / "fakes"
MARK = "@@emulated-hpu@@"
# what a Gaudi host's environment may carry that a test must choose itself
CLEARED = ("PT_HPU_LAZY_MODE", "PT_HPU_AUTOLOAD", "PT_HPU_RECIPE_CACHE_CONFIG", "HLS_MODULE_ID",
           "HABANA_VISIBLE_MODULES", "ID", "RANK", "LOCAL_RANK", "WORLD_SIZE", "FAKE_HPU_DEVICE",
           "WORKBENCH_DEVICE", "DS_ACCELERATOR", "ACCELERATE_TORCH_DEVICE", "PT_HPU_PLACE_ON_CPU")


def environment(tmp_path: Path, **env: str) -> dict[str, str]:
    """The environment of a process on the emulated Gaudi (8 Gaudi2 cards, all free)."""
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    paths = [str(FAKES), str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")]
    base.update(PYTHONPATH=os.pathsep.join(p for p in paths if p), FAKE_HPU_GENERATION="2",
                FAKE_HPU_COUNT="8", FAKE_HPU_DEV_DIR=str(tmp_path / "accel"),
                # Intel's container ships Intel's torch build, which current bridges need for
                # lazy mode; FAKE_HPU_RELEASE (current or 1.19) passes through from the caller
                FAKE_HPU_INTEL_TORCH="1",
                # the workbench reads who holds each card from these files (docs/devices.md)
                WORKBENCH_HPU_DEVICE_FILES=str(tmp_path / "accel" / "accel*"),
                WORKBENCH_HOLDS=str(tmp_path / "holds"),  # records of the holds (holds.py)
                WORKBENCH_RUNS=str(tmp_path / "runs"))
    base.update(env)
    return base


def run_on_hpu(tmp_path: Path, body: str, timeout: float = 900, **env: str) -> dict:
    """Run ``body`` (it fills the dict ``out``) in a fresh Python; ``out`` as JSON-able data."""
    script = ("from emulated_hpu import *\nout = {}\n" + textwrap.dedent(body)
              + f"\nimport json as _json\nprint({MARK!r} + _json.dumps(out, default=str))\n"
              # torch's exit race (the worker's ``leave`` says which): a body ending right after
              # a backward on ``hpu`` aborted at exit, 3 times in 234 runs of four lines
              + "from workbench.scaleout.worker import leave as _leave\n_leave(0)\n")
    tmp_path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, timeout=timeout,
                          env=environment(tmp_path, **env), capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
    if done.returncode or not lines:
        raise AssertionError(f"the emulated-HPU process failed ({done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return json.loads(lines[-1][len(MARK):])


# ----------------------------------------------------------------- helpers for bodies
def train(model: str = "gpt2-tiny", data=None, **kw):
    """``wb.train`` on ``device="hpu"`` with smoke values; fails unless the run completed."""
    import workbench as wb

    data = data or wb.dataset("docstrings-lm", limit=64)
    args = {"device": "hpu", "max_steps": 2, "batch_size": 2, "max_length": 32, "log_every": 1,
            "live": False, **kw}
    run = wb.train(model, data, **args)
    assert run.status == "completed", run.summary.get("error")
    return run


def placed(run) -> dict:
    """Where the Trainer ran (``args.device``) and where the model's parameters are."""
    trainer = run.trainer
    return {"args_device": str(trainer.args.device),
            "params": sorted({str(p.device) for p in trainer.model.parameters()}),
            "dtype": str(next(trainer.model.parameters()).dtype)}


def marks(source: str = "workbench") -> int:
    """mark_step calls so far made from ``source`` (the double records each caller)."""
    from habana_frameworks.torch.core.step_closure import MARKS

    return sum(1 for m in MARKS if m.startswith(source))


class Spy:
    """A TrainerCallback (added after the workbench's own) that notes, at each event, how many
    mark_steps the workbench has run so far."""

    EVENTS = ("on_substep_end", "on_pre_optimizer_step", "on_optimizer_step",
              "on_prediction_step")

    def __init__(self):
        from transformers import TrainerCallback

        self.seen: list[tuple[str, int]] = []
        spy = self

        class _Callback(TrainerCallback):
            pass

        for name in self.EVENTS:
            setattr(_Callback, name,
                    lambda self_, *a, _n=name, **k: spy.seen.append((_n, marks())))
        self.callback = _Callback()


def compiles(run) -> list[int]:
    """The compile counter at each logged training step."""
    return [e["compiles"] for e in run.events if e.get("phase") in ("warmup", "train")]
