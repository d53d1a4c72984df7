"""Static-shape batching: length buckets, batch-dimension padding and packing.

On Gaudi every new input shape compiles a new graph (seconds each, cached afterwards), so
dynamic padding, whose batch shape follows the longest sequence of each random batch,
keeps compiling; padding everything to ``max_length`` compiles once but computes mostly
padding. This module takes the middle road:

- ``buckets`` picks at most ``k`` sequence lengths that minimise padding (exact dynamic
  programming over the length histogram);
- ``BucketBatchSampler`` groups examples of similar length into batches (the collators
  that pad each batch to its bucket, and packing, are in ``batching``);
- ``padding_stats``, ``tradeoff`` and ``benchmark`` measure what each strategy wastes.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np

STRATEGIES = ("pad_to_max", "dynamic", "bucketed", "packed")
LABEL_PAD = -100  # CrossEntropyLoss's default ignore_index: such labels add no loss


# --------------------------------------------------------------------------- buckets
def _as_lengths(lengths, max_length: int | None = None) -> np.ndarray:
    """Lengths as a 1-d int64 array, truncated at ``max_length``."""
    x = np.asarray(getattr(lengths, "lengths", lengths), dtype=np.int64).ravel()
    if x.size == 0:
        raise ValueError("lengths is empty")
    if x.min() < 0:
        raise ValueError("lengths must be non-negative")
    return np.minimum(x, max_length) if max_length is not None else x


def lengths_of(dataset, column: str = "input_ids") -> np.ndarray:
    """Per-row lengths of ``column`` in a ``datasets.Dataset`` or a list of rows."""
    if hasattr(dataset, "column_names"):
        return np.array([len(x) for x in dataset[column]], dtype=np.int64)
    return np.array([len(row[column]) for row in dataset], dtype=np.int64)


def _chunk_ends(total: np.ndarray, n: int, batch_size: int) -> np.ndarray:
    """How many batches end among the first ``total`` rows of the bucket-sorted order.

    The sampler puts the partial batch (``n % batch_size`` rows) first, then full batches,
    so batches end at rows ``r - 1, r - 1 + batch_size, ...`` with ``r = n % batch_size``.
    """
    first_end = (n % batch_size - 1) % batch_size
    return (total - first_end - 1 + batch_size) // batch_size


def buckets(lengths, k: int = 8, max_length: int | None = None,
            batch_size: int | None = None) -> list[int]:
    """Bucket boundaries (sequence lengths) that minimise padding, by exact dynamic programming.

    Each sequence is padded up to the smallest boundary at or above its length. Every
    boundary is a distinct length of the data (an optimal one always is) and the largest
    is the longest length, capped at ``max_length``.

    Parameters
    ----------
    lengths : array-like of int or LengthStats
        Token length of every example (``wb.dataset(...).lengths(tok)`` or ``lengths_of``).
    k : int
        At most this many boundaries, i.e. static shapes. Fewer are returned when more
        would not reduce padding.
    max_length : int, optional
        Lengths above it count as ``max_length`` (they are truncated there).
    batch_size : int, optional
        None: minimise the pad tokens of each sequence padded to its boundary. An int:
        minimise the tokens computed by ``BucketBatchSampler`` plus ``BucketCollator`` at
        this batch size, which also counts the rows spilled into the next bucket and the
        dummy rows of the one partial batch (exact too, with one replica).

    Returns
    -------
    list of int
        Sorted boundaries, at most ``k`` of them.

    Examples
    --------
    >>> buckets([3, 3, 4, 9, 10], k=2)
    [4, 10]
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    values, counts = np.unique(_as_lengths(lengths, max_length), return_counts=True)
    m, n = len(values), int(counts.sum())
    kk = min(int(k), m)
    rows = np.concatenate(([0], np.cumsum(counts)))  # rows[j + 1]: rows with length <= values[j]
    tokens = np.concatenate(([0], np.cumsum(counts * values)))

    def cost(prev: np.ndarray, j: int) -> np.ndarray:
        """Cost of one bucket holding values[prev + 1 .. j], padded to values[j]."""
        if batch_size is None:  # pad tokens of its sequences
            return values[j] * (rows[j + 1] - rows[prev + 1]) - (tokens[j + 1] - tokens[prev + 1])
        ends = _chunk_ends(rows[j + 1], n, batch_size) - _chunk_ends(rows[prev + 1], n, batch_size)
        return batch_size * values[j] * ends  # tokens computed by the batches ending in it

    # best[b, j]: least cost of covering values[0..j] with b buckets, the last ending at j
    best = np.full((kk + 1, m), np.iinfo(np.int64).max // 4, dtype=np.int64)
    back = np.zeros((kk + 1, m), dtype=np.int64)
    best[1] = [cost(np.array(-1), j) for j in range(m)]
    for b in range(2, kk + 1):
        for j in range(b - 1, m):
            prev = np.arange(b - 2, j)
            cand = best[b - 1, prev] + cost(prev, j)
            t = int(np.argmin(cand))
            best[b, j], back[b, j] = cand[t], prev[t]
    nb = min(range(1, kk + 1), key=lambda b: (best[b, m - 1], b))  # fewest shapes at the optimum
    out, j = [], m - 1
    for b in range(nb, 0, -1):
        out.append(int(values[j]))
        j = int(back[b, j])
    return sorted(out)


def padding_cost(lengths, boundaries, max_length: int | None = None) -> int:
    """Pad tokens when each sequence is padded to the smallest boundary >= its length."""
    x, bounds = _as_lengths(lengths, max_length), np.asarray(sorted(boundaries))
    if x.max() > bounds[-1]:
        raise ValueError(f"a sequence of {x.max()} tokens exceeds the largest boundary {bounds[-1]}")
    return int((bounds[np.searchsorted(bounds, x)] - x).sum())


def check_boundaries(boundaries) -> list[int]:
    """Sorted, distinct, positive boundaries."""
    bounds = sorted({int(b) for b in boundaries})
    if not bounds or bounds[0] < 1:
        raise ValueError(f"boundaries must be positive lengths, got {boundaries!r}")
    return bounds


# --------------------------------------------------------------------------- sampler
class BucketBatchSampler:
    """Batches of indices grouped by length bucket, for ``DataLoader(batch_sampler=...)``.

    Each epoch the examples of every bucket are shuffled, the buckets are laid end to end
    from the shortest, and that order is cut into batches, the one partial batch
    (``len(lengths) % batch_size`` rows, made of the shortest examples) first; then the
    batch order is shuffled. A bucket's last rows share a batch with the next bucket's
    first (padded to the longer boundary) rather than leaving a partial batch per bucket.
    The order depends only on ``(seed, epoch)``: call ``set_epoch`` at each epoch. With
    ``drop_last`` the dropped rows come from the shortest bucket.

    Parameters
    ----------
    lengths : array-like of int
        Token length of every example (lengths above the largest boundary count in the
        last bucket: truncation at max_length puts them there).
    boundaries : list of int
        From ``buckets``.
    batch_size : int
        Rows per batch.
    seed : int
        Shuffling seed.
    drop_last : bool
        Drop the partial batch (and, with several replicas, the batches that would leave
        the replicas unequal) instead of keeping it (and repeating batches from the start).
    num_replicas, rank : int
        Shard the batches across data-parallel workers: every rank gets the same number.
    shuffle : bool
        False keeps the bucket order and no randomness (for evaluation).
    """

    def __init__(self, lengths, boundaries, batch_size: int, seed: int = 0, drop_last: bool = False,
                 num_replicas: int = 1, rank: int = 0, shuffle: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        self.lengths = _as_lengths(lengths)
        self.boundaries = check_boundaries(boundaries)
        self.batch_size, self.seed, self.drop_last = int(batch_size), int(seed), drop_last
        self.num_replicas, self.rank, self.shuffle = int(num_replicas), int(rank), shuffle
        self.epoch = 0
        which = np.minimum(np.searchsorted(self.boundaries, self.lengths), len(self.boundaries) - 1)
        self._members = [np.flatnonzero(which == b) for b in range(len(self.boundaries))]

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle of this epoch (the Trainer calls it)."""
        self.epoch = int(epoch)

    def _total(self) -> int:
        """Batches per epoch over all replicas, before sharding."""
        n, bs = len(self.lengths), self.batch_size
        return n // bs + (0 if self.drop_last or n % bs == 0 else 1)

    def __len__(self) -> int:
        total, r = self._total(), self.num_replicas
        return total // r if self.drop_last else math.ceil(total / r)

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        """Every replica's batches of one epoch, in order (before sharding)."""
        rng = np.random.default_rng([self.seed, self.epoch if epoch is None else epoch])
        order = np.concatenate([rng.permutation(m) if self.shuffle else m for m in self._members])
        bs, r = self.batch_size, len(order) % self.batch_size
        # one partial batch, of the shortest rows: filling it with dummy rows costs least
        out = [order[:r]] if r and not self.drop_last else []
        out += [order[s:s + bs] for s in range(r, len(order) - bs + 1, bs)]
        if self.shuffle:
            out = [out[i] for i in rng.permutation(len(out))]
        return [b.tolist() for b in out]

    def __iter__(self):
        batches, reps = self.batches(), self.num_replicas
        if reps > 1:
            if self.drop_last:
                batches = batches[:len(batches) // reps * reps]
            elif batches:
                batches += [batches[i % len(batches)] for i in range((-len(batches)) % reps)]
            batches = batches[self.rank::reps]
        return iter(batches)


# --------------------------------------------------------------------------- statistics
def padding_stats(lengths, strategy: str, batch_size: int, max_length: int | None = None,
                  k: int = 8, seed: int = 0) -> dict[str, Any]:
    """Padding waste and static shapes of one epoch under a batching strategy.

    Parameters
    ----------
    lengths : array-like of int
        Token length of every example (truncated at ``max_length``, except for packing).
    strategy : {"pad_to_max", "dynamic", "bucketed", "packed"}
        pad_to_max: every batch padded to ``max_length`` (the last one has fewer rows).
        dynamic: random batches padded to their longest. bucketed: ``BucketBatchSampler``
        and ``BucketCollator`` with ``buckets(..., batch_size=batch_size)``. packed:
        documents plus one EOS each, packed into blocks of ``max_length``, tail dropped,
        the last batch filled with dummy rows.
    batch_size, max_length, k, seed
        Batch rows, truncation length (or block length), buckets, shuffling seed.

    Returns
    -------
    dict
        ``waste_pct`` (pad tokens / tokens computed, in %), ``shapes`` (distinct batch
        shapes), ``useful_tokens_per_step``, ``steps``, ``useful_tokens``,
        ``computed_tokens``, and ``boundaries`` (bucketed) or ``lost_tokens`` (packed).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    raw = _as_lengths(lengths)
    max_length = int(max_length or raw.max())
    x = np.minimum(raw, max_length)
    extra: dict[str, Any] = {}
    useful = int(x.sum())
    if strategy == "pad_to_max":
        sizes = [min(batch_size, len(x) - s) for s in range(0, len(x), batch_size)]
        shapes = [(rows, max_length) for rows in sizes]
        computed = len(x) * max_length
    elif strategy == "dynamic":
        order = np.random.default_rng(seed).permutation(len(x))
        shapes = [(len(b), int(x[b].max())) for b in np.split(order, range(batch_size, len(x), batch_size))]
        computed = sum(rows * length for rows, length in shapes)
    elif strategy == "bucketed":
        bounds = buckets(x, k=k, batch_size=batch_size)
        shapes = [(batch_size, bounds[int(np.searchsorted(bounds, x[b].max()))])
                  for b in BucketBatchSampler(x, bounds, batch_size, seed=seed)]
        computed = sum(rows * length for rows, length in shapes)
        extra["boundaries"] = bounds
    else:
        stream = int(raw.sum() + len(raw))  # one EOS after each document
        blocks = stream // max_length
        shapes = [(batch_size, max_length)] * math.ceil(blocks / batch_size)  # dummy rows fill the last
        computed = len(shapes) * batch_size * max_length
        useful = blocks * max_length
        extra["lost_tokens"] = stream - useful
    steps = len(shapes)
    return {"strategy": strategy, "waste_pct": 100.0 * (1 - useful / computed) if computed else 0.0,
            "shapes": len(set(shapes)), "useful_tokens_per_step": useful / max(steps, 1), "steps": steps,
            "useful_tokens": useful, "computed_tokens": int(computed), **extra}


def _tradeoff_rows(lengths, batch_size: int, max_length: int | None, ks, seed: int) -> list[dict]:
    """One row per k: boundaries, waste and shapes (JSON-ready)."""
    rows = []
    for k in ks:
        s = padding_stats(lengths, "bucketed", batch_size, max_length, k=k, seed=seed)
        rows.append({"k": int(k), "boundaries": s["boundaries"], "waste_pct": s["waste_pct"],
                     "shapes": s["shapes"], "useful_tokens_per_step": s["useful_tokens_per_step"]})
    return rows


def tradeoff(lengths, batch_size: int, max_length: int | None = None, ks=(4, 8, 16), seed: int = 0):
    """Padding waste against static shapes for several bucket counts ``k``.

    Parameters
    ----------
    lengths : array-like of int
        Token length of every example.
    batch_size, max_length : int
        As in training.
    ks : sequence of int
        Bucket counts to compare.

    Returns
    -------
    pandas.DataFrame
        Columns k, boundaries, waste_pct, shapes, useful_tokens_per_step.
    """
    import pandas as pd

    return pd.DataFrame(_tradeoff_rows(lengths, batch_size, max_length, ks, seed))


# --------------------------------------------------------------------------- benchmark
class _Contender:
    """One model, its optimizer and an endless stream of batches under one strategy."""

    def __init__(self, model, loader, sampler, dev, dtype):
        import torch

        self.model, self.loader, self.sampler, self.dev, self.dtype = model, loader, sampler, dev, dtype
        self.model.to(dev.torch_device).train()
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=dev.kind in ("cuda", "cpu"))
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
        """One forward, backward and AdamW step; returns the batch's non-pad tokens."""
        import torch

        batch = self._next()
        useful = int(batch["attention_mask"].sum())
        batch = {k: v.to(self.dev.torch_device) for k, v in batch.items()}
        with torch.autocast(self.dev.backend.torch_device, dtype=self.dtype, enabled=self.dtype is not None):
            loss = self.model(**batch).loss
        loss.backward()
        self.dev.mark_step()  # HPU lazy mode: run the graph accumulated so far
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.dev.mark_step()
        return useful

    def timed(self, steps: int) -> tuple[int, float]:
        """(non-pad tokens, seconds) of ``steps`` steps between two synchronisations."""
        self.dev.synchronize()  # queued device work must finish before the clock is read
        t0, useful = time.perf_counter(), 0
        for _ in range(steps):
            useful += self.step()
        self.dev.synchronize()
        return useful, time.perf_counter() - t0


def _epoch_shape_stats(loader) -> dict[str, Any]:
    """Waste and distinct shapes of one pass over a loader (the batches as collated)."""
    shapes, useful, computed = set(), 0, 0
    for batch in loader:
        shapes.add(tuple(batch["input_ids"].shape))
        useful += int(batch["attention_mask"].sum())
        computed += batch["input_ids"].numel()
    return {"waste_pct": 100.0 * (1 - useful / computed), "shapes": len(shapes)}


def _bench_models(size: str) -> dict:
    """The BERT and GPT-2 specs of the shapes benchmark: ``tiny`` (the catalog's tiny models)
    or ``base`` (random-init BERT-base and GPT-2-124M shapes: on a GPU the tiny models are
    bound by kernel launches, so padding costs them almost nothing and the trade-off hides)."""
    from .catalog import model as as_model

    if size == "tiny":
        return {"bert": as_model("bert"), "gpt2": as_model("gpt2")}
    if size == "base":
        from .bench import _engine_setup

        return {"bert": _engine_setup("bert-base")[0], "gpt2": _engine_setup("gpt2-124m")[0]}
    raise ValueError(f"size must be 'tiny' or 'base', got {size!r}")


def benchmark(steps: int = 30, repeats: int = 3, batch_size: int = 16, max_length: int = 128,
              device: str = "cpu", k: int = 8, warmup: int = 3, precision: str = "auto",
              seed: int = 0, size: str = "tiny") -> dict[str, Any]:
    """Useful tokens/s of pad-to-max, dynamic padding, bucketing and packing, side by side.

    BERT on docstrings-topic and GPT-2 on docstrings-lm (``size``: ``tiny`` or ``base``,
    see ``_bench_models``) train (forward, backward, AdamW) under each strategy in one
    process. Each of ``repeats`` rounds runs ``warmup`` untimed steps per contender, then
    ``steps`` timed steps each, interleaved five steps at a time; the device is synchronised before every clock reading; medians over the
    rounds are reported. Waste and shapes come from one pass over each loader.

    Returns
    -------
    dict
        ``bench``, ``device``, ``config``, ``results`` (per ``model/strategy``),
        ``ratios``, ``figures`` and ``tradeoff`` (docstrings-topic, several k).
    """
    import torch
    import transformers

    from .data import dataset as as_dataset
    from .device import device as pick
    from .engine import _collator, _precision

    specs = _bench_models(size)
    dev = pick(device)
    precision = _precision(dev, precision)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    setups = {"bert": ("docstrings-topic", "classification", ("pad_to_max", "dynamic", "bucketed")),
              "gpt2": ("docstrings-lm", "causal_lm", ("pad_to_max", "dynamic", "bucketed", "packed"))}
    contenders: dict[str, _Contender] = {}
    results: dict[str, dict[str, Any]] = {}
    boundaries: dict[str, list[int]] = {}
    all_lengths: dict[str, np.ndarray] = {}
    for name, (data_name, task, strategies) in setups.items():
        spec, data = specs[name], as_dataset(data_name)
        tok = spec.load_tokenizer()
        train = data.prepare(tok, max_length=max_length)["train"]
        lengths = all_lengths[name] = lengths_of(train)
        bounds = boundaries[name] = buckets(lengths, k=k, max_length=max_length, batch_size=batch_size)
        blocks = pack(train, max_length, tok.eos_token_id) if "packed" in strategies else None

        def loader(strategy, task=task, tok=tok, train=train, lengths=lengths, bounds=bounds, blocks=blocks):
            """A fresh (loader, sampler) of one strategy."""
            dl = torch.utils.data.DataLoader
            if strategy == "bucketed":
                sampler = BucketBatchSampler(lengths, bounds, batch_size, seed=seed)
                return dl(train, batch_sampler=sampler,
                          collate_fn=BucketCollator(tok, bounds, batch_size, task=task)), sampler
            if strategy == "packed":
                collate = BucketCollator(tok, [max_length], batch_size, task=task)
            else:
                padding = "max_length" if strategy == "pad_to_max" else "longest"
                collate = _collator(task, tok, None, padding, max_length)
            return dl(blocks if strategy == "packed" else train, batch_size=batch_size, shuffle=True,
                      generator=torch.Generator().manual_seed(seed), collate_fn=collate), None

        for strategy in strategies:
            key = f"{name}/{strategy}"
            results[key] = {"data": data_name, **_epoch_shape_stats(loader(strategy)[0])}
            transformers.set_seed(seed)  # every strategy starts from the same weights
            model = spec.build(num_labels=data.num_labels)[0]
            contenders[key] = _Contender(model, *loader(strategy), dev, dtype)

    samples: dict[str, list[dict[str, float]]] = {key: [] for key in contenders}
    names, chunk = list(contenders), max(1, min(5, steps))
    for _ in range(repeats):
        for c in contenders.values():
            for _ in range(warmup):
                c.step()
        acc = {key: [0, 0.0] for key in names}
        # Interleaved in chunks of a few steps, the order rotated every chunk, so that a
        # noisy neighbour (a shared CPU) slows every contender alike.
        for i, start in enumerate(range(0, steps, chunk)):
            n = min(chunk, steps - start)
            for key in names[i % len(names):] + names[:i % len(names)]:
                useful, dt = contenders[key].timed(n)
                acc[key][0] += useful
                acc[key][1] += dt
        for key, (useful, dt) in acc.items():
            samples[key].append({"useful_tokens_per_s": useful / dt, "steps_per_s": steps / dt})
    for key, runs in samples.items():
        for field in ("useful_tokens_per_s", "steps_per_s"):
            results[key][field] = statistics.median(s[field] for s in runs)
        results[key]["all"] = [s["useful_tokens_per_s"] for s in runs]

    def tps(key: str) -> float:
        return results[key]["useful_tokens_per_s"]

    return {
        "bench": "shapes", "device": dev.to_dict(), "precision": precision,
        "config": {"models": {"bert": f"{size} BERT ({specs['bert'].num_params:,} parameters), "
                                      "docstrings-topic (classification)",
                              "gpt2": f"{size} GPT-2 ({specs['gpt2'].num_params:,} parameters), "
                                      "docstrings-lm (causal LM)"},
                   "size": size,
                   "batch_size": batch_size, "max_length": max_length, "k": k, "boundaries": boundaries,
                   "warmup_steps": warmup, "timed_steps": steps, "repeats": repeats, "seed": seed},
        "results": results,
        "ratios": {"bucketed_vs_pad_to_max": tps("bert/bucketed") / tps("bert/pad_to_max"),
                   "bucketed_vs_dynamic": tps("bert/bucketed") / tps("bert/dynamic"),
                   "packed_vs_pad_to_max": tps("gpt2/packed") / tps("gpt2/pad_to_max"),
                   "packed_vs_dynamic": tps("gpt2/packed") / tps("gpt2/dynamic"),
                   "gpt2_bucketed_vs_pad_to_max": tps("gpt2/bucketed") / tps("gpt2/pad_to_max")},
        "figures": {"bucketed_waste_pct": results["bert/bucketed"]["waste_pct"],
                    "bucketed_shapes": results["bert/bucketed"]["shapes"],
                    "packed_waste_pct": results["gpt2/packed"]["waste_pct"],
                    "packed_shapes": results["gpt2/packed"]["shapes"]},
        "tradeoff": _tradeoff_rows(all_lengths["bert"], batch_size, max_length, (4, 8, 16, 32), seed),
    }
