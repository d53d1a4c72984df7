"""Training FLOPs per token: the one count that MFU (``bench.mfu``) and the time-and-cost
planner (``planner``) both use, so that a planned MFU and a measured one mean the same."""

from __future__ import annotations

import functools
import json
import warnings

# families whose config's position count is a learned table of parameters (RoPE models,
# T5's relative buckets: no table to leave out)
_LEARNED_POSITIONS = ("gpt2", "bert")


def flops_per_token(spec, seq_len: int) -> int:
    """6 N + 12 L d S: N parameters without the position table; the attention term as in
    the PaLM paper's appendix.

    With LoRA (``spec.lora``) the frozen weights get no weight gradient: 2N forward and 2N
    backward to the activations, 6 FLOPs for each trainable parameter (the adapters, and a
    classification head that trains whole), the attention term unchanged:
    4 N + 6 T + 12 L d S. The count is Schulman and Thinking Machines, "LoRA Without
    Regret" (2025), section "Compute efficiency advantage of LoRA": 2N^2 + 6NR multiply-adds
    for a matrix with adapters against 3N^2 without, "slightly more than 2/3".

    ``spec`` is a ModelSpec of a transformer (a UNet has no tokens: ValueError).
    """
    if spec.family in ("unet", "sd", "vae"):
        raise ValueError(
            f"{spec.name} is a UNet: FLOPs per token (6N + attention) count transformers only"
        )
    cfg = spec.config()
    layers, width = cfg.num_hidden_layers, cfg.hidden_size
    table = 0
    if spec.family in _LEARNED_POSITIONS:
        table = getattr(cfg, "n_positions", getattr(cfg, "max_position_embeddings", 0)) * width
    attention = 12 * layers * width * seq_len
    if spec.lora is not None:
        return 4 * (spec.num_params - table) + 6 * spec.lora_trainable() + attention
    return 6 * (spec.num_params - table) + attention


UNETS = ("unet", "sd")  # the families whose unit of work is an image, not a token


def flops_per_sample(spec) -> int:
    """Training FLOPs of one image through a UNet: 3 x its forward pass (the backward costs
    two forwards), 2 x with LoRA (no weight gradients for the frozen UNet; the adapters' own
    FLOPs, about 1%, are left out). The forward is counted by torch's ``FlopCounterMode`` on
    the meta device (nothing is allocated), at the UNet's own latent size, with the caption
    length of its text encoder (77 tokens) as the cross-attention context. The frozen VAE and
    text encoder are not counted: model FLOPs, as the published references count them.

    ``spec``: a ModelSpec of the ``unet`` or ``sd`` family (else ValueError).
    """
    if spec.family not in UNETS:
        raise ValueError(f"{spec.name} is not a UNet: count it with flops_per_token")
    forward = _unet_forward(spec.to_json())
    return (2 if spec.lora is not None else 3) * forward


@functools.lru_cache(maxsize=16)
def _unet_forward(spec_json: str) -> int:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ..catalog.modelspec import ModelSpec
    from ..diffusion.unet import new_unet

    spec = ModelSpec.from_dict(json.loads(spec_json))
    cfg = spec.config()
    assert isinstance(cfg, dict)  # unet and sd: their configs are dicts
    if spec.family == "sd":
        text, cfg = cfg.get("text_encoder", {}), {**cfg["unet"], "conditional": True}
        context = text.get("max_position_embeddings", 77)
    else:
        context = 77
    with torch.device("meta"), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unet = new_unet(cfg)
        c = unet.config
        side = c["sample_size"] if isinstance(c["sample_size"], int) else c["sample_size"][0]
        args = [torch.empty(1, c["in_channels"], side, side), torch.tensor([10])]
        kwargs = {}
        if cfg.get("conditional"):
            args.append(torch.empty(1, context, c["cross_attention_dim"]))
            if c["addition_embed_type"] == "text_time":  # SDXL: pooled text and the size/crop ids
                pooled = (
                    c["projection_class_embeddings_input_dim"] - 6 * c["addition_time_embed_dim"]
                )
                kwargs["added_cond_kwargs"] = {
                    "text_embeds": torch.empty(1, pooled),
                    "time_ids": torch.empty(1, 6),
                }
        with FlopCounterMode(display=False) as counter:
            unet(*args, **kwargs)
    return int(counter.get_total_flops())
