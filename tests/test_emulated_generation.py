"""``run.generate`` in HPU lazy mode compiles a bounded number of graphs: static shapes (the
prompt padded to a bucket), not a new graph per token. Counted on the emulated Gaudi, which
counts a graph when the ops and shapes run between two flushes are new (the bridge's
``graph_compilation`` metric; tests/fakes/README.md, Counts)."""

from __future__ import annotations

GENERATE = """
    import workbench as wb
    from habana_frameworks.torch.hpu.metrics import metric_global
    run = train("gpt2-tiny", mode="lazy", max_steps=1)
    compiled = lambda: dict(metric_global("graph_compilation").stats())["TotalNumber"]
    before = compiled()
    run.generate(["import os", "x = [1, 2]"], max_new_tokens=6)
    out["first"] = compiled() - before
    before, marks_before = compiled(), marks("")
    texts = run.generate(["def add(a, b):", "class Point:\\n    def __init__(self"],
                         max_new_tokens=12)
    out["texts"] = texts
    out["graphs"] = compiled() - before
    out["steps"] = marks("") - marks_before
    sampled = []
    for prompt in ("import os", "x = [1, 2, 3]"):
        again = compiled()
        run.generate([prompt], max_new_tokens=12, do_sample=True, top_k=5)
        sampled.append(compiled() - again)
    out["sampled"] = sampled
"""


def test_lazy_generation_compiles_a_graph_per_bucket_not_per_token(on_hpu):
    out = on_hpu(GENERATE, PT_HPU_LAZY_MODE="1")
    assert len(out["texts"]) == 2 and all(out["texts"])
    assert out["steps"] >= 12, "a mark_step per generated token (unless EOS came first)"
    # the first generation compiled the 32-token bucket's graphs (a few: the prompt's step and
    # the token steps, cut where a step reads to the host); a second batch of other prompt
    # lengths, twice as many new tokens, in the same bucket compiles none (growing shapes
    # compiled one per token: 13 graphs here before static shapes)
    assert 0 < out["first"] < 6 and out["graphs"] == 0, out
    # sampling is another program (its own graph), compiled once for the bucket
    assert out["sampled"] == [1, 0], out
