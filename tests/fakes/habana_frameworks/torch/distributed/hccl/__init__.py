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


class _HostCollectives(torch.distributed.ProcessGroup):
    """The double's "hccl": each collective copies its HPU tensors to host, runs gloo's
    collective on the copies, waits, and copies the results back (the emulated device's
    memory is host memory, so nothing faster is truer). Only the collectives DDP, accelerate
    and DeepSpeed use are here; anything else fails as an unknown method would."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._gloo = torch.distributed.ProcessGroupGloo(store, rank, size, timeout)

    def getBackendName(self):  # noqa: N802 (c10d's name)
        return "hccl"

    def _run(self, name, *args):
        """gloo's ``name`` over host copies; the first argument (the collective's output)
        gets the host results back."""
        if any(t.device.type != "hpu" for t in _flat([a for a in args if not _is_opts(a)])):
            # c10d's message for a device the backend was not registered for (devices=["hpu"])
            raise RuntimeError("No backend type associated with device type cpu")
        host = _to_host(args)
        work = getattr(self._gloo, name)(*host)
        work.wait()
        for dst, src in zip(_flat(args[0]), _flat(host[0])):
            if dst is not src:
                dst.copy_(src)
        return work

    def allreduce(self, tensors, opts=None):
        return self._run("allreduce", tensors, *_opts(opts))

    def broadcast(self, tensors, opts=None):
        return self._run("broadcast", tensors, *_opts(opts))

    def allgather(self, output_lists, inputs, opts=None):
        return self._run("allgather", output_lists, inputs, *_opts(opts))

    def allreduce_coalesced(self, tensors, opts=None):
        return self._run("allreduce_coalesced", tensors, *_opts(opts))

    def reduce(self, tensors, opts=None):
        return self._run("reduce", tensors, *_opts(opts))

    def all_gather_single(self, output, input, opts=None):  # all_gather_into_tensor
        # gloo's _allgather_base refuses a flat output of world x input.numel() (accelerate's
        # gather in every evaluation under torchrun: pad_across_processes); HCCL takes it.
        # Gathered here as a list into the output's chunks, each viewed as the input's shape
        # (views: the output gets the results).
        chunks = [c.view(input.shape) for c in output.chunk(self.size())]
        return self._run("allgather", [chunks], [input], *_opts(opts))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        return self._run("reduce_scatter", outputs, input_lists, *_opts(opts))

    def reduce_scatter_single(self, output, input, opts=None):  # reduce_scatter_tensor
        return self._run("_reduce_scatter_base", output, input, *_opts(opts))

    def barrier(self, opts=None):
        work = self._gloo.barrier(*_opts(opts))
        work.wait()
        return work

    # torch renamed the tensor collectives' ProcessGroup methods: torch 2.10 (Intel's 1.24 image)
    # calls group._allgather_base and group._reduce_scatter_base from all_gather_into_tensor and
    # reduce_scatter_tensor (torch/distributed/distributed_c10d.py @ v2.10.0), torch 2.13 calls
    # all_gather_single and reduce_scatter_single. Without the old names a torch 2.10 process
    # falls through to c10d's dispatcher, which finds no "hpu" backend in this Python group.
    def _allgather_base(self, output, input, opts=None):
        return self.all_gather_single(output, input, opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter_single(output, input, opts)


def _opts(opts):
    return () if opts is None else (opts,)


def _opaque_to_dynamo() -> None:
    """The bridge's ProcessGroupHCCL is C++, which dynamo never traces into; this Python one
    would be traced (DDP under torch.compile calls its broadcast), so dynamo must skip it."""
    import torch._dynamo

    for name in ("allreduce", "broadcast", "allgather", "allreduce_coalesced", "reduce",
                 "all_gather_single", "reduce_scatter", "reduce_scatter_single", "barrier",
                 "_allgather_base", "_reduce_scatter_base"):
        setattr(_HostCollectives, name, torch._dynamo.disable(getattr(_HostCollectives, name)))


def _is_opts(x) -> bool:
    return not isinstance(x, (torch.Tensor, list, tuple))


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for item in x for t in _flat(item)]


def _to_host(args):
    def host(x):
        if isinstance(x, torch.Tensor):
            return x.cpu() if x.device.type == "hpu" else x
        if isinstance(x, (list, tuple)):
            return type(x)(host(i) for i in x)
        return x

    return tuple(host(a) for a in args)


def _create_process_group_hccl(store, rank, size, timeout):
    return _HostCollectives(store, rank, size, timeout)


# hccl/__init__.py:120 @ 5a56187 registers "hccl" for the "hpu" device only: a collective on
# CPU tensors of an "hccl" group fails, as it does on a Gaudi
if torch.distributed.is_available() and not hasattr(torch.distributed.Backend, "HCCL"):
    _opaque_to_dynamo()
    torch.distributed.Backend.register_backend("hccl", _create_process_group_hccl, devices=["hpu"])
