"""Training stacks: the software a user will run a plan with (``wb.plan(..., strategy=)``).

A stack keeps the layout search to the layouts it can run, and says how to launch them:

* ``"ddp"``: data parallel, every device a whole replica (``wb.launch``'s ``"ddp"``);
* ``"zero1"``, ``"zero2"``, ``"zero3"``: DeepSpeed ZeRO, sharding the optimizer state, then
  the gradients, then the weights over the data-parallel replicas (Rajbhandari et al., "ZeRO",
  2020); ``"deepspeed"`` is ``wb.launch``'s own, ZeRO-2 unless ``zero_stage=`` says otherwise;
* ``"zero2-offload"``, ``"zero3-offload"``: the same with the fp32 master weights and Adam's
  moments on the host (DeepSpeed's ``offload_optimizer``, Ren et al., "ZeRO-Offload", 2021):
  the gradients go to the host and the updated 16-bit weights come back over PCIe every step,
  and the host runs Adam;
* ``"fsdp"``: PyTorch FSDP full shard, planned as ZeRO-3 (the same shards, the same
  all-gathers of the weights in the forward and the backward: Zhao et al., "PyTorch FSDP", 2023);
* ``"megatron"``: Megatron-LM / NeMo's tensor x pipeline x context x data parallel with the
  distributed optimizer; a dict pins the degrees and the micro-batch (``--micro-batch-size``):
  ``{"name": "megatron", "tp": 4, "pp": 4}``, ``{"name": "megatron", "tp": 8, "pp": 8, "mb": 2}``;
* ``"optimum-habana"``: Optimum Habana's LoRA recipe as Intel ran it for MLPerf Training v4.0
  (Llama 2 70B LoRA: DeepSpeed ZeRO-3 with gradient checkpointing, per-device batch 1);
* ``None``: the fastest of all of them that fits (the row says which it took).

LoRA runs under each: the adapters are what the stack trains (``wb.model(..., lora=)``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .layout import Layout, recomputes


@dataclass(frozen=True)
class Stack:
    """A training stack: which layouts it runs, and what it is called."""

    name: str
    title: str
    zero: tuple[int, ...] = (0, 1, 2, 3)  # ZeRO stages of its data-parallel layouts
    megatron: bool = False  # tensor x pipeline x context parallel
    checkpointing: bool | None = None  # the recipe's own; None: as memory or the user needs
    offload: bool = False  # the optimizer state on the host
    tensor: int | None = None  # pinned degrees (megatron); None: searched
    pipeline: int | None = None
    context: int | None = None
    micro: int | None = None  # pinned micro-batch (megatron); None: the largest that fits

    @property
    def replica(self) -> int:
        """Devices one Megatron replica takes where the degrees are pinned (else 1)."""
        return (self.tensor or 1) * (self.pipeline or 1) * (self.context or 1)

    def allows(self, lay: Layout) -> bool:
        """Whether this stack runs ``lay`` (one device shards nothing: every stack runs it)."""
        if self.name == "fastest":
            return True
        if self.checkpointing is not None and lay.checkpointing != self.checkpointing:
            return False
        if lay.megatron:
            return self.megatron and all(
                pin is None or pin == got
                for pin, got in (
                    (self.tensor, lay.tensor),
                    (self.pipeline, lay.pipeline),
                    (self.context, lay.context),
                )
            )
        if lay.devices == 1:
            return True
        if self.megatron:  # Megatron at 1 x 1 x 1: data parallel, the distributed optimizer
            return self.replica == 1 and lay.zero in (0, 1)
        return lay.zero in self.zero

    def extra(self, mp, devices: int, checkpointing: bool | str | None) -> list[Layout]:
        """Megatron layouts of pinned degrees that the general search does not try (context
        parallel below 8K tokens, degrees past its grid); none where they do not divide."""
        if not self.megatron or self.replica == 1 or devices % self.replica:
            return []
        t, p, c = self.tensor or 1, self.pipeline or 1, self.context or 1
        return [
            Layout(devices, t, p, 1, k, mp.batch_size, 1, c, selective=sel)
            for k, sel in recomputes(checkpointing)
        ]


STACKS = {
    "ddp": Stack("ddp", "DDP (data parallel)", zero=(0,)),
    "deepspeed": Stack("deepspeed", "DeepSpeed ZeRO-2 (wb.launch's default)", (2,)),
    "zero1": Stack("zero1", "DeepSpeed ZeRO-1", (1,)),
    "zero2": Stack("zero2", "DeepSpeed ZeRO-2", (2,)),
    "zero3": Stack("zero3", "DeepSpeed ZeRO-3", (3,)),
    "zero2-offload": Stack(
        "zero2-offload", "DeepSpeed ZeRO-2, optimizer offloaded to the host", (2,), offload=True
    ),
    "zero3-offload": Stack(
        "zero3-offload", "DeepSpeed ZeRO-3, optimizer offloaded to the host", (3,), offload=True
    ),
    "fsdp": Stack("fsdp", "PyTorch FSDP (full shard)", (3,)),
    "megatron": Stack("megatron", "Megatron-LM / NeMo", (0, 1), megatron=True),
    "optimum-habana": Stack(
        "optimum-habana",
        "Optimum Habana (DeepSpeed ZeRO-3 + gradient checkpointing, Intel's MLPerf LoRA recipe)",
        (3,),
        checkpointing=True,
    ),
}
FASTEST = Stack("fastest", "the fastest that fits (any stack)", megatron=True)


def _spelling(name: str) -> str:
    """A stack's name as people write it, compared without case, hyphens, underscores or
    spaces: "ZeRO-3", "zero_3" and "zero3" are one name."""
    return "".join(c for c in name.lower() if c not in "-_ ")


# every way of writing a stack's name -> the name; NeMo trains through Megatron-Core
SPELLINGS = {_spelling(k): k for k in STACKS} | {"nemo": "megatron", "megatronlm": "megatron"}
PINS = {"tp": "tensor", "pp": "pipeline", "cp": "context", "mb": "micro"}


def stack_of(strategy) -> Stack:
    """The Stack of ``wb.plan``'s ``strategy=``: None, a name of ``STACKS``, or a dict with
    ``name`` and, for ``"megatron"``, ``tp``, ``pp`` and ``cp``; an unknown one lists them."""
    if strategy is None:
        return FASTEST
    pins = {}
    if isinstance(strategy, dict):
        pins = dict(strategy)
        name = pins.pop("name", "megatron" if {"tp", "pp", "cp"} & set(pins) else None)
    else:
        name = strategy
    found = STACKS.get(SPELLINGS.get(_spelling(name), "")) if isinstance(name, str) else None
    if found is None:
        near = difflib.get_close_matches(_spelling(str(name)), SPELLINGS, 1)
        hint = f" (did you mean {SPELLINGS[near[0]]!r}?)" if near else ""
        raise ValueError(
            f"strategy: {'a dict without name' if name is None else f'unknown stack {name!r}'}"
            f"{hint}; known: {', '.join(STACKS)} (or None: the "
            "fastest that fits), e.g. strategy='zero3' or "
            "strategy={'name': 'megatron', 'tp': 4, 'pp': 4}"
        )
    if pins and found.name != "megatron":
        raise ValueError(
            f"strategy: {', '.join(pins)} pin Megatron's degrees: pass them with "
            f"'name': 'megatron', not {found.name!r}"
        )
    unknown = sorted(set(pins) - set(PINS))
    if unknown:
        raise ValueError(
            f"strategy: unknown key(s) {', '.join(map(repr, unknown))}; a megatron strategy "
            "takes 'name', 'tp', 'pp', 'cp' (tensor, pipeline, context parallel degrees) and "
            "'mb' (micro-batch)"
        )
    for key, value in pins.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"strategy: {key} must be a positive integer, got {value!r}")
    if pins:
        found = Stack(
            found.name,
            found.title + " (" + " x ".join(f"{k.upper()} {v}" for k, v in pins.items()) + ")",
            found.zero,
            megatron=True,
            **{PINS[k]: v for k, v in pins.items()},
        )
    return found


def describe(stack: Stack, lay: Layout) -> str:
    """The layout in words, named as the stack names it."""
    text = lay.describe()
    if stack.name == "fsdp":
        text = text.replace("ZeRO-3", "FSDP full shard")
    return text + (", optimizer state on the host (offload)" if lay.offload else "")


def taken(stack: Stack, lay: Layout) -> str:
    """The name in ``STACKS`` of what ``lay`` runs as: the stack asked for, or for the
    fastest, the one its layout is."""
    if stack.name != "fastest":
        return stack.name
    if lay.megatron:
        return "megatron"
    return f"zero{lay.zero}" if lay.zero else "ddp"


def launch(stack: Stack, lay: Layout) -> str:
    """What to run ``lay`` with under ``stack``."""
    m, a = lay.micro_batch, lay.accumulation
    ckpt = lay.checkpointing
    if stack.name == "fsdp":
        return (
            f"torchrun --nproc_per_node {min(lay.devices, 8)} (x {-(-lay.devices // 8)} "
            f"nodes) with TrainingArguments(fsdp='full_shard auto_wrap', "
            f"per_device_train_batch_size={m}, gradient_accumulation_steps={a}, "
            f"gradient_checkpointing={ckpt})"
        )
    if stack.name == "optimum-habana":
        return (
            f"optimum-habana: python gaudi_spawn.py --world_size {lay.devices} --use_deepspeed "
            f"run_lora_clm.py --deepspeed <ZeRO-3 config> --per_device_train_batch_size {m} "
            f"--gradient_accumulation_steps {a} --gradient_checkpointing --use_habana "
            "--use_lazy_mode"
        )
    if lay.offload:
        return (
            f"deepspeed (world size {lay.devices}) with a config of zero_optimization: "
            f"{{stage: {lay.zero}, offload_optimizer: {{device: cpu}}}}, "
            f"train_micro_batch_size_per_gpu {m}, gradient_accumulation_steps {a}"
            + (", gradient checkpointing" if ckpt else "")
        )
    if stack.megatron and stack.name == "megatron":
        return lay.how(megatron=True)
    return lay.how()


def check_batch(stack: Stack, batch_size, global_batch, num_devices) -> None:
    """Refuse a step that no layout of ``stack`` runs: one of ``batch_size`` and
    ``global_batch``, and a global batch that its data-parallel replicas cannot share evenly
    (tensor, pipeline and context parallel can take devices only where the stack has them)."""
    if (batch_size is None) == (global_batch is None):
        raise ValueError(
            "pass one of batch_size= (samples a device a step, e.g. batch_size=8) and "
            "global_batch= (samples a step over all devices, e.g. global_batch=1024), "
            f"not {'both' if batch_size is not None else 'neither'}"
        )
    if stack.micro and batch_size and batch_size % stack.micro:
        raise ValueError(
            f"strategy: mb={stack.micro} does not divide batch_size={batch_size}, a device's "
            "samples a step, which run in micro-batches of mb: pass a batch_size it divides"
        )
    replicas = None if num_devices is None else num_devices // stack.replica
    if replicas is None or batch_size or (stack.megatron and stack.replica == 1):
        return
    if global_batch % replicas:
        fewer = max(n for n in range(1, replicas) if global_batch % n == 0) * stack.replica
        raise ValueError(
            f"global_batch={global_batch} on num_devices={num_devices} under {stack.title}: "
            f"its {replicas} data-parallel replicas each take the same whole samples a step, "
            f"so they must divide the global batch: pass num_devices={fewer} (or another "
            "such count), or strategy='megatron' (or None) for tensor, pipeline and context "
            "parallel to take the devices the replicas cannot"
        )
