"""Static-shape batching: length buckets, batch-dimension padding and packing.

On Gaudi every new input shape compiles a graph, so dynamic padding keeps compiling and
padding to ``max_length`` computes mostly padding. ``buckets`` picks at most ``k`` lengths that
minimise padding (exact dynamic programming over the length histogram); ``BucketBatchSampler``
groups examples of similar length; ``padding_stats`` and ``tradeoff_rows`` measure the waste.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

STRATEGIES = ("max_length", "longest", "bucketed", "packed")
LABEL_PAD = -100  # CrossEntropyLoss's default ignore_index: such labels add no loss


@dataclass
class LengthStats:
    """Token lengths of a dataset's text column (no truncation)."""

    lengths: Any  # numpy array of ints

    def to_dict(self) -> dict[str, float]:
        x = np.asarray(self.lengths)
        return {
            "count": int(x.size),
            "mean": float(x.mean()),
            "min": int(x.min()),
            **{f"p{q}": float(np.percentile(x, q)) for q in (50, 90, 99)},
            "max": int(x.max()),
        }

    def __getitem__(self, key: str) -> float:
        return self.to_dict()[key]

    def padding(
        self,
        strategy: str,
        batch_size: int,
        max_length: int | None = None,
        k: int = 8,
        seed: int = 0,
    ) -> dict[str, Any]:
        """``padding_stats`` of these lengths: the padding waste and static shapes of one epoch
        under ``strategy`` (``"max_length"``, ``"longest"``, ``"bucketed"``, ``"packed"``, as
        ``wb.train(padding=...)`` shapes batches); the same arguments and the same dict.

        Examples
        --------
        >>> stats = LengthStats(np.array([3, 5, 8, 8]))
        >>> stats.padding("max_length", batch_size=2, max_length=8)["waste_pct"]
        25.0
        """
        return padding_stats(self.lengths, strategy, batch_size, max_length, k=k, seed=seed)

    def __repr__(self) -> str:
        return "LengthStats(" + ", ".join(f"{k}={v:g}" for k, v in self.to_dict().items()) + ")"


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
    """How many batches end among the first ``total`` rows of the bucket-sorted order (the
    partial batch, ``r = n % batch_size`` rows, first: at rows ``r - 1 + i * batch_size``)."""
    first_end = (n % batch_size - 1) % batch_size
    return (total - first_end - 1 + batch_size) // batch_size


# Over 60 lines only through its numpy docstring (the algorithm explained); the code is short.
def buckets(
    lengths, k: int = 8, max_length: int | None = None, batch_size: int | None = None
) -> list[int]:
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

    def __init__(
        self,
        lengths,
        boundaries,
        batch_size: int,
        seed: int = 0,
        drop_last: bool = False,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
    ):
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
        out += [order[s : s + bs] for s in range(r, len(order) - bs + 1, bs)]
        if self.shuffle:
            out = [out[i] for i in rng.permutation(len(out))]
        return [b.tolist() for b in out]

    def length_of(self, batch) -> int:
        """The boundary a batch of these rows is padded to (its longest row's bucket)."""
        i = int(np.searchsorted(self.boundaries, self.lengths[batch].max()))
        return self.boundaries[min(i, len(self.boundaries) - 1)]

    def one_per_shape(self) -> list[list[int]]:
        """One batch of each sequence length an epoch's batches are padded to, longest first,
        for a static-shape device to compile before the first step (the lengths do not depend
        on the shuffle). Every replica gets the same batches."""
        first: dict[int, list[int]] = {}
        for batch in self.batches(0):
            first.setdefault(self.length_of(batch), batch)
        return [first[n] for n in sorted(first, reverse=True)]

    def __iter__(self):
        batches, reps = self.batches(), self.num_replicas
        if reps > 1:
            if self.drop_last:
                batches = batches[: len(batches) // reps * reps]
            elif batches:
                batches += [batches[i % len(batches)] for i in range((-len(batches)) % reps)]
            batches = batches[self.rank :: reps]
        return iter(batches)


# --------------------------------------------------------------------------- statistics
def padding_stats(
    lengths,
    strategy: str,
    batch_size: int,
    max_length: int | None = None,
    k: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """Padding waste and static shapes of one epoch under a batching strategy.

    Parameters
    ----------
    lengths : array-like of int
        Token length of every example (truncated at ``max_length``, except for packing).
    strategy : {"max_length", "longest", "bucketed", "packed"}
        max_length: every batch padded to ``max_length`` (the last one has fewer rows).
        longest: random batches padded to their longest. bucketed: ``BucketBatchSampler``
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
    if strategy == "max_length":
        sizes = [min(batch_size, len(x) - s) for s in range(0, len(x), batch_size)]
        shapes = [(rows, max_length) for rows in sizes]
        computed = len(x) * max_length
    elif strategy == "longest":
        order = np.random.default_rng(seed).permutation(len(x))
        shapes = [
            (len(b), int(x[b].max()))
            for b in np.split(order, range(batch_size, len(x), batch_size))
        ]
        computed = sum(rows * length for rows, length in shapes)
    elif strategy == "bucketed":
        bounds = buckets(x, k=k, batch_size=batch_size)
        shapes = [
            (batch_size, bounds[int(np.searchsorted(bounds, x[b].max()))])
            for b in BucketBatchSampler(x, bounds, batch_size, seed=seed)
        ]
        computed = sum(rows * length for rows, length in shapes)
        extra["boundaries"] = bounds
    else:
        stream = int(raw.sum() + len(raw))  # one EOS after each document
        blocks = stream // max_length
        # dummy rows fill the last
        shapes = [(batch_size, max_length)] * math.ceil(blocks / batch_size)
        computed = len(shapes) * batch_size * max_length
        useful = blocks * max_length
        extra["lost_tokens"] = stream - useful
    steps = len(shapes)
    return {
        "strategy": strategy,
        "waste_pct": 100.0 * (1 - useful / computed) if computed else 0.0,
        "shapes": len(set(shapes)),
        "useful_tokens_per_step": useful / max(steps, 1),
        "steps": steps,
        "useful_tokens": useful,
        "computed_tokens": int(computed),
        **extra,
    }


def tradeoff_rows(lengths, batch_size: int, max_length: int | None, ks, seed: int) -> list[dict]:
    """One row per k: boundaries, waste and shapes (JSON-ready)."""
    rows = []
    for k in ks:
        s = padding_stats(lengths, "bucketed", batch_size, max_length, k=k, seed=seed)
        rows.append(
            {
                "k": int(k),
                "boundaries": s["boundaries"],
                "waste_pct": s["waste_pct"],
                "shapes": s["shapes"],
                "useful_tokens_per_step": s["useful_tokens_per_step"],
            }
        )
    return rows
