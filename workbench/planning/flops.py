"""Training FLOPs per token: the one count that MFU (``bench.mfu``) and the time-and-cost
planner (``planner``) both use, so that a planned MFU and a measured one mean the same."""

from __future__ import annotations

# families whose config's position count is a learned table of parameters (RoPE models,
# T5's relative buckets: no table to leave out)
_LEARNED_POSITIONS = ("gpt2", "bert")


def flops_per_token(spec, seq_len: int) -> int:
    """6 N + 12 L d S: N parameters without the position table; the attention term as in
    the PaLM paper's appendix.

    ``spec`` is a ModelSpec of a transformer (a UNet has no tokens: ValueError).
    """
    if spec.family == "unet":
        raise ValueError(f"{spec.name} is a UNet: FLOPs per token (6N + attention) count transformers only")
    cfg = spec.config()
    layers, width = cfg.num_hidden_layers, cfg.hidden_size
    table = 0
    if spec.family in _LEARNED_POSITIONS:
        table = getattr(cfg, "n_positions", getattr(cfg, "max_position_embeddings", 0)) * width
    return 6 * (spec.num_params - table) + 12 * layers * width * seq_len
