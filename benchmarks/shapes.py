"""Pad-to-max vs dynamic padding vs bucketing vs packing: useful tokens/s, side by side."""

from __future__ import annotations

import statistics
from typing import Any

from workbench.backends.registry import device as pick
from workbench.catalog.modelspec import model as as_model
from workbench.data.dataset import dataset as as_dataset
from workbench.liblogs import quiet_libraries
from workbench.shapes.batching import BucketCollator, pack
from workbench.shapes.buckets import BucketBatchSampler, buckets, lengths_of, tradeoff_rows

from .contenders import RawLoop, collator, engine_setup, interleaved_chunks

# model -> (dataset, task, strategies); packing is for causal LMs only
SETUPS = {
    "bert": ("docstrings-topic", "classification", ("max_length", "longest", "bucketed")),
    "gpt2": ("docstrings-lm", "causal_lm", ("max_length", "longest", "bucketed", "packed")),
}


def bench_models(size: str) -> dict:
    """The BERT and GPT-2 specs of the shapes benchmark: ``tiny`` (the catalog's tiny models)
    or ``base`` (random-init BERT-base and GPT-2-124M shapes: on a GPU the tiny models are
    bound by kernel launches, so padding costs them almost nothing and the trade-off hides)."""
    if size == "tiny":
        return {"bert": as_model("bert"), "gpt2": as_model("gpt2")}
    if size == "base":
        return {"bert": engine_setup("bert-base")[0], "gpt2": engine_setup("gpt2-124m")[0]}
    raise ValueError(f"size must be 'tiny' or 'base', got {size!r}")


def _epoch_shape_stats(loader) -> dict[str, Any]:
    """Waste and distinct shapes of one pass over a loader (the batches as collated)."""
    shapes, useful, computed = set(), 0, 0
    for batch in loader:
        shapes.add(tuple(batch["input_ids"].shape))
        useful += int(batch["attention_mask"].sum())
        computed += batch["input_ids"].numel()
    return {"waste_pct": 100.0 * (1 - useful / computed), "shapes": len(shapes)}


class _Batches:
    """One model's training split, its lengths and buckets, and a loader per strategy."""

    def __init__(
        self,
        spec,
        data,
        task: str,
        packed: bool,
        batch_size: int,
        max_length: int,
        k: int,
        seed: int,
    ):
        self.task, self.batch_size, self.max_length, self.seed = task, batch_size, max_length, seed
        self.tok = spec.load_tokenizer()
        self.train = data.prepare(self.tok, max_length=max_length)["train"]
        self.lengths = lengths_of(self.train)
        self.bounds = buckets(self.lengths, k=k, max_length=max_length, batch_size=batch_size)
        self.blocks = pack(self.train, max_length, self.tok.eos_token_id) if packed else None

    def loader(self, strategy: str):
        """A fresh (loader, batch sampler or None) of one strategy."""
        import torch

        dl, n = torch.utils.data.DataLoader, self.batch_size
        if strategy == "bucketed":
            sampler = BucketBatchSampler(self.lengths, self.bounds, n, seed=self.seed)
            return dl(
                self.train,
                batch_sampler=sampler,
                collate_fn=BucketCollator(self.tok, self.bounds, n, task=self.task),
            ), sampler
        if strategy == "packed":
            collate = BucketCollator(self.tok, [self.max_length], n, task=self.task)
        else:
            padding = "max_length" if strategy == "max_length" else "longest"
            collate = collator(self.task, self.tok, None, padding, self.max_length)
        return dl(
            self.blocks if strategy == "packed" else self.train,
            batch_size=n,
            shuffle=True,
            generator=torch.Generator().manual_seed(self.seed),
            collate_fn=collate,
        ), None


def _measure(loops: dict[str, RawLoop], steps: int, repeats: int, warmup: int) -> dict[str, dict]:
    """Medians over ``repeats`` rounds of useful tokens/s and steps/s per loop; each round
    warms every loop up, then interleaves their timed steps a few at a time."""
    samples: dict[str, list[dict[str, float]]] = {key: [] for key in loops}
    for _ in range(repeats):
        for loop in loops.values():
            for _ in range(warmup):
                loop.step()
        for key, (useful, dt) in interleaved_chunks(loops, steps).items():
            samples[key].append({"useful_tokens_per_s": useful / dt, "steps_per_s": steps / dt})
    return {
        key: {
            **{
                f: statistics.median(s[f] for s in runs)
                for f in ("useful_tokens_per_s", "steps_per_s")
            },
            "all": [s["useful_tokens_per_s"] for s in runs],
        }
        for key, runs in samples.items()
    }


def _summary(results: dict[str, dict]) -> dict[str, dict]:
    """The ratios and figures of the report."""

    def tps(key: str) -> float:
        return results[key]["useful_tokens_per_s"]

    return {
        "ratios": {
            "bucketed_vs_max_length": tps("bert/bucketed") / tps("bert/max_length"),
            "bucketed_vs_longest": tps("bert/bucketed") / tps("bert/longest"),
            "packed_vs_max_length": tps("gpt2/packed") / tps("gpt2/max_length"),
            "packed_vs_longest": tps("gpt2/packed") / tps("gpt2/longest"),
            "gpt2_bucketed_vs_max_length": tps("gpt2/bucketed") / tps("gpt2/max_length"),
        },
        "figures": {
            "bucketed_waste_pct": results["bert/bucketed"]["waste_pct"],
            "bucketed_shapes": results["bert/bucketed"]["shapes"],
            "packed_waste_pct": results["gpt2/packed"]["waste_pct"],
            "packed_shapes": results["gpt2/packed"]["shapes"],
        },
    }


def run(
    steps: int = 30,
    repeats: int = 3,
    device: str = "auto",
    size: str = "tiny",
    batch_size: int = 16,
    max_length: int = 128,
    k: int = 8,
    warmup: int = 3,
    precision: str = "auto",
    seed: int = 0,
) -> dict[str, Any]:
    """Useful tokens/s of pad-to-max, dynamic padding, bucketing and packing, side by side.

    BERT on docstrings-topic and GPT-2 on docstrings-lm (``size``: ``tiny`` or ``base``,
    see ``bench_models``) train in the shared raw loop (forward, backward, AdamW) under each
    strategy in one process. Each of ``repeats`` rounds runs ``warmup`` untimed steps per
    contender, then ``steps`` timed steps each, interleaved five steps at a time; the device
    is synchronised before every clock reading; medians over the rounds are reported.
    Waste and shapes come from one pass over each loader.

    Returns
    -------
    dict
        ``bench``, ``device``, ``config``, ``results`` (per ``model/strategy``),
        ``ratios``, ``figures`` and ``tradeoff`` (docstrings-topic, several k).
    """
    import transformers

    specs = bench_models(size)
    dev = pick(device)
    precision = dev.resolve_precision(precision)
    loops: dict[str, RawLoop] = {}
    stats: dict[str, dict[str, Any]] = {}
    batches: dict[str, _Batches] = {}
    # quiet: datasets' bars of preparing and packing the data, transformers' loss_type notice
    with quiet_libraries():
        for name, (data_name, task, strategies) in SETUPS.items():
            spec, data = specs[name], as_dataset(data_name)
            b = batches[name] = _Batches(
                spec, data, task, "packed" in strategies, batch_size, max_length, k, seed
            )
            for strategy in strategies:
                key = f"{name}/{strategy}"
                stats[key] = {"data": data_name, **_epoch_shape_stats(b.loader(strategy)[0])}
                transformers.set_seed(seed)  # every strategy starts from the same weights
                model = spec.build(num_labels=data.num_labels)[0]
                loader, sampler = b.loader(strategy)
                loops[key] = RawLoop(model, loader, dev, precision, sampler=sampler)
        timings = _measure(loops, steps, repeats, warmup)
    results = {key: {**stats[key], **timing} for key, timing in timings.items()}
    return {
        "bench": "shapes",
        "device": dev.to_dict(),
        "precision": precision,
        "config": {
            "models": {
                "bert": f"{size} BERT ({specs['bert'].num_params:,} parameters), "
                "docstrings-topic (classification)",
                "gpt2": f"{size} GPT-2 ({specs['gpt2'].num_params:,} parameters), "
                "docstrings-lm (causal LM)",
            },
            "size": size,
            "batch_size": batch_size,
            "max_length": max_length,
            "k": k,
            "boundaries": {name: b.bounds for name, b in batches.items()},
            "warmup_steps": warmup,
            "timed_steps": steps,
            "repeats": repeats,
            "seed": seed,
        },
        "results": results,
        **_summary(results),
        "tradeoff": tradeoff_rows(
            batches["bert"].lengths, batch_size, max_length, (4, 8, 16, 32), seed
        ),
    }
