"""TEST DOUBLE of habana_frameworks.torch.distributed.hccl (registers "hccl")."""

import os

REGISTERED = ["hccl"]


def initialize_distributed_hpu() -> tuple[int, int, int]:
    return (
        int(os.environ.get("WORLD_SIZE", "1")),
        int(os.environ.get("RANK", "0")),
        int(os.environ.get("LOCAL_RANK", "0")),
    )
