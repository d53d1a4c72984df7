"""TEST DOUBLE of habana_frameworks.torch.distributed.hccl: the card from LOCAL_RANK, "hccl".

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/distributed/hccl/__init__.py
@ 5a56187. Importing it (habana_frameworks/torch/__init__.py imports it) runs
``initialize_distributed_hpu()``, which sets HLS_MODULE_ID from LOCAL_RANK under a launcher
with more than one process: the environment chooses the card, and the process sees it as
device 0. It also registers the "hccl" process-group backend; the double's "hccl" is gloo
on the CPU, where the double keeps its tensors.
"""

import os

import torch

from habana_frameworks.torch.hpu import HABANA_VISIBLE_MODULES_VAR, HLS_MODULE_ID_VAR


def _setup_module_id(local_rank: int = -1, world_size: int = 1) -> None:
    if HLS_MODULE_ID_VAR in os.environ:
        return  # already chosen
    if local_rank == -1 or world_size == 1:
        return  # one process: the bridge acquires a device by type
    if HABANA_VISIBLE_MODULES_VAR in os.environ:
        visible = os.environ[HABANA_VISIBLE_MODULES_VAR].split(",")
        assert local_rank < len(visible), f"not enough devices in {HABANA_VISIBLE_MODULES_VAR}"
        os.environ[HLS_MODULE_ID_VAR] = visible[local_rank]
        return
    os.environ[HLS_MODULE_ID_VAR] = str(local_rank)


def initialize_distributed_hpu(world_size=None, rank=None, local_rank=None) -> tuple[int, int, int]:
    """(world_size, rank, local_rank) from torchrun's environment (or the arguments)."""
    if all(v is not None for v in (world_size, rank, local_rank)):
        os.environ.update(WORLD_SIZE=str(world_size), RANK=str(rank), LOCAL_RANK=str(local_rank))
    world_size = int(os.getenv("WORLD_SIZE", 1))
    rank = int(os.getenv("RANK", -1))
    local_rank = int(os.environ.get("LOCAL_RANK", -1))
    _setup_module_id(local_rank=local_rank, world_size=world_size)
    if rank != -1:
        os.environ["ID"] = str(rank)
    return world_size, rank, local_rank


initialize_distributed_hpu()


def _gloo(store, rank, size, timeout):
    return torch.distributed.ProcessGroupGloo(store, rank, size, timeout)


if torch.distributed.is_available() and not hasattr(torch.distributed.Backend, "HCCL"):
    torch.distributed.Backend.register_backend("hccl", _gloo, devices=["cpu"])
