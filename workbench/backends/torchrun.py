"""torchrun's environment, as a process sees it: its rank, the world's size, its local rank.

One place reads the variables torchrun (and DeepSpeed's and Slurm's launchers through it)
sets for each worker; outside a launcher a process is rank 0 of a world of one.
"""

from __future__ import annotations

import os


def world() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) in a single process."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """This worker's index among the workers of its machine (0 outside a launcher)."""
    return int(os.environ.get("LOCAL_RANK", "0"))
