"""What the benchmarks time: the raw PyTorch loop, the plain Trainer and wb.train, and the
interleaving that runs them side by side.

Every contender takes ``(spec, data, device, warmup, steps, batch_size, seq_len,
precision)`` and returns the steps/s of its timed steps; the clock is read only after the
device has been synchronised, and warm-up steps are never timed.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from transformers import TrainerCallback

from workbench.catalog.modelspec import model as as_model
from workbench.data.dataset import dataset as as_dataset
from workbench.shapes.batching import collator
from workbench.training.attachment import attach
from workbench.training.engine import train

__all__ = [
    "SHAPES",
    "RawLoop",
    "engine_setup",
    "interleaved",
    "interleaved_chunks",
    "plain_trainer",
    "raw_loop",
    "rotated",
    "timer",
    "wb_train",
]

# Random-init models of well-known shapes (the bundled tokenizers use fewer ids than the
# embedding tables hold; FLOPs and memory are those of the real shapes).
SHAPES = {
    # BERT-mini: big enough that a CPU step takes tens of milliseconds
    "bert-mini": (
        "bert",
        {
            "num_hidden_layers": 4,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "intermediate_size": 1024,
        },
        "docstrings-topic",
    ),
    "bert-base": (
        "bert",
        {
            "num_hidden_layers": 12,
            "hidden_size": 768,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "vocab_size": 30522,
        },
        "docstrings-topic",
    ),
    # GPT-2-mini: the harness's own tests and quick looks on a CPU
    "gpt2-mini": (
        "gpt2",
        {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 1024},
        "docstrings-lm",
    ),
    "gpt2-124m": (
        "gpt2",
        {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024, "vocab_size": 50257},
        "docstrings-lm",
    ),
}


def engine_setup(shape: str = "bert-mini", config: dict | None = None):
    """(ModelSpec, DataSpec) of one of ``SHAPES``; ``config`` overrides fields of its config."""
    if shape not in SHAPES:
        raise ValueError(f"unknown model shape {shape!r}; known: {', '.join(SHAPES)}")
    family, overrides, data = SHAPES[shape]
    return as_model(family, size="tiny", **{**overrides, **(config or {})}), as_dataset(data)


class _Timer(TrainerCallback):
    """A TrainerCallback that notes the clock at two step boundaries (after a sync)."""

    def __init__(self, device, start: int, end: int):
        self.device, self.start, self.end = device, start, end
        self.t: dict[int, float] = {}

    def on_step_end(self, args, state, control, **kw):
        if state.global_step in (self.start, self.end):
            self.device.synchronize()  # queued device work must finish before the clock is read
            self.t[state.global_step] = time.perf_counter()

    def steps_per_s(self) -> float:
        return (self.end - self.start) / (self.t[self.end] - self.t[self.start])


def timer(device, start: int, end: int):
    """A Trainer callback timing the steps after ``start`` up to ``end``; ``.steps_per_s()``."""
    return _Timer(device, start, end)


class RawLoop:
    """The reference: forward, backward, AdamW step over an endless loader; nothing else
    (no logging, no callbacks). ``sampler``: a batch sampler told of each new epoch."""

    def __init__(self, model, loader, device, precision: str, sampler=None):
        import torch

        self.model, self.loader, self.sampler, self.device = model, loader, sampler, device
        self.model.to(device.torch_device).train()
        fused = (
            device.backend.policy.optimizer == "adamw_torch_fused"
        )  # the Trainer's choice on this backend
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self.epoch, self.it = 0, iter(loader)

    def _next(self):
        """The next batch, starting a new epoch (and its shuffle) when one ends."""
        try:
            return next(self.it)
        except StopIteration:
            self.epoch += 1
            if self.sampler is not None:
                self.sampler.set_epoch(self.epoch)
            self.it = iter(self.loader)
            return next(self.it)

    def step(self) -> int:
        """One forward, backward and optimizer step; returns the batch's non-pad tokens."""
        import torch

        batch = self._next()
        mask = batch.get("attention_mask")  # still on the host: counting it waits for nothing
        useful = int(mask.sum()) if mask is not None else batch["input_ids"].numel()
        batch = {k: v.to(self.device.torch_device) for k, v in batch.items()}
        with torch.autocast(
            self.device.backend.torch_device, dtype=self.dtype, enabled=self.dtype is not None
        ):
            loss = self.model(**batch).loss
        loss.backward()
        self.device.mark_step()  # HPU lazy mode: run the graph accumulated so far
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.device.mark_step()
        return useful

    def timed(self, steps: int) -> tuple[int, float]:
        """(non-pad tokens, seconds) of ``steps`` steps between two synchronisations."""
        self.device.synchronize()  # queued device work must finish before the clock is read
        t0, useful = time.perf_counter(), 0
        for _ in range(steps):
            useful += self.step()
        self.device.synchronize()
        return useful, time.perf_counter() - t0


def raw_loop(
    spec, data, device, warmup, steps, batch_size, seq_len, precision, seed=0, log_every=None
):
    """``RawLoop`` on the batches wb.train sees (padded to ``seq_len``), shuffled; steps/s."""
    import torch
    import transformers

    transformers.set_seed(seed)
    model, tok = spec.build(num_labels=data.num_labels)
    train_split = data.prepare(tok, max_length=seq_len)["train"]
    collate = collator(spec.task, tok, model, "max_length", seq_len)
    loader = torch.utils.data.DataLoader(
        train_split,
        batch_size=batch_size,
        shuffle=True,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(seed),
        drop_last=True,
    )
    loop = RawLoop(model, loader, device, precision)
    for _ in range(warmup):
        loop.step()
    return steps / loop.timed(steps)[1]


def plain_trainer(
    spec,
    data,
    device,
    warmup,
    steps,
    batch_size,
    seq_len,
    precision,
    seed=0,
    log_every=10,
    packed=False,
    compile=False,
    attached=False,
):
    """transformers.Trainer with its defaults (what a user writes without the workbench), on
    the same batches as wb.train: padded to ``seq_len``, or (``packed``) the same packed
    blocks as ``padding="packed"`` with the Trainer's default collator. ``log_every=0``:
    the Trainer's own default cadence; ``compile``: ``torch_compile=True``; ``attached``:
    the same Trainer with ``wb.attach(trainer, live=False)`` (its run in a temporary
    directory). Steps/s."""
    import transformers

    from workbench.shapes.batching import pack

    transformers.set_seed(seed)
    model, tok = spec.build(num_labels=data.num_labels)
    train_split = data.prepare(tok, max_length=seq_len)["train"]
    if packed:
        train_split, collate = (
            pack(train_split, seq_len, tok.eos_token_id),
            transformers.default_data_collator,
        )
    else:
        collate = collator(spec.task, tok, model, "max_length", seq_len)
    clock = timer(device, warmup, warmup + steps)
    cadence = {"logging_steps": log_every} if log_every else {}
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=batch_size,
            max_steps=warmup + steps,
            learning_rate=1e-3,
            report_to="none",
            disable_tqdm=True,
            seed=seed,
            **cadence,
            use_cpu=device.kind == "cpu",
            bf16=precision == "bf16",
            fp16=precision == "fp16",
            torch_compile=compile,
        )
        trainer = transformers.Trainer(
            model=model,
            args=args,
            train_dataset=train_split,
            data_collator=collate,
            callbacks=[clock],
        )
        trainer.remove_callback(transformers.PrinterCallback)
        if attached:
            attach(trainer, live=False, run_dir=out)
        trainer.train()
    return clock.steps_per_s()


def wb_train(
    spec,
    data,
    device,
    warmup,
    steps,
    batch_size,
    seq_len,
    precision,
    seed=0,
    compile=None,
    log_every=10,
    padding="max_length",
    train_args=None,
):
    """wb.train headless, with its defaults (events, logging, device-aware choices); steps/s.
    ``train_args`` are further wb.train (TrainingArguments) fields; ``log_every=0``: wb.train's
    own default cadence."""
    clock = timer(device, warmup, warmup + steps)
    with tempfile.TemporaryDirectory() as out:
        # checkpoints as often as the plain Trainer's default (every 500 steps)
        train(
            spec,
            data,
            max_steps=warmup + steps,
            batch_size=batch_size,
            lr=1e-3,
            max_length=seq_len,
            padding=padding,
            precision=precision,
            device=device.kind,
            live=False,
            run_dir=out,
            save_every=500,
            log_every=log_every or None,
            seed=seed,
            compile=compile,
            callbacks=[clock],
            **(train_args or {}),
        )
    return clock.steps_per_s()


def rotated(names: list[str], i: int) -> list[str]:
    """``names`` starting at the ``i``-th (cyclically): round ``i``'s order."""
    return names[i % len(names) :] + names[: i % len(names)]


def interleaved(ways: dict[str, Any], repeats: int, *args, **kwargs) -> dict[str, list[float]]:
    """Each way's result per round; the order rotates every round, so that no contender
    always goes first (and a noisy neighbour slows all of them alike)."""
    samples: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(repeats):
        for name in rotated(list(ways), r):
            samples[name].append(ways[name](*args, **kwargs))
    return samples


def interleaved_chunks(
    loops: dict[str, RawLoop], steps: int, chunk: int = 5
) -> dict[str, tuple[int, float]]:
    """(non-pad tokens, seconds) of ``steps`` steps of each loop, run ``chunk`` steps at a
    time with the order rotated every chunk, so that a noisy neighbour (a shared CPU) slows
    every loop alike."""
    acc = {key: (0, 0.0) for key in loops}
    chunk = max(1, min(chunk, steps))
    for i, start in enumerate(range(0, steps, chunk)):
        for key in rotated(list(loops), i):
            useful, dt = loops[key].timed(min(chunk, steps - start))
            acc[key] = (acc[key][0] + useful, acc[key][1] + dt)
    return acc
