"""Static-shape batching: optimal buckets, the bucket sampler and collator, packing, stats."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch
import transformers

import workbench as wb
from workbench.shapes.batching import BucketCollator, pack
from workbench.shapes.buckets import (
    STRATEGIES,
    BucketBatchSampler,
    buckets,
    lengths_of,
    padding_stats,
    tradeoff_rows,
)


@pytest.fixture(scope="module")
def topic():
    """(tokenizer, prepared train split, lengths) of docstrings-topic under tiny BERT."""
    tok = wb.model("bert").load_tokenizer()
    train = wb.dataset("docstrings-topic").prepare(tok, max_length=128)["train"]
    return tok, train, lengths_of(train)


@pytest.fixture(scope="module")
def lm():
    """(tokenizer, prepared train split) of docstrings-lm under tiny GPT-2."""
    tok = wb.model("gpt2").load_tokenizer()
    return tok, wb.dataset("docstrings-lm").prepare(tok, max_length=128)["train"]


# --------------------------------------------------------------------------- brute force
def _seq_pad(x, bounds):
    """Pad tokens with each sequence padded to the smallest boundary >= its length."""
    return sum(min(b for b in bounds if b >= v) - v for v in x)


def _computed(x, bounds, batch_size):
    """Tokens the sampler and collator compute in one epoch (walks the real batches)."""
    sampler = BucketBatchSampler(x, bounds, batch_size, seed=0)
    return sum(batch_size * min(b for b in bounds if b >= max(x[i] for i in batch)) for batch in sampler)


def _candidates(x, k):
    """Every set of at most k distinct lengths that contains the longest one."""
    values = sorted(set(x))
    rest = values[:-1]
    for size in range(k):
        for combo in itertools.combinations(rest, size):
            yield [*combo, values[-1]]


def _random_lengths(rng, distinct=8):
    n = int(rng.integers(1, 30))
    return [int(v) for v in rng.integers(1, distinct * 3, size=n)]


@pytest.mark.parametrize("seed", range(40))
def test_buckets_minimise_padding_exactly(seed):
    rng = np.random.default_rng(seed)
    x, k = _random_lengths(rng), int(rng.integers(1, 5))
    max_length = int(rng.integers(5, 25)) if seed % 2 else None
    capped = [min(v, max_length) if max_length else v for v in x]
    got = buckets(x, k=k, max_length=max_length)
    assert len(got) <= k and got == sorted(set(got)) and set(got) <= set(capped)
    assert got[-1] == max(capped)
    best = min(_seq_pad(capped, c) for c in _candidates(capped, k))
    assert _seq_pad(capped, got) == best


@pytest.mark.parametrize("seed", range(25))
def test_batch_aware_buckets_minimise_what_the_sampler_computes(seed):
    rng = np.random.default_rng(100 + seed)
    x, k, bs = _random_lengths(rng, distinct=6), int(rng.integers(1, 4)), int(rng.integers(2, 6))
    got = buckets(x, k=k, batch_size=bs)
    assert len(got) <= k and got[-1] == max(x)
    assert _computed(x, got, bs) == min(_computed(x, c, bs) for c in _candidates(x, k))


def test_buckets_take_no_more_shapes_than_padding_needs():
    assert buckets([3, 3, 4, 9, 10], k=2) == [4, 10]
    assert buckets([5, 5, 7], k=8) == [5, 7]  # only two distinct lengths
    assert buckets([4, 4, 4], k=3, batch_size=2) == [4]
    assert buckets([10, 300], k=4, max_length=128) == [10, 128]
    with pytest.raises(ValueError, match="k must be"):
        buckets([1, 2], k=0)


# --------------------------------------------------------------------------- sampler
def _flat(batches):
    return sorted(i for b in batches for i in b)


@pytest.mark.parametrize("n,bs,drop_last,replicas", [
    (100, 16, False, 1), (100, 16, True, 1), (96, 16, False, 1), (7, 16, False, 1),
    (7, 16, True, 1), (100, 8, False, 3), (100, 8, True, 3), (10, 8, False, 4)])
def test_sampler_length_coverage_and_sharding(n, bs, drop_last, replicas):
    rng = np.random.default_rng(n)
    lengths = rng.integers(1, 100, size=n)
    bounds = buckets(lengths, k=4)
    shards = [list(BucketBatchSampler(lengths, bounds, bs, seed=1, drop_last=drop_last,
                                      num_replicas=replicas, rank=r)) for r in range(replicas)]
    expected = len(BucketBatchSampler(lengths, bounds, bs, drop_last=drop_last, num_replicas=replicas))
    assert all(len(s) == expected for s in shards)  # every rank the same number of batches
    everything = [b for s in shards for b in s]
    assert all(0 < len(b) <= bs for b in everything)
    if drop_last:
        assert all(len(b) == bs for b in everything)
        assert len(set(_flat(everything))) == len(_flat(everything))  # nothing twice
    else:
        assert set(_flat(everything)) == set(range(n))  # every example at least once
        if replicas == 1:
            assert _flat(everything) == list(range(n))  # exactly once


def test_sampler_is_deterministic_per_seed_and_epoch():
    lengths = np.random.default_rng(0).integers(1, 128, size=300)
    bounds = buckets(lengths, k=8)
    a, b = BucketBatchSampler(lengths, bounds, 16, seed=3), BucketBatchSampler(lengths, bounds, 16, seed=3)
    first = list(a)
    assert first == list(b) == list(a)
    a.set_epoch(1)
    second = list(a)
    assert second != first and _flat(second) == _flat(first) == list(range(300))
    b.set_epoch(1)
    assert list(b) == second
    assert list(BucketBatchSampler(lengths, bounds, 16, seed=4)) != first


def test_sampler_batches_are_runs_of_the_length_sorted_buckets():
    lengths = np.random.default_rng(1).integers(1, 128, size=500)
    bounds = buckets(lengths, k=12)
    which = np.searchsorted(bounds, lengths)
    for batch in BucketBatchSampler(lengths, bounds, 16):
        lo, hi = which[batch].min(), which[batch].max()
        # a batch mixes a bucket's last rows with the next's first, and holds every row
        # of any bucket in between: never more padding than that
        inner = np.flatnonzero((which > lo) & (which < hi))
        assert set(inner) <= set(batch)


def test_one_batch_per_shape_covers_every_length_any_epoch_pads_to():
    """What a static-shape device compiles before step 1 (BatchSamplerTrainer): one batch of
    each length the batches are padded to, longest first; no epoch pads to another."""
    lengths = np.random.default_rng(2).integers(1, 128, size=300)
    sampler = BucketBatchSampler(lengths, buckets(lengths, k=8, batch_size=16), 16, seed=5)
    warm = [sampler.length_of(b) for b in sampler.one_per_shape()]
    assert warm == sorted(set(warm), reverse=True) and len(warm) > 1
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert {sampler.length_of(b) for b in sampler} == set(warm), epoch
    collate = BucketCollator(None, sampler.boundaries, 16, pad_token_id=0)
    assert all(collate([{"input_ids": [1] * int(lengths[i])} for i in b])["input_ids"].shape[1]
               == n for b, n in zip(sampler.one_per_shape(), warm)), "the collator's length"


def test_seq2seq_batches_padded_to_max_length_have_one_label_length():
    """Inputs padded to max_length, labels to the data's longest target (rounded up to a
    multiple of max_length): one static shape; without the length, several."""
    from workbench.shapes.batching import collator

    tok = wb.model("t5").load_tokenizer()
    data = wb.dataset("docstrings-summary", limit=40).prepare(tok, max_length=8)["train"]
    longest = int(lengths_of(data, "labels").max())
    pairs = [[data[i], data[i + 1]] for i in range(0, len(data) - 1, 2)]

    def shapes(collate):
        return {(tuple(b["input_ids"].shape), tuple(b["labels"].shape)) for b in map(collate, pairs)}

    assert shapes(collator("seq2seq", tok, None, "max_length", 8, longest)) == {
        ((2, 8), (2, -(-longest // 8) * 8))}
    assert len(shapes(collator("seq2seq", tok, None, "max_length", 8))) > 1


# --------------------------------------------------------------------------- collator
def test_collator_gives_static_shapes_and_inert_dummy_rows(topic):
    tok, train, lengths = topic
    bounds = buckets(lengths, k=8, max_length=128, batch_size=16)
    sampler = BucketBatchSampler(lengths, bounds, 16)
    loader = torch.utils.data.DataLoader(train, batch_sampler=sampler,
                                         collate_fn=BucketCollator(tok, bounds, 16))
    shapes, useful, computed = set(), 0, 0
    for idx, batch in zip(sampler, loader):
        rows, length = batch["input_ids"].shape
        assert rows == 16 and length in bounds and length == min(b for b in bounds if b >= lengths[idx].max())
        n = len(idx)
        assert batch["attention_mask"][:n].sum(1).tolist() == lengths[idx].tolist()
        assert (batch["attention_mask"][n:] == 0).all() and (batch["labels"][n:] == -100).all()
        assert (batch["input_ids"][n:] == tok.pad_token_id).all()
        assert batch["labels"][:n].tolist() == train[idx]["labels"]
        shapes.add((rows, length))
        useful += int(batch["attention_mask"].sum())
        computed += batch["input_ids"].numel()
    stats = padding_stats(lengths, "bucketed", 16, 128)  # the stats describe what is collated
    assert stats["shapes"] == len(shapes) <= 8
    assert stats["waste_pct"] == pytest.approx(100 * (1 - useful / computed))


def test_collator_refuses_what_it_cannot_shape():
    collate = BucketCollator(None, [4, 8], 2, pad_token_id=0)
    with pytest.raises(ValueError, match="largest boundary"):
        collate([{"input_ids": list(range(9))}])
    with pytest.raises(ValueError, match="rows for batch_size"):
        collate([{"input_ids": [1]}] * 3)
    with pytest.raises(ValueError, match="pad token"):
        BucketCollator(None, [4], 2)
    out = BucketCollator(None, [4, 8], 2, pad_token_id=0, pad_batch=False)([{"input_ids": [1, 2, 3]}])
    assert out["input_ids"].tolist() == [[1, 2, 3, 0]] and out["attention_mask"].tolist() == [[1, 1, 1, 0]]


def _loss(model, batch):
    with torch.no_grad():
        return model(**batch).loss.item()


def test_dummy_rows_and_padding_leave_the_classification_loss_unchanged(topic):
    tok, train, lengths = topic
    transformers.set_seed(0)
    model = wb.model("bert").build(num_labels=6)[0].eval()
    rows = [train[i] for i in range(5)]
    longest = max(len(r["input_ids"]) for r in rows)
    padded = BucketCollator(tok, [longest + 9, 512], 8)(rows)
    assert padded["input_ids"].shape == (8, longest + 9)
    plain = transformers.DataCollatorWithPadding(tok)(rows)
    assert _loss(model, padded) == pytest.approx(_loss(model, plain), abs=1e-5)


def test_dummy_rows_and_padding_leave_the_causal_lm_loss_unchanged(lm):
    tok, train = lm
    transformers.set_seed(0)
    model = wb.model("gpt2").build()[0].eval()
    rows = [train[i] for i in range(5)]
    longest = max(len(r["input_ids"]) for r in rows)
    padded = BucketCollator(tok, [longest + 11], 8, task="causal_lm")(rows)
    labels, mask = padded["labels"], padded["attention_mask"]
    assert padded["input_ids"].shape == (8, longest + 11)
    assert (labels[mask == 0] == -100).all() and (labels[mask == 1] == padded["input_ids"][mask == 1]).all()
    plain = transformers.DataCollatorForLanguageModeling(tok, mlm=False)(rows)
    assert _loss(model, padded) == pytest.approx(_loss(model, plain), abs=1e-5)
    # packed blocks: a partial batch filled with dummy rows has the loss of its real rows
    blocks = pack([r["input_ids"] for r in train.select(range(40))], 32, tok.eos_token_id)[:3]
    full = BucketCollator(tok, [32], 4, task="causal_lm")(blocks)
    assert full["input_ids"].shape == (4, 32) and (full["labels"][3] == -100).all()
    real = {k: torch.tensor([b[k] for b in blocks]) for k in blocks[0]}
    assert _loss(model, full) == pytest.approx(_loss(model, real), abs=1e-5)
    # right-padded causal rows need no mask: wb.train leaves it out of packed batches
    unmasked = {k: v for k, v in full.items() if k != "attention_mask"}
    assert _loss(model, unmasked) == pytest.approx(_loss(model, full), abs=1e-5)


# --------------------------------------------------------------------------- packing
def _docs(seed, n=30):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 99, size=int(rng.integers(1, 40))).tolist() for _ in range(n)]


def _expected(docs, block):
    """Stream, document-start flags and positions, computed the slow way."""
    stream, starts, pos = [], [], []
    for doc in docs:
        for i, t in enumerate([*doc, 0]):
            stream.append(t)
            starts.append(i == 0)
            at_block_start = len(pos) % block == 0
            pos.append(0 if i == 0 or at_block_start else pos[-1] + 1)
    return stream, starts, pos


@pytest.mark.parametrize("seed", range(5))
def test_isolated_packing_cuts_exact_blocks_with_loss_masked_at_document_starts(seed):
    docs, block = _docs(seed), 16
    rows = pack(docs, block, eos_token_id=0, packing="isolated")
    stream, starts, pos = _expected(docs, block)
    kept = len(stream) // block * block
    assert len(rows) == kept // block and len(stream) - kept < block  # only the tail is lost
    assert all(len(r[k]) == block for r in rows for k in r)
    ids = [t for r in rows for t in r["input_ids"]]
    labels = [t for r in rows for t in r["labels"]]
    assert ids == stream[:kept]
    assert [lab == -100 for lab in labels] == starts[:kept]  # -100 exactly at document starts
    assert all(lab == t for lab, t in zip(labels, ids) if lab != -100)
    assert [p for r in rows for p in r["position_ids"]] == pos[:kept]
    assert all(r["attention_mask"] == [1] * block for r in rows)


def test_pack_pads_the_tail_when_asked_and_works_on_datasets():
    import datasets

    docs, block = _docs(7), 16
    stream, _, _ = _expected(docs, block)
    padded = pack(docs, block, 0, tail="pad", pad_token_id=5, packing="isolated")
    assert len(padded) == -(-len(stream) // block)
    assert sum(sum(r["attention_mask"]) for r in padded) == len(stream)  # no token lost
    last, n_pad = padded[-1], len(padded) * block - len(stream)
    assert last["input_ids"][block - n_pad:] == [5] * n_pad and last["labels"][block - n_pad:] == [-100] * n_pad
    ds = datasets.Dataset.from_dict({"input_ids": docs, "text": ["x"] * len(docs)})
    whole = pack(ds, block, 0, map_batch_size=len(docs))
    assert whole.column_names == ["input_ids", "labels", "position_ids", "attention_mask"]
    assert whole.to_list() == pack(docs, block, 0)
    split = pack(datasets.DatasetDict({"train": ds}), block, 0, map_batch_size=len(docs))
    assert split["train"].to_list() == whole.to_list()
    chunked = pack(ds, block, 0, map_batch_size=10)  # each chunk of 10 documents drops its own tail
    assert len(stream) - 3 * (block - 1) <= len(chunked) * block <= len(stream)


@pytest.mark.parametrize("seed", range(3))
def test_concat_packing_is_one_stream_with_positions_running_on(seed):
    docs, block = _docs(seed), 16
    rows = pack(docs, block, eos_token_id=0)  # concat is the default
    stream, _, _ = _expected(docs, block)
    kept = len(stream) // block * block
    assert [t for r in rows for t in r["input_ids"]] == stream[:kept]
    assert all(r["labels"] == r["input_ids"] for r in rows), "every token predicts the next"
    assert all(r["position_ids"] == list(range(block)) for r in rows)
    with pytest.raises(ValueError, match="unknown packing 'mixed'"):
        pack(docs, block, 0, packing="mixed")


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_packed_losses_match_unpacked_references(family):
    """isolated: the loss of the documents trained one by one; concat: the loss of the
    joined stream. Four documents that fill one block exactly (6 + 10 + 13 + 4 = 33)."""
    from workbench.training.attention import causal_sdpa

    model, tok = wb.model(family, size="tiny").build()
    model.eval()
    eos, g = tok.eos_token_id, torch.Generator().manual_seed(1)
    docs = [torch.randint(5, 200, (n,), generator=g).tolist() for n in (5, 9, 12, 3)]

    def batch(rows, *keys):
        return {k: torch.tensor([r[k] for r in rows]) for k in keys}

    with torch.no_grad():
        iso = batch(pack(docs, 33, eos, packing="isolated"), "input_ids", "labels", "position_ids")
        isolated = model(**iso, use_cache=False).loss  # no mask, no cache: one mask per document
        total = count = 0
        for d in docs:  # each document alone: len(d) predictions (its tokens after the first, and EOS)
            ids = torch.tensor([[*d, eos]])
            total += model(input_ids=ids, labels=ids).loss.item() * len(d)
            count += len(d)
        assert isolated.item() == pytest.approx(total / count, abs=1e-5)
        restore = causal_sdpa(model)
        concat = model(**batch(pack(docs, 33, eos), "input_ids", "labels"), use_cache=False).loss
        restore()
        stream = torch.tensor([[t for d in docs for t in (*d, eos)]])
        assert concat.item() == pytest.approx(model(input_ids=stream, labels=stream).loss.item(), abs=1e-5)
    assert abs(isolated.item() - concat.item()) > 1e-3, "the two semantics train different things"


# --------------------------------------------------------------------------- statistics
def test_padding_stats_on_docstrings_topic(topic):
    _, _, lengths = topic
    stats = {s: padding_stats(lengths, s, 16, 128) for s in STRATEGIES}
    bucketed = stats["bucketed"]
    assert bucketed["shapes"] <= 8 and len(bucketed["boundaries"]) <= 8
    assert bucketed["waste_pct"] < stats["longest"]["waste_pct"] < stats["max_length"]["waste_pct"]
    assert bucketed["waste_pct"] <= 15
    # batching cannot beat padding each sequence to its best boundary
    best = _seq_pad([min(v, 128) for v in lengths], buckets(lengths, k=8, max_length=128))
    assert bucketed["computed_tokens"] - bucketed["useful_tokens"] >= best
    assert padding_stats(lengths, "bucketed", 16, 128, k=16)["waste_pct"] <= 10
    assert stats["max_length"]["shapes"] <= 2 and stats["longest"]["shapes"] > 8
    assert stats["packed"]["shapes"] == 1 and stats["packed"]["waste_pct"] < 5
    assert all(s["useful_tokens_per_step"] > 0 for s in stats.values())
    with pytest.raises(ValueError, match="unknown strategy"):
        padding_stats(lengths, "greedy", 16, 128)


def test_a_datasets_length_stats_give_the_padding_of_each_strategy():
    """``data.lengths(tok).padding(...)``: the public way to padding_stats (notebook 03)."""
    tok = wb.model("gpt2").load_tokenizer()
    stats = wb.dataset("docstrings-lm").lengths(tok)
    for strategy in STRATEGIES:
        assert stats.padding(strategy, batch_size=16, max_length=128) == padding_stats(
            stats.lengths, strategy, 16, 128)
    assert stats.padding("bucketed", batch_size=16, max_length=128, k=4)["boundaries"] == padding_stats(
        stats.lengths, "bucketed", 16, 128, k=4)["boundaries"]
    assert stats.padding("packed", batch_size=16, max_length=128)["shapes"] == 1
    with pytest.raises(ValueError, match="unknown strategy 'greedy'; known: max_length, longest"):
        stats.padding("greedy", batch_size=16)


def test_tradeoff_waste_falls_as_shapes_grow(topic):
    _, _, lengths = topic
    df = pd.DataFrame(tradeoff_rows(lengths, 16, 128, ks=(2, 4, 8, 16), seed=0))
    assert list(df.columns) == ["k", "boundaries", "waste_pct", "shapes", "useful_tokens_per_step"]
    assert (df["shapes"] <= df["k"]).all()
    assert df["waste_pct"].is_monotonic_decreasing
