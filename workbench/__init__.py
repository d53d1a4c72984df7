"""Gaudi Workbench: train Hugging Face models on Gaudi, GPU or CPU from a notebook.

``import workbench`` stays light: torch, transformers, datasets and the Habana bridge are
imported only when a function that needs them is called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .backends.hpu import prepare_recipe_cache
from .backends.registry import DeviceInfo, device, devices  # light: imports no torch
from .version import __version__

# The Habana bridge reads PT_HPU_RECIPE_CACHE_CONFIG as it loads, and in eager mode
# `import torch` loads it: this line runs before a notebook that imports workbench first
# imports torch (a no-op without a bridge, or when it is loaded already).
prepare_recipe_cache()
del prepare_recipe_cache

# Public names served lazily from their modules, so that `import workbench` pulls in
# nothing heavy. name -> module. A module never bears the name of a public function:
# importing `workbench.X` sets the package attribute X to the module.
_LAZY = {
    "ModelSpec": "catalog",
    "model": "catalog",
    "models": "catalog",
    "DataSpec": "data",
    "dataset": "data",
    "datasets": "data",
    "train": "training.engine",
    "Run": "training.engine",
    "attach": "training.attachment",
    "callback": "training.attachment",
    "training_args": "training.defaults",
    "bucket_collator": "training.defaults",
    "runs": "rundir.run",
    "compare": "rundir.run",
    "pick_model": "forms.pickers",
    "pick_dataset": "forms.pickers",
    "train_form": "forms.form",
    "plan_memory": "planning.memory",
    "MemoryPlan": "planning.memory",
    "plan": "planning.planner",
    "plan_accuracy": "planning.accuracy",
    "TrainingPlan": "planning.trainingplan",
    "launch": "scaleout.launcher",
    "launch_command": "scaleout.launcher",
    "profile": "training.profiler",
    "doctor": "checks.checkup",
    "record": "nbrecord",
    "records": "nbrecord",
}

# What a type checker and an editor read: the lazily served names, imported for them only
# (TYPE_CHECKING is False when the package runs), so ``wb.train(`` completes its keywords.
# tests/test_signatures.py checks that this block and _LAZY name the same things.
if TYPE_CHECKING:
    from .catalog import ModelSpec as ModelSpec
    from .catalog import model as model
    from .catalog import models as models
    from .checks.checkup import doctor as doctor
    from .data import DataSpec as DataSpec
    from .data import dataset as dataset
    from .data import datasets as datasets
    from .forms.form import train_form as train_form
    from .forms.pickers import pick_dataset as pick_dataset
    from .forms.pickers import pick_model as pick_model
    from .nbrecord import record as record
    from .nbrecord import records as records
    from .planning.accuracy import plan_accuracy as plan_accuracy
    from .planning.memory import MemoryPlan as MemoryPlan
    from .planning.memory import plan_memory as plan_memory
    from .planning.planner import plan as plan
    from .planning.trainingplan import TrainingPlan as TrainingPlan
    from .rundir.run import compare as compare
    from .rundir.run import runs as runs
    from .scaleout.launcher import launch as launch
    from .scaleout.launcher import launch_command as launch_command
    from .training.attachment import attach as attach
    from .training.attachment import callback as callback
    from .training.defaults import bucket_collator as bucket_collator
    from .training.defaults import training_args as training_args
    from .training.engine import Run as Run
    from .training.engine import train as train
    from .training.profiler import profile as profile

__all__ = ["DeviceInfo", "device", "devices", "__version__", *_LAZY]


def load_ipython_extension(ipython) -> None:
    """``%load_ext workbench``: registers the ``%wb`` line magic."""
    from .magics import load_ipython_extension as load

    load(ipython)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
