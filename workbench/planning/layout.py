"""Parallel layouts: how one training step is spread over a number of devices, what each
costs in time, and the fastest layout that fits.

A ``Layout`` is data parallel (DDP, or DeepSpeed ZeRO 1/2/3) or, for transformers, Megatron's
tensor x pipeline x context x data parallel (sequence parallel on, ZeRO-1 as Megatron's
distributed optimizer; pipeline stages may be uneven, the largest setting the pace; context
parallel splits every sequence over its ranks), with gradient checkpointing or not and a
micro-batch with gradient accumulation.
Every layout of a count takes the same samples a step (``batch_size`` per device x devices),
so they differ only in memory and in the time their overheads add (``timing``):

* **recompute**: gradient checkpointing runs the forward twice, 8N instead of 6N FLOPs a token;
  selective recompute (Megatron's ``--recompute-granularity selective``, Korthikanti et al.
  2022) reruns only the attention's core (Q K^T, softmax, dropout, scores x V): the forward of
  its two score matmuls, 4 L d S a token, a third of the 12 L d S attention term. Its memory
  is planned as none: the fused attention the memory model assumes never stores the scores it
  drops (Megatron Bridge's "Activation Recomputation" page: with fused or Flash attention the
  backend already rematerializes them), so it is planned where asked or where a run states it;
* **tensor parallel**: 4 collectives of the hidden state per layer and token (2 forward, 2
  backward; 2 more under checkpointing), each moving 2 (t - 1) / t x the bytes, over the
  server's links (NVLink, Gaudi's RoCE ports), not overlapped (Megatron-LM,
  Narayanan et al. 2021; Korthikanti et al. 2022);
* **context parallel**: the keys and values passed round the ring of its c ranks (c - 1 hops,
  forward and twice backward), over the server's links or, past one server, its scale-out
  ports (Megatron-LM's ring attention; Gaudi runs DeepSpeed-Ulysses' all-to-all instead);
* **pipeline bubble**: (p - 1) / m of the step idles with m micro-batches a step (1F1B);
* **data parallel**: the gradient all-reduce (2 (d - 1) / d x the gradients' bytes) once a
  step; ZeRO-2 reduce-scatters after every micro-batch and ZeRO-3 also gathers the weights
  for every micro-batch (``_rounds``; 1.5x for one, the ZeRO paper), inside a server over its links,
  across servers over each device's scale-out port, hidden behind the backward pass (2/3 of
  the compute) and charged only where it is longer;
* **optimizer offload** (``Layout.offload``, ZeRO-Offload): no optimizer state on the device;
  the rank's 16-bit gradients go to the host during the backward, the host runs Adam, the
  16-bit weights come back over PCIe (``host_seconds``).

The fastest layout that fits is the one a user would run; on a tie the simpler one (fewer
parallel dimensions, a lower ZeRO stage, a larger micro-batch). A larger ``batch_size`` can
always run as the smaller one with accumulation, and its gradients are reduced once a step
over more compute: it never plans slower.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .footprint import MARGIN, stage_share

PER_NODE = 8  # devices a server: HLS-Gaudi2/3, DGX/HGX A100, H100, H200
RECOMPUTE = 6 / 8  # gradient checkpointing: 8N FLOPs a token instead of 6N
BACKWARD = 2 / 3  # the share of a step's compute that gradient reduction can hide behind
LONG = 8192  # tokens from which context parallel is planned (Megatron Core: "8K+ tokens")
HOST_GBS = 300.0  # an assumption, not a measurement: a two-socket server's DRAM bandwidth, GB/s
# host Adam a parameter (DeepSpeed's CPU Adam under ZeRO-Offload): read the 16-bit gradient, read
# and write the fp32 weight and both moments, write the 16-bit weight
ADAM_BYTES = 2 + 3 * 4 * 2 + 2


def full_recompute(checkpointing) -> float:
    """The share of a step's FLOPs that are the model's under ``checkpointing`` (a layout's or
    a reference's: True, False or ``"selective"``, whose cost ``selective_cost`` charges)."""
    return RECOMPUTE if checkpointing is True else 1.0


def selective_cost(mp, per_unit: float) -> float:
    """A step's FLOPs over the model's under selective recompute: the attention core's forward
    again, 4 L d S a token over ``per_unit`` (flops.py's d)."""
    d = mp._dims
    return 1 + 4 * d["layers"] * d["h"] * mp.seq_len / per_unit


@dataclass(frozen=True)
class Layout:
    """How a step is spread over ``devices``: tensor x pipeline x data parallel degrees, the
    ZeRO stage, gradient checkpointing, and the micro-batch x accumulation steps that make up
    each device's ``batch_size``."""

    devices: int
    tensor: int = 1
    pipeline: int = 1
    zero: int = 0
    checkpointing: bool = False
    micro_batch: int = 1
    accumulation: int = 1
    context: int = 1
    offload: bool = False  # the optimizer state (fp32 weights, Adam's moments) on the host
    selective: bool = False  # Megatron's selective recompute (the attention's core only)

    @property
    def model_parallel(self) -> int:
        """Devices that hold one replica of the weights and one micro-batch's sequences."""
        return self.tensor * self.pipeline * self.context

    @property
    def data(self) -> int:
        """Data-parallel replicas."""
        return self.devices // self.model_parallel

    @property
    def megatron(self) -> bool:
        return self.model_parallel > 1

    def describe(self) -> str:
        """The layout in words, e.g. ``8 devices, ZeRO-3``."""
        if self.megatron:
            text = (
                f"{self.devices} devices: tensor parallel {self.tensor} x pipeline parallel "
                f"{self.pipeline}"
                + (f" x context parallel {self.context}" if self.context > 1 else "")
                + f" x data parallel {self.data}"
                + (", sequence parallel" if self.tensor > 1 else "")
                + (", ZeRO-1 (distributed optimizer)" if self.zero else "")
            )
        elif self.devices == 1:
            text = "one device"
        else:
            text = f"{self.devices} devices, " + (
                f"ZeRO-{self.zero}" if self.zero else "data parallel"
            )
        if self.megatron:
            m = self.accumulation
            text += f", micro-batch {self.micro_batch}, {m} micro-batch{'es' * (m > 1)} a step"
        elif self.accumulation > 1:
            text += f", micro-batch {self.micro_batch} x {self.accumulation} accumulation steps"
        return (
            text
            + (", gradient checkpointing" if self.checkpointing else "")
            + (", selective recompute" if self.selective else "")
        )

    def how(self, megatron: bool = False) -> str:
        """What to run it with: ``wb.launch`` arguments, or Megatron's for tensor/pipeline (or
        where ``megatron`` asks for them)."""
        if self.megatron or megatron:
            glob = self.micro_batch * self.accumulation * self.data
            return (
                "Megatron-DeepSpeed (Gaudi) or NeMo / Megatron-LM (NVIDIA): "
                f"--tensor-model-parallel-size {self.tensor} "
                f"--pipeline-model-parallel-size {self.pipeline}"
                + (
                    f" --context-parallel-size {self.context} (Megatron-DeepSpeed: DeepSpeed-"
                    f"Ulysses, --ds-sequence-parallel-size {self.context} without "
                    f"--sequence-parallel; optimum-habana: --context_parallel_size "
                    f"{self.context})"
                    if self.context > 1
                    else ""
                )
                + (" --sequence-parallel" if self.tensor > 1 else "")
                + f" --micro-batch-size {self.micro_batch} --global-batch-size {glob}"
                + (" --use-distributed-optimizer" if self.zero else "")
                # Megatron-LM's --recompute-activations is the selective one (arguments.py)
                + (
                    " --recompute-granularity full --recompute-method uniform "
                    "--recompute-num-layers 1"
                    if self.checkpointing
                    else ""
                )
                + (" --recompute-granularity selective" if self.selective else "")
            )
        args = [f"batch_size={self.micro_batch}"]
        if self.accumulation > 1:
            args.append(f"gradient_accumulation_steps={self.accumulation}")
        if self.checkpointing:
            args.append("gradient_checkpointing=True")
        if self.devices == 1:
            return f"wb.train(model, data, {', '.join(args)})"
        strategy = (
            f'strategy="deepspeed", zero_stage={self.zero}' if self.zero else 'strategy="ddp"'
        )
        if self.devices <= PER_NODE:
            return f"wb.launch(model, data, devices={self.devices}, {strategy}, {', '.join(args)})"
        return (
            f"wb.launch_command(model, data, nodes={-(-self.devices // PER_NODE)}, "
            f"devices_per_node={PER_NODE}, {strategy}, {', '.join(args)})"
        )


def _micro_batches(batch: int) -> list[int]:
    """Micro-batches that divide ``batch``, largest first."""
    return [m for m in range(batch, 0, -1) if batch % m == 0]


def recomputes(checkpointing) -> list[tuple[bool, bool]]:
    """(gradient checkpointing, selective recompute) pairs that ``checkpointing`` (None, True,
    False or ``"selective"``) allows; selective only where asked (its memory is none's)."""
    if checkpointing == "selective":
        return [(False, True)]
    return [(False, False), (True, False)] if checkpointing is None else [(checkpointing, False)]


def candidates(mp, devices: int, checkpointing: bool | str | None = None) -> list[Layout]:
    """Every layout of ``devices`` for the model of MemoryPlan ``mp``, at its largest
    micro-batch (the caller shrinks it until it fits); ``checkpointing`` True, False or
    ``"selective"`` (Megatron layouts only) keeps to it."""
    d = mp._dims
    transformer = d["family"] not in ("unet", "sd")
    out = []
    tensors = [t for t in (1, 2, 4, 8) if transformer and devices % t == 0 and d["heads"] % t == 0]
    # context parallel splits each sequence into 2 x c chunks (Megatron-LM), and is for long
    # sequences: 8K tokens and more (Megatron Core's parallelism guide); shorter ones keep their
    # matmuls whole on tensor and pipeline parallel
    contexts = [
        c
        for c in (1, 2, 4, 8)
        if c == 1 or (transformer and mp.seq_len >= LONG and mp.seq_len % (2 * c) == 0)
    ]
    for t in tensors or [1]:
        for p in (1, 2, 4, 8, 16, 32):
            if p > 1 and (not transformer or p > d["layers"]):  # uneven stages: Megatron's
                continue
            for c in contexts:
                # DeepSpeed-Ulysses (Gaudi's way) splits the heads over the context ranks too
                if devices % (t * p * c) or (transformer and d["heads"] % (t * c)):
                    continue
                # Megatron's model is 16-bit with its optimizer's fp32 master copy at any data
                # parallel degree (the distributed optimizer, which at one replica shards nothing)
                for z in (0, 1, 2, 3) if t * p * c == 1 else (1,):
                    if z and devices == 1:
                        continue
                    for ckpt, sel in recomputes(checkpointing):
                        if not sel or t * p * c > 1:
                            lay = Layout(devices, t, p, z, ckpt, mp.batch_size, 1, c)
                            out.append(replace(lay, selective=sel))
    return out


def memory_of(mp, layout: Layout):
    """The MemoryPlan of ``layout``; offloaded, the optimizer state is the host's."""
    plan = mp.replan(
        devices=layout.devices,
        zero_stage=layout.zero,
        grad_checkpointing=layout.checkpointing,
        tensor_parallel=layout.tensor,
        pipeline_parallel=layout.pipeline,
        context_parallel=layout.context,
        batch_size=layout.micro_batch,
    )
    if not layout.offload:
        return plan
    peak = plan.peak_allocated - plan.optimizer_state
    return replace(plan, optimizer_state=0, margin=int(MARGIN[0] * peak + MARGIN[1]))


def fitting(mp, target, layout: Layout, global_batch: int | None = None, micro=None):
    """``layout`` at the largest micro-batch whose step fits ``target``, with its plan; None.
    ``global_batch``: the samples of a step over all devices, which its data-parallel replicas
    must share evenly (else None); without it, ``mp.batch_size`` a device. ``micro``: that
    micro-batch only (a stack's pin), where it divides a replica's samples."""
    # Megatron: the replica's tensor x pipeline x context devices take that many samples a step
    replica = mp.batch_size * layout.model_parallel
    if global_batch is not None:
        if global_batch % layout.data:
            return None
        replica = global_batch // layout.data
    ms = _micro_batches(mp.batch_size if global_batch is None else replica)
    for m in (m for m in ms if not micro or m == micro):
        at = replace(layout, micro_batch=m, accumulation=replica // m)
        plan = memory_of(mp, at)
        if plan.fits(target):
            return at, plan
    return None


def timing(
    layout: Layout,
    mp,
    chip,
    per_unit: float,
    achieved: float,
    trainable: int,
) -> dict[str, float]:
    """Seconds of one step per device and what makes them up, for ``layout`` of MemoryPlan
    ``mp`` on ``chip`` (a ``CHIPS`` record or None) at ``achieved`` FLOP/s per device without
    checkpointing; ``per_unit``: FLOPs a token (a UNet: an image); ``trainable``: parameters
    with gradients."""
    d = mp._dims
    # a device's share of its replica's samples (a global batch below the device count: < 1)
    share = layout.micro_batch * layout.accumulation / layout.model_parallel
    units = share * (1 if d["family"] in ("unet", "sd") else mp.seq_len)
    # the largest pipeline stage sets the pace (uneven stages: ceil(layers / pipeline) layers)
    stage = stage_share(d.get("layers") or 1, layout.pipeline)
    compute = units * per_unit / achieved / full_recompute(layout.checkpointing) * stage
    if layout.selective:
        compute *= selective_cost(mp, per_unit)
    link = getattr(chip, "link_gbs", None)
    out = {"compute": compute, "tensor": 0.0, "context": 0.0, "bubble": 0.0, "data": 0.0}
    out["host"] = 0.0
    if layout.tensor > 1 and link:
        collectives = 6 if layout.checkpointing else 4
        moved = units * d["layers"] * collectives * 2 * (layout.tensor - 1) * 2 * d["h"]
        out["tensor"] = moved / (link * 1e9)
    if layout.context > 1 and link:
        # each rank passes its keys and values round the ring, c - 1 hops, in the forward and
        # twice in the backward (their gradients), 16-bit, not counted as overlapped; over
        # the server's links while tensor x context ranks fit in one (Megatron orders tensor,
        # then context, innermost), else over each device's scale-out port
        moved = units * d["layers"] * 3 * (layout.context - 1) * 2 * d["kv"] * 2
        inside = layout.tensor * layout.context <= PER_NODE or not chip.scaleout_gbs
        out["context"] = moved / ((link if inside else chip.scaleout_gbs) * 1e9)
    if layout.pipeline > 1:
        out["bubble"] = (
            (out["compute"] + out["tensor"] + out["context"])
            * (layout.pipeline - 1)
            / layout.accumulation
        )
    group = layout.data * layout.context  # context-parallel ranks reduce gradients too
    if group > 1 and link:
        grad_bytes = (2 if layout.zero or layout.megatron else 4) * trainable
        grad_bytes /= layout.tensor * layout.pipeline
        volume = 2 * (group - 1) / group * grad_bytes * _rounds(layout)
        across = layout.devices > PER_NODE and chip.scaleout_gbs
        bandwidth = (chip.scaleout_gbs if across else link) * 1e9
        out["data"] = max(0.0, volume / bandwidth - BACKWARD * compute)
    if layout.offload:
        out["host"] = host_seconds(layout, chip, trainable, BACKWARD * compute)
    out["step"] = sum(out[k] for k in STEP)
    out["units"] = units
    return out


STEP = ("compute", "tensor", "context", "bubble", "data", "host")  # what a step's time adds up


def host_seconds(layout: Layout, chip, trainable: int, hidden: float) -> float:
    """Seconds a step adds where the optimizer lives on the host (ZeRO-Offload's schedule,
    Ren et al. 2021, without its delayed parameter update): the rank's 16-bit gradient shard
    goes down over PCIe during the backward (``hidden`` seconds of it), the host runs Adam over
    the shard at its DRAM bandwidth shared by the server's devices, and the updated 16-bit
    weights come back up."""
    shard = trainable / max(1, layout.data * layout.context)
    pcie = (getattr(chip, "host_gbs", None) or 32.0) * 1e9  # PCIe Gen4 x16 where unknown
    adam = ADAM_BYTES * shard / (HOST_GBS * 1e9 / min(layout.devices, PER_NODE))
    return max(0.0, 2 * shard / pcie - hidden) + adam + 2 * shard / pcie


def _rounds(layout: Layout) -> float:
    """A step's gradient traffic in all-reduces of the gradients (2 (d - 1) / d x their bytes
    each): DDP and ZeRO-1 (Megatron's distributed optimizer too) reduce once a step, at the
    accumulation boundary; ZeRO-2 reduce-scatters after every micro-batch's backward (each
    rank keeps only its partition: DeepSpeed issue #2252, its maintainer) and gathers the
    updated weights once, (a + 1) / 2 all-reduces for ``a`` micro-batches; ZeRO-3 also gathers
    the weights for every micro-batch's forward and backward (the ZeRO paper's 1.5x for one),
    1.5 a."""
    if layout.megatron or layout.zero < 2:
        return 1.0
    a = layout.accumulation
    return (a + 1) / 2 if layout.zero == 2 else 1.5 * a


def _rank(layout: Layout, step: float) -> tuple:
    # ``step``: the step's time over its compute without checkpointing; the fastest, and on a
    # tie (0.1%) the simpler: fewer parallel dimensions, a lower ZeRO stage,
    # no checkpointing, a larger micro-batch
    return (
        round(step, 3),
        layout.model_parallel,
        layout.zero,
        layout.checkpointing,
        -layout.micro_batch,
    )


def best(
    mp,
    target,
    devices: int,
    chip,
    per_unit: float,
    achieved: float,
    trainable: int,
    checkpointing: bool | None = None,
    stack=None,
    global_batch: int | None = None,
) -> dict[str, Any] | None:
    """The fastest layout of ``devices`` that fits ``target`` (None if none does): the
    layout, its MemoryPlan and its ``timing``; ``stack`` (``strategies.Stack``) keeps to the
    layouts it runs; ``global_batch``: samples a step over all devices (``fitting``)."""
    found = []
    layouts = candidates(mp, devices, checkpointing)
    if stack is not None:
        layouts = [
            replace(lay, offload=stack.offload)
            for lay in layouts
            + [x for x in stack.extra(mp, devices, checkpointing) if x not in layouts]
            if stack.allows(lay)
        ]
    for layout in layouts:
        fit = fitting(mp, target, layout, global_batch, getattr(stack, "micro", None))
        if fit is None:
            continue
        at, plan = fit
        t = timing(at, mp, chip, per_unit, achieved, trainable)
        found.append((_rank(at, t["step"] * achieved / (t["units"] * per_unit)), at, plan, t))
    if not found:
        return None
    _, at, plan, t = min(found, key=lambda f: f[0])
    return {"layout": at, "memory": plan, "timing": t}
