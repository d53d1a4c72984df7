"""Batches: collators that give every batch a static shape, packing, and token counting.

- ``BucketCollator`` pads each batch to its bucket's length (from ``shapes.buckets``) and
  to ``batch_size`` rows, so that training sees at most ``k`` static shapes;
- ``pack`` concatenates causal-LM documents into full blocks: one shape, almost no padding;
- ``CountingCollator`` wraps any collator and counts samples, real tokens and shapes on
  the CPU, for throughput without a device sync;
- ``collator`` is the plain transformers collator of a task.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from .buckets import LABEL_PAD, check_boundaries


# --------------------------------------------------------------------------- collator
class BucketCollator:
    """Pads a batch to a static shape: its bucket's length and ``batch_size`` rows.

    The sequence length becomes the smallest boundary at or above the batch's longest
    sequence; the batch is filled up to ``batch_size`` with dummy rows (all pad tokens,
    attention_mask 0, labels -100) that the loss ignores. Sequences are right-padded.

    Parameters
    ----------
    tokenizer : tokenizer or None
        Gives ``pad_token_id`` unless that is passed.
    boundaries : list of int
        From ``buckets``; ``[block_length]`` for packed rows.
    batch_size : int
        Rows of every batch (the sampler's batch size).
    task : {"classification", "causal_lm"}
        classification: ``labels`` is one int per row (dummy rows get -100). causal_lm:
        rows without labels get ``labels = input_ids`` with -100 at padding; rows with
        labels (from ``pack``) keep them, padded with -100.
    pad_token_id : int, optional
        Overrides the tokenizer's.
    label_pad : int
        Label of padding and dummy rows.
    pad_batch : bool
        False leaves the row count as it comes (one more shape: the partial batch).
    """

    def __init__(
        self,
        tokenizer,
        boundaries,
        batch_size: int,
        *,
        task: str = "classification",
        pad_token_id: int | None = None,
        label_pad: int = LABEL_PAD,
        pad_batch: bool = True,
    ):
        if pad_token_id is None:
            pad_token_id = getattr(tokenizer, "pad_token_id", None)
        if pad_token_id is None:
            raise ValueError("no pad token: pass pad_token_id= or a tokenizer that has one")
        if task not in ("classification", "causal_lm"):
            raise ValueError(f"task must be 'classification' or 'causal_lm', got {task!r}")
        self.boundaries = check_boundaries(boundaries)
        self.batch_size, self.task, self.pad_batch = int(batch_size), task, pad_batch
        self.pad = {"input_ids": int(pad_token_id), "labels": int(label_pad)}  # others pad with 0
        self.shapes: set[tuple[int, int]] = set()  # (rows, length) of every batch made so far

    def length_for(self, longest: int) -> int:
        """The static sequence length of a batch whose longest sequence is ``longest``."""
        i = int(np.searchsorted(self.boundaries, longest))
        if i == len(self.boundaries):
            raise ValueError(
                f"a sequence of {longest} tokens exceeds the largest boundary "
                f"{self.boundaries[-1]}; truncate to it or add a boundary"
            )
        return self.boundaries[i]

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        n = len(features)
        if self.pad_batch and n > self.batch_size:
            raise ValueError(f"got {n} rows for batch_size {self.batch_size}")
        # On Gaudi each distinct (rows, length) is one more compiled graph: the partial
        # batch is filled to batch_size rows, and lengths are only ever a boundary.
        rows = self.batch_size if self.pad_batch else n
        length = self.length_for(max(len(f["input_ids"]) for f in features))
        self.shapes.add((rows, length))
        out = {}
        for key, first in features[0].items():
            fill = self.pad.get(key, 0)
            if np.ndim(first) == 0:  # one value per row: class labels
                arr = np.full(rows, fill, dtype=np.asarray(first).dtype)
                arr[:n] = [f[key] for f in features]
            else:
                arr = np.full((rows, length), fill, dtype=np.int64)
                for i, f in enumerate(features):
                    arr[i, : len(f[key])] = f[key]
            out[key] = arr
        if "attention_mask" not in out:
            out["attention_mask"] = np.zeros((rows, length), dtype=np.int64)
            for i, f in enumerate(features):
                out["attention_mask"][i, : len(f["input_ids"])] = 1
        if self.task == "causal_lm" and "labels" not in out:
            # the model shifts labels itself; padding (attention_mask 0) takes no loss
            out["labels"] = np.where(
                out["attention_mask"] == 1, out["input_ids"], self.pad["labels"]
            )
        return {k: torch.from_numpy(v) for k, v in out.items()}


# --------------------------------------------------------------------------- packing
PACKINGS = ("concat", "isolated")


def _pack_ids(
    docs,
    block_length: int,
    eos_token_id: int,
    tail: str,
    pad_token_id: int,
    packing: str = "concat",
) -> dict:
    """Pack lists of token ids into blocks; the columns as lists of rows."""
    docs = [np.append(np.asarray(d, dtype=np.int64), eos_token_id) for d in docs]
    ids = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    start = np.zeros(len(ids), dtype=bool)  # first token of each document
    start[np.cumsum([0] + [len(d) for d in docs[:-1]])[: len(docs)]] = True
    mask = np.ones(len(ids), dtype=np.int64)
    n = len(ids) // block_length * block_length
    if tail == "pad" and n < len(ids):
        extra = block_length - (len(ids) - n)
        ids = np.concatenate([ids, np.full(extra, pad_token_id)])
        # padding: label -100, position 0
        start = np.concatenate([start, np.ones(extra, dtype=bool)])
        mask = np.concatenate([mask, np.zeros(extra, dtype=np.int64)])
        n = len(ids)
    ids, start, mask = ids[:n], start[:n], mask[:n]
    at = np.arange(n)
    if packing == "concat":  # one stream: every token predicts the next, positions run on
        labels = np.where(mask == 1, ids, LABEL_PAD)
        pos = at % block_length
    else:  # isolated: no loss for predicting a document from the one before
        labels = np.where(start, LABEL_PAD, ids)
        reset = start | (at % block_length == 0)  # positions restart at documents and at blocks
        pos = at - np.maximum.accumulate(np.where(reset, at, 0))
    cols = {"input_ids": ids, "labels": labels, "position_ids": pos, "attention_mask": mask}
    return {k: v.reshape(-1, block_length).tolist() for k, v in cols.items()}


def pack(
    data,
    block_length: int,
    eos_token_id: int,
    *,
    tail: str = "drop",
    pad_token_id: int | None = None,
    map_batch_size: int = 1000,
    packing: str = "concat",
):
    """Concatenate causal-LM documents, each followed by EOS, and cut them into blocks.

    Every block has exactly ``block_length`` tokens: one static shape and no padding
    (but for a padded tail). Two semantics (``packing``):

    - ``"concat"`` (GPT-2's and nanoGPT's recipe): the documents are one stream.
      ``labels`` equal ``input_ids`` (every token predicts the next, across document
      boundaries too) and ``position_ids`` run 0 .. block_length - 1 in every block;
      attention is plain causal over the block. The loss is that of the joined stream.
    - ``"isolated"``: each document is its own sequence. ``labels`` are -100 at the
      first token of each document (nothing predicts a document from the one before) and
      ``position_ids`` restart at 0 at each document start and at each block start (the
      rest of a document cut by a block boundary starts again at 0). Attention must stay
      inside each document: ``wb.train`` gives the model no attention mask, so that
      transformers builds a block-diagonal causal mask from the restarting positions.
      The loss is that of the documents trained one by one.

    Parameters
    ----------
    data : datasets.Dataset, datasets.DatasetDict or list of list of int
        A dataset with an ``input_ids`` column (other columns are dropped), or the ids.
    block_length : int
        Tokens per block.
    eos_token_id : int
        Separator appended to every document.
    tail : {"drop", "pad"}
        The last tokens that do not fill a block are dropped (default) or padded to a
        block (pad tokens, attention_mask 0, labels -100). A dataset is packed in chunks
        of ``map_batch_size`` documents, each with its own tail: at most
        ``block_length - 1`` tokens per chunk.
    pad_token_id : int, optional
        For ``tail="pad"``; default ``eos_token_id``.
    packing : {"concat", "isolated"}
        What the blocks mean (above).

    Returns
    -------
    datasets.Dataset (DatasetDict) or list of dict
        Rows with ``input_ids``, ``labels``, ``position_ids``, ``attention_mask``.
    """
    if tail not in ("drop", "pad"):
        raise ValueError(f"tail must be 'drop' or 'pad', got {tail!r}")
    if packing not in PACKINGS:
        raise ValueError(f"unknown packing {packing!r}; known: {', '.join(PACKINGS)}")
    if block_length < 2:
        raise ValueError(f"block_length must be at least 2, got {block_length}")
    pad = eos_token_id if pad_token_id is None else pad_token_id
    if hasattr(data, "map") and hasattr(data, "items"):  # a DatasetDict: every split
        return type(data)(
            {
                split: pack(
                    ds,
                    block_length,
                    eos_token_id,
                    tail=tail,
                    pad_token_id=pad,
                    map_batch_size=map_batch_size,
                    packing=packing,
                )
                for split, ds in data.items()
            }
        )
    if hasattr(data, "map") and hasattr(data, "column_names"):
        return data.map(
            lambda b: _pack_ids(b["input_ids"], block_length, eos_token_id, tail, pad, packing),
            batched=True,
            batch_size=map_batch_size,
            remove_columns=data.column_names,
            desc=f"packing into blocks of {block_length}",
        )
    cols = _pack_ids(data, block_length, eos_token_id, tail, pad, packing)
    return [dict(zip(cols, row)) for row in zip(*cols.values())]


def chunk_tokens(ds, column: str, tokenizer, block_length: int, map_batch_size: int = 1000):
    """The tokens ``pack`` gets from each chunk of ``map_batch_size`` rows of ``ds``'s text
    ``column`` (tokenized as ``DataSpec.prepare`` does), up to the first chunk that fills a
    block: each chunk drops its tail, so none may make no block at all."""
    counts = []
    for start in range(0, ds.num_rows, map_batch_size):
        texts = ds[start : start + map_batch_size][column]
        ids = tokenizer(texts, truncation=True, max_length=block_length)["input_ids"]
        counts.append(sum(len(x) + 1 for x in ids))
        if counts[-1] >= block_length:
            break
    return counts


# --------------------------------------------------------------------------- counting
class CountingCollator:
    """Wraps a collator; counts training samples, non-pad tokens, computed tokens and the
    distinct batch shapes on the CPU, with no device sync (the Trainer's
    ``include_num_input_tokens_seen`` syncs every step).

    The dataloader collates ahead, so counts wait in a queue until ``consume`` credits them
    at the end of their step; batches collated in eval mode are not counted, except those
    fetched right after an evaluation (``evaluated``). ``drop`` names keys left out of the
    batch once counted (packed blocks go without ``attention_mask``).
    """

    def __init__(self, inner, model, drop: tuple[str, ...] = ()):
        self.inner, self.model, self.drop = inner, model, tuple(drop)
        self.pending: deque[tuple[int, int, int, tuple[int, ...] | None]] = deque()
        self.samples = 0
        self.tokens = 0  # non-pad tokens
        self.computed = 0  # every position the model computes, padding included
        self.shapes: set[tuple[int, ...]] = set()
        self._resuming = False  # an evaluation has just ended: training batches come next

    def __call__(self, features):
        batch = self.inner(features)
        if self.model.training or self._resuming:
            mask = batch.get("attention_mask") if hasattr(batch, "get") else None
            if mask is None:
                self.pending.append((len(features), 0, 0, None))
            else:
                self.pending.append(
                    (len(features), int(mask.sum()), mask.numel(), tuple(mask.shape))
                )
        for key in self.drop:
            batch.pop(key, None)
        return batch

    def evaluated(self) -> None:
        """An evaluation has ended: the batches collated next are training ones."""
        self._resuming = True

    def consume(self, batches: int = 1) -> None:
        """Credit the counts of the next ``batches`` batches (those of the step just done)."""
        self._resuming = False  # a step has run in train mode: the model says which is which
        for _ in range(min(batches, len(self.pending))):
            samples, tokens, computed, shape = self.pending.popleft()
            self.samples += samples
            self.tokens += tokens
            self.computed += computed
            if shape is not None:
                self.shapes.add(shape)

    def stats(self) -> dict[str, float | int | None]:
        """Padding waste % and distinct shapes so far (None where there are no tokens)."""
        if not self.computed:
            return {"padding_waste_pct": None, "shapes_seen": None}
        return {
            "padding_waste_pct": 100 * (1 - self.tokens / self.computed),
            "shapes_seen": len(self.shapes),
        }


class LabelsTo:
    """Pads every row's ``labels`` with ``label_pad`` up to ``length`` before the inner
    collator sees them, so every batch's labels (and decoder inputs) take that one length.
    Longer rows are left as they are."""

    def __init__(self, inner, length: int, label_pad: int = LABEL_PAD):
        self.inner, self.length, self.label_pad = inner, int(length), int(label_pad)

    def __call__(self, features):
        rows = []
        for f in features:
            labels = list(f["labels"])
            rows.append({**f, "labels": labels + [self.label_pad] * (self.length - len(labels))})
        return self.inner(rows)


def collator(
    task: str, tokenizer, model, padding: str, max_length: int, label_length: int | None = None
):
    """The transformers collator for ``task`` (``padding``: ``longest`` or ``max_length``).

    ``label_length`` (seq2seq with ``max_length``): the longest target of the data; every
    batch's labels are padded to it rounded up to a multiple of ``max_length``: one static
    shape, not a graph per target length on Gaudi."""
    import transformers

    # rows are truncated at max_length: a multiple of it pads every batch to exactly max_length
    multiple = max_length if padding == "max_length" else None
    if task == "classification":
        return transformers.DataCollatorWithPadding(tokenizer, pad_to_multiple_of=multiple)
    if task == "causal_lm":
        return transformers.DataCollatorForLanguageModeling(
            tokenizer, mlm=False, pad_to_multiple_of=multiple
        )
    if task == "seq2seq":
        inner = transformers.DataCollatorForSeq2Seq(
            tokenizer, model=model, pad_to_multiple_of=multiple
        )
        if multiple is None or label_length is None:
            return inner
        return LabelsTo(inner, -(-label_length // multiple) * multiple)
    return transformers.default_data_collator
