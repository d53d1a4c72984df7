"""torchrun's environment, as a process sees it: its rank, the world's size, its local rank
(outside a launcher, rank 0 of a world of one).
"""

from __future__ import annotations

import os

from .. import settings


def world() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) in a single process."""
    return int(settings.get("RANK", "0")), int(settings.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """This worker's index among the workers of its machine (0 outside a launcher)."""
    return int(settings.get("LOCAL_RANK", "0"))


# Variables a process sets for itself once it holds a Gaudi, which a child must not inherit
# (gaudi-pytorch-bridge @ 5a56187, python_packages/habana_frameworks/torch/):
# - HLS_MODULE_ID: the module (card) this process took. torch.hpu.set_device sets it
#   (hpu/__init__.py), and importing distributed.hccl sets it from LOCAL_RANK unless it is
#   set already (distributed/hccl/__init__.py, _setup_module_id returns early): a worker that
#   inherits it asks for the parent's card, whatever its own LOCAL_RANK.
# - ID: the rank the bridge's logs name (initialize_distributed_hpu, same file).
# HABANA_VISIBLE_MODULES, the caller's choice of cards, passes through unchanged.
PROCESS_OWN = ("HLS_MODULE_ID", "ID")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a worker process this one starts: this process's, without the
    device choices it made for itself (``PROCESS_OWN``), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in PROCESS_OWN}
    return {**env, **(extra or {})}
