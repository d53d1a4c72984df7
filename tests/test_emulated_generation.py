"""``run.generate`` in HPU lazy mode compiles a bounded number of graphs: static shapes (the
prompt padded to a bucket), not a new graph per token. Counted on the emulated Gaudi, whose
``mark_step`` closes a graph and counts it when its ops and shapes are new
(tests/fakes/habana_frameworks/torch/core/_lazy_graphs.py)."""

from __future__ import annotations

GENERATE = """
    import workbench as wb
    from habana_frameworks.torch.core import _lazy_graphs
    from habana_frameworks.torch.hpu.metrics import metric_global
    run = train("gpt2-tiny", mode="lazy", max_steps=1)
    compiled = lambda: dict(metric_global("graph_compilation").stats())["TotalNumber"]
    _lazy_graphs.trace(True)
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
    # both prompts and their 12 new tokens fit one 32-token bucket: one graph for all steps
    assert out["graphs"] == 1, out
    # sampling is another program (its own graph), compiled once for the bucket
    assert out["sampled"] == [1, 0], out
