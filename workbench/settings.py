"""The environment variables the workbench reads: its own, with their readers, and the ones
other tools set that it also reads. The one list: ``tests/test_layers.py`` fails on an
``os.environ`` lookup anywhere else. Imports nothing but the standard library.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import overload

RUNS = "WORKBENCH_RUNS"
CACHE = "WORKBENCH_CACHE"
DEVICE = "WORKBENCH_DEVICE"
HPU_DEVICE_FILES = "WORKBENCH_HPU_DEVICE_FILES"
HPU_SYSFS = "WORKBENCH_HPU_SYSFS"
HOLDS = "WORKBENCH_HOLDS"

DEFAULT_RUNS = "runs"  # relative: under the notebook's (the process's) working directory

# name -> what it means to the workbench (who sets it, where it is not the user)
VARIABLES: dict[str, str] = {
    RUNS: "where new runs go and runs are listed (default ./runs); run_dir= wins over it",
    CACHE: "the workbench's cache: bundled datasets, latent caches, the HPU recipe cache "
    "(default ~/.cache/gaudi-workbench)",
    DEVICE: "the device wb.device() picks when asked for 'auto' (hpu, cuda, cpu, cuda:1...)",
    HPU_DEVICE_FILES: "a glob of the Gaudi device files to read instead of /dev/accel/accel*",
    HPU_SYSFS: "the folder to read the Gaudi cards' module ids from instead of /sys/class/accel",
    HOLDS: "the folder where users' processes record the cards they hold, for the node's other "
    "users (default /tmp/workbench-holds; mode 1777)",
    # Habana's bridge (read by the workbench, set by it only where the docs say so)
    "PT_HPU_LAZY_MODE": "the bridge's execution mode: 1 lazy, 0 eager (Intel's docs)",
    "PT_HPU_RECIPE_CACHE_CONFIG": "the bridge's on-disk cache of compiled graphs",
    "HABANA_VISIBLE_MODULES": "the Gaudi modules a process may take (the bridge)",
    "HLS_MODULE_ID": "the Gaudi module a process takes (the bridge, torchrun workers)",
    "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST": "the bridge's bf16 autocast op list (a file)",
    "PT_HPU_AUTOCAST_FP32_OPS_LIST": "the bridge's fp32 autocast op list (a file)",
    "CUDA_VISIBLE_DEVICES": "the GPUs a process may take (CUDA)",
    # torchrun (torch.distributed.elastic) in its workers
    "RANK": "this worker's rank (torchrun)",
    "WORLD_SIZE": "the number of workers (torchrun)",
    "LOCAL_RANK": "this worker's rank on its node (torchrun)",
    "TORCHELASTIC_RESTART_COUNT": "how often torchrun restarted the workers",
    # Hugging Face's libraries: read to say why a download was refused
    "HF_HUB_OFFLINE": "huggingface_hub makes no network calls",
    "TRANSFORMERS_OFFLINE": "transformers makes no network calls",
    "HF_DATASETS_OFFLINE": "datasets makes no network calls",
    # the front end a kernel serves
    "JPY_SESSION_NAME": "set by Jupyter for a notebook's kernel (a live view can be drawn)",
    "VSCODE_PID": "set by VS Code for its notebooks' kernels (a live view can be drawn)",
}


def _listed(name: str) -> str:
    if name not in VARIABLES:
        raise KeyError(
            f"{name} is not in workbench/settings.py VARIABLES: add it there, with what it means"
        )
    return name


@overload
def get(name: str) -> str | None: ...
@overload
def get(name: str, default: str) -> str: ...
def get(name: str, default: str | None = None) -> str | None:
    """The value of the listed variable ``name``, else ``default`` (None: unset stays None); a
    name not in ``VARIABLES`` is a KeyError."""
    return os.environ.get(_listed(name), default)


def is_set(name: str) -> bool:
    """Whether the listed variable ``name`` is in the environment (set, even empty)."""
    return _listed(name) in os.environ


def runs_root(run_dir: str | Path | None = None) -> Path:
    """Where runs go and are listed: ``run_dir``, else ``$WORKBENCH_RUNS``, else ``./runs``."""
    return Path(run_dir or os.environ.get(RUNS) or DEFAULT_RUNS).expanduser()


def runs_root_named(run_dir: str | Path | None = None) -> str:
    """What chose ``runs_root(run_dir)``, as an error names it."""
    if run_dir is not None:
        return "run_dir"
    if os.environ.get(RUNS):
        return RUNS
    return f"run_dir (default {DEFAULT_RUNS!r})"


def cache_root() -> Path:
    """The workbench's cache: ``$WORKBENCH_CACHE``, else ``~/.cache/gaudi-workbench``."""
    return Path(os.environ.get(CACHE) or Path.home() / ".cache" / "gaudi-workbench")


def device_choice() -> str | None:
    """``$WORKBENCH_DEVICE`` (stripped), or None when unset or empty."""
    return os.environ.get(DEVICE, "").strip() or None
