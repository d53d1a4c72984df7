"""Bytes of one training step, component by component: the arithmetic of ``wb.plan_memory``.

``estimate`` counts, per device, the tensors of one training step (forward, backward,
optimizer step) as transformers' Trainer runs it, from first principles per component:

* **weights, gradients**: 4 bytes per parameter. With ``bf16``/``fp16`` the Trainer keeps
  fp32 master weights and runs the forward pass under ``torch.autocast``; gradients land in
  fp32 ``.grad``. With ZeRO (DeepSpeed) the model itself is 16-bit: weights and gradients
  take 2 bytes, and the optimizer keeps an fp32 master copy (the ZeRO paper's accounting).
* **optimizer state**: AdamW keeps two fp32 moments (8 bytes per parameter).
* **activations**: what autograd saves for backward, counted tensor by tensor for each
  family's layer (encoder, decoder, encoder-decoder, UNet), plus the loss. Under autocast,
  matmul inputs are 16-bit while the residual stream and the norms stay fp32, each linear
  saves its own 16-bit copy of its input, and the 16-bit copies of the weights are saved
  too. For language models the logits dominate small models: ``cross_entropy`` saves a
  fp32 log-softmax and backward holds three fp32 tensors of batch x seq x vocab.
  Attention is assumed to run in a fused kernel (flash / memory-efficient SDPA, as on
  CUDA and Gaudi), so no seq x seq scores are saved, and dropout masks take 1 byte.
* **overlap**: gradients are allocated during backward while activations are freed, so
  the peak is weights + optimizer + max(activations, gradients + the tied-embedding
  gradient transient), not the plain sum; ``overlap`` is the difference.
* **margin**: 10% + 512 MiB for what is not a live tensor: the runtime, workspaces and
  allocator fragmentation. ``peak_allocated`` excludes it (it is the number that
  ``torch.cuda.max_memory_allocated`` reports); ``per_device`` includes it.
"""

from __future__ import annotations

from typing import Any

OPTIMIZERS = {"adamw": 8, "adam": 8, "sgd": 4, "adamw_8bit": 2}  # state bytes per parameter
MARGIN = (0.10, 512 * 2**20)  # fraction of the peak, constant bytes


# --------------------------------------------------------------------------- model shape
def _first(cfg, *names, default=None):
    """The first of ``names`` that ``cfg`` has and is not None."""
    for n in names:
        v = cfg.get(n) if isinstance(cfg, dict) else getattr(cfg, n, None)
        if v is not None:
            return v
    return default


SHAPE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def check_shape(spec, cfg) -> None:
    """Refuse a transformer config whose sizes cannot build (``hidden_size=-1``), naming the
    field and the fix, before anything counts its parameters."""
    for name in (*SHAPE_FIELDS, "intermediate_size", "num_key_value_heads"):
        value = getattr(cfg, name, None)
        if value is None and name not in SHAPE_FIELDS:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"{spec.name}: {name} must be a positive integer, got {value!r}; pass "
                f"wb.model(..., {name}=N) with N >= 1, or leave it out for the catalog's"
            )
    h, heads = cfg.hidden_size, cfg.num_attention_heads
    if not getattr(cfg, "head_dim", None) and not getattr(cfg, "d_kv", None) and h % heads:
        raise ValueError(
            f"{spec.name}: hidden_size={h} is not a multiple of num_attention_heads={heads}; "
            "pass sizes where it is (e.g. hidden_size=heads x 64)"
        )


def dims(spec) -> dict[str, Any]:
    """The architecture numbers the estimate needs."""
    if spec.family == "vae":
        raise ValueError(
            f"{spec.name}: the planner has no memory or FLOP model of a VAE; plan the Stable "
            "Diffusion pipeline it serves instead, e.g. wb.plan(wb.model('sd', size='sd15'), ...)"
        )
    if spec.family not in ("unet", "sd"):
        check_shape(spec, spec.config())
    d: dict[str, Any] = {
        "family": spec.family,
        "name": spec.name,
        "params": spec.num_params,
        "task": spec.task,
    }
    if spec.family == "unet":
        d["unet"] = spec.unet_config(full=True)
        return d
    if spec.family == "sd":  # the UNet trains; the VAE and text encoder(s) are frozen weights
        return {**d, **_sd_dims(spec)}
    cfg = spec.config()
    h, heads = cfg.hidden_size, cfg.num_attention_heads
    head_dim = _first(cfg, "d_kv", "head_dim", default=h // heads)
    d.update(
        h=h,
        heads=heads,
        layers=cfg.num_hidden_layers,
        vocab=cfg.vocab_size,
        f=_first(cfg, "intermediate_size", "n_inner", "d_ff", default=4 * h),
        inner=heads * head_dim,
        kv=_first(cfg, "num_key_value_heads", default=heads) * head_dim,
        dec_layers=_first(cfg, "num_decoder_layers", default=cfg.num_hidden_layers),
        act=str(_first(cfg, "activation_function", "hidden_act", "dense_act_fn", default="gelu")),
        gated=bool(getattr(cfg, "is_gated_act", False)),
        dropout=_first(cfg, "hidden_dropout_prob", "resid_pdrop", "dropout_rate", default=0.0) > 0,
        attn_dropout=_first(
            cfg,
            "attention_probs_dropout_prob",
            "attn_pdrop",
            "dropout_rate",
            "attention_dropout",
            default=0.0,
        )
        > 0,
        tied=bool(getattr(cfg, "tie_word_embeddings", False)),
        positions=_first(cfg, "n_positions", "max_position_embeddings")
        if spec.family in ("gpt2", "bert")
        else None,
        # rotary positions (Llama): no table, but the model was trained to this length
        rope_positions=_first(cfg, "max_position_embeddings") if spec.family == "llama" else None,
        lm_head=spec.task in ("causal_lm", "seq2seq"),
    )
    extra = (d["positions"] or 0) + _first(cfg, "type_vocab_size", default=0)
    d["embedding_params"] = (d["vocab"] + extra) * h  # input embeddings: looked up, never cast
    if spec.lora is not None:  # peft: the adapters train, the model's own weights stay frozen
        trainable = spec.lora_trainable()
        d.update(
            trainable=trainable, frozen_base=spec.num_params, params=spec.num_params + trainable
        )
    return d


# --------------------------------------------------------------------------- activations
def _lin(k: int, p: int) -> int:
    """Bytes per element saved when ``k`` linears read one fp32 tensor (autocast casts it ``k``
    times)."""
    return 4 if p == 4 else k * p


def _layer_bytes(d, p: int, r: int, m: int, scores: float, u: int, decoder: bool = False) -> float:
    """Bytes per token one transformer layer saves (``u``: bytes of autocast's fp32 ops such as
    pow)."""
    h, f, inner, kv = d["h"], d["f"], d["inner"], d["kv"]
    sm = 4 * d["heads"] + scores  # per attention: fp32 logsumexp (+ materialised scores)
    fam = d["family"]
    if fam == "gpt2":  # ln_1 in, c_attn in, q/k/v, attn out, mask, ln_2 in, c_fc in, MLP, mask
        # gelu_new (tanh formula in Python) saves x, tanh, x/2, 1+tanh; the last two in fp32
        mlp = (
            (3 * p + 2 * u) * f
            if d["act"] == "gelu_new"
            else (1 if d["act"] == "relu" else 2) * p * f
        )
        return 2 * r * h + p * h + 3 * p * h + p * h + sm + 2 * m * h + p * h + mlp
    if fam == "bert":  # q/k/v in, q/k/v, attn out, mask, LN in, fc in, GELU in + out, mask, LN in
        return _lin(3, p) * h + 3 * p * h + sm + p * h + 2 * m * h + 2 * r * h + p * h + 2 * p * f
    if fam == "llama":  # 2x RMSNorm (in, normalised), q/k/v in, q, k, v, out, MLP in, SwiGLU (4)
        return (
            4 * r * h + _lin(3, p) * h + p * (2 * inner + 2 * kv) + sm + _lin(2, p) * h + 4 * p * f
        )
    # t5: RMSNorm (in, normalised), q/k/v in, q/k/v, out, mask; FF in, FF, mask
    attn = 2 * r * h + _lin(3, p) * h + 4 * p * inner + sm + m * h
    # ReLU saves its output (= wo's input without dropout); gated GELU saves 4 tensors
    ff = 4 * p * f + m * f if d["gated"] else (2 * p * f + m * f if m else p * f)
    layer = attn + 2 * r * h + _lin(2 if d["gated"] else 1, p) * h + ff + m * h
    if decoder:  # cross-attention: RMSNorm, q in, q, k, v, out, mask, and K/V input casts
        layer += 2 * r * h + p * h + 4 * p * inner + sm + m * h + (2 * p * h if p != 4 else 0)
    return layer


def _transformer_acts(
    d, tokens: int, seq: int, p: int, r: int, m: int, ckpt: bool, kernels: str
) -> tuple[float, float]:
    """(bytes saved by the stacks and heads, bytes of the one layer recomputed in backward)."""
    h, scores, u = d["h"], 0, r
    if kernels == "cpu":
        # CPU dropout keeps a float mask, CPU autocast runs pow and tanh in 16 bits, and with
        # attention dropout SDPA takes the math path: it saves the softmax output, the
        # dropout noise and its output (heads x seq per token each, in fp32)
        m, u = (p if m else 0), p
        scores = 3 * 4 * d["heads"] * seq if d["attn_dropout"] else 0
    stacks = [(d["layers"], _layer_bytes(d, p, r, m, scores, u))]
    extras = {"gpt2": m * h + r * h + p * h, "bert": r * h + m * h, "llama": 2 * r * h + p * h}.get(
        d["family"], 0
    )
    if d["family"] == "t5":
        stacks.append((d["dec_layers"], _layer_bytes(d, p, r, m, scores, u, decoder=True)))
        # per stack: embedding dropout, final RMSNorm, final dropout; encoder output for K/V
        extras = 2 * (2 * m * h + 2 * r * h) + p * h + (4 * h if p == 4 else 0)
    if ckpt:  # each layer keeps its input (the fp32 residual stream); one layer is recomputed
        return (sum(n * r * h for n, _ in stacks) + extras) * tokens, max(
            b for _, b in stacks
        ) * tokens
    return (sum(n * b for n, b in stacks) + extras) * tokens, 0.0


def _loss_bytes(d, tokens: int, p: int) -> float:
    """Peak of the vocabulary head's loss: log-softmax and its gradients, or the head's gradient."""
    if not d.get("lm_head"):
        return 0.0
    V, h = d["vocab"], d["h"]
    # backward of cross_entropy: saved fp32 log-softmax + its incoming and outgoing gradients;
    # then the lm_head matmul: gradient of the logits + the weight gradient (16-bit + fp32).
    return max(12 * V * tokens, (4 if p == 4 else 2) * V * tokens + (4 if p == 4 else 6) * V * h)


def _per_block(value, n: int) -> list[int]:
    """A diffusers UNet setting given once or per down block, as one int per block."""
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)] * n


def _unet_acts(
    cfg, batch: int, res: int, p: int, r: int, ckpt: bool, context: int = 77
) -> tuple[float, float]:
    """(saved bytes, recomputed bytes) of a diffusers UNet at ``res`` x ``res``, walking its
    blocks."""
    chans, lpb = list(cfg["block_out_channels"]), int(cfg["layers_per_block"])
    conditional = "cross_attention_dim" in cfg and any(
        "CrossAttn" in t for t in cfg["down_block_types"]
    )
    # SD 2 and SDXL give heads and transformer depth per down block (diffusers reverses the lists
    # for the up blocks and takes the last for the mid block): one number per block here
    n_blocks = len(chans)
    head_dims = _per_block(cfg.get("attention_head_dim") or 8, n_blocks)
    depths = _per_block(cfg.get("transformer_layers_per_block") or 1, n_blocks)
    # (saved bytes, bytes kept under checkpointing): diffusers checkpoints the resnets and
    # each transformer block, not the plain attention blocks, samplers or conv_in/out
    blocks: list[tuple[float, float]] = []
    fixed = [cfg["in_channels"] * p]  # per pixel at full resolution: conv_in input

    def resnet(ci, co, n):  # GroupNorm in (fp32), SiLU in (fp32), conv in (16-bit), twice
        blocks.append(((ci + co) * (2 * r + p) * n, ci * p * n))

    def attention(c, n, i):
        if conditional:  # Transformer2DModel: GN, proj_in, self-attn, cross-attn, GEGLU, proj_out
            heads, depth = head_dims[i], depths[i]  # diffusers' attention_head_dim: the heads
            per_px = 4 * r * c + depth * (_lin(3, p) * c + 26 * p * c + 8 * heads)
            ctx = depth * context * (2 * p * c + 2 * p * int(cfg["cross_attention_dim"]))
            blocks.append((per_px * n + ctx, depth * (r + 3 * p) * c * n))
        else:  # GN in, q/k/v inputs (3 copies), q/k/v, out
            full = (r + 7 * p) * c * n + 4 * (c // head_dims[i]) * n
            blocks.append((full, full))

    n, c_prev, skips = res * res, chans[0], [chans[0]]
    for i, kind in enumerate(cfg["down_block_types"]):
        for _ in range(lpb):
            resnet(c_prev, chans[i], n)
            if "Attn" in kind:
                attention(chans[i], n, i)
            c_prev = chans[i]
            skips.append(c_prev)
        if i < len(chans) - 1:  # strided conv saves its input
            blocks.append((p * c_prev * n, p * c_prev * n))
            n //= 4
            skips.append(c_prev)
    resnet(c_prev, c_prev, n)
    if conditional or cfg.get("add_attention", True):
        attention(c_prev, n, -1)
    resnet(c_prev, c_prev, n)
    for i, kind in enumerate(cfg["up_block_types"]):
        c = chans[::-1][i]
        for _ in range(lpb + 1):
            resnet(c_prev + skips.pop(), c, n)
            if "Attn" in kind:
                attention(c, n, n_blocks - 1 - i)
            c_prev = c
        if i < len(chans) - 1:  # nearest upsampling, then a conv that saves its input
            n *= 4
            blocks.append((p * c * n, p * c * n))
    fixed += [(2 * r + p) * chans[0], 8 * cfg["out_channels"]]  # GN, SiLU, conv_out; MSE loss
    fixed_bytes = sum(fixed) * res * res
    if ckpt:
        return batch * (sum(k for _, k in blocks) + fixed_bytes), batch * max(
            b - k for b, k in blocks
        )
    return batch * (sum(b for b, _ in blocks) + fixed_bytes), 0.0


def _sd_dims(spec) -> dict[str, Any]:
    """Stable Diffusion's UNet config (diffusers' defaults filled in), the parameters that
    train (the UNet's, or with LoRA its adapters'), the caption length."""
    import torch

    from ..diffusion.unet import new_unet

    cfgs = spec.sd_configs()
    with torch.device("meta"):
        unet = new_unet({**cfgs["unet"], "conditional": True})
        if spec.lora is not None:  # the texttoimage module's own adapters, on meta tensors
            from ..diffusion.texttoimage import add_lora

            add_lora(unet, spec.lora)
    trainable = sum(p.numel() for p in unet.parameters() if p.requires_grad)
    out = {
        "unet": dict(unet.config),
        "trainable": trainable,
        "context": int(cfgs["text_encoder"].get("max_position_embeddings", 77)),
    }
    if spec.lora is not None:  # the UNet's own weights stay in fp32, frozen (autocast casts them)
        out["frozen_unet"] = sum(p.numel() for p in unet.parameters()) - trainable
        out["params"] = spec.num_params + trainable  # the adapters come on top of the pipeline
    return out


# --------------------------------------------------------------------------- estimate
def estimate(
    d,
    batch: int,
    seq: int,
    precision: str,
    optimizer: str,
    zero: int,
    ckpt: bool,
    devices: int,
    kernels: str = "fused",
    tensor: int = 1,
    pipeline: int = 1,
    context: int = 1,
) -> dict[str, int]:
    """Per-device bytes of each component for one configuration.

    ``tensor`` and ``pipeline`` (Megatron's tensor and pipeline parallel degrees, transformers
    only): each device holds 1 / (tensor x pipeline) of the weights, gradients and optimizer
    state, ZeRO shards that over the ``devices / (tensor x pipeline)`` data-parallel replicas,
    and activations are 1 / tensor of a whole stack's (sequence parallelism splits the norms
    and dropouts too; under 1F1B the first stage holds ``pipeline`` micro-batches of its
    ``layers / pipeline`` layers: one micro-batch of every layer). Megatron-LM's accounting,
    Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022).
    Where ``pipeline`` does not divide the layers, the largest stage, ``ceil(layers /
    pipeline)`` of them, is the one planned (Megatron takes uneven stages). ``context``
    (context parallel, Megatron-LM's ``--context-parallel-size``): each device holds
    1 / context of every sequence's activations; its ranks hold the same weights, and the
    distributed optimizer shards over them as over data-parallel replicas.
    """
    stage = stage_share(d.get("layers") or 1, pipeline)
    model_parallel = tensor * pipeline
    replicas = max(1, devices // model_parallel)
    mixed = precision != "fp32"
    N = d.get(
        "trainable", d["params"]
    )  # sd: the UNet (or its LoRA adapters); frozen parts are weights alone
    base = d.get("frozen_unet", 0)  # sd with LoRA: the UNet's own weights, frozen in fp32
    # a transformer with LoRA: its own weights, frozen, kept as the model is (fp32 under the
    # Trainer, 16-bit under DeepSpeed) and sharded by ZeRO-3 like the rest
    lora_base = d.get("frozen_base", 0)
    frozen = (d["params"] - N - base - lora_base) * (2 if mixed else 4) + 4 * base
    p = 2 if mixed else 4  # activation bytes
    r = 4 if (not mixed or zero == 0) else 2  # autocast keeps norms and residuals in fp32
    wb = 2 if (mixed and zero) else 4  # DeepSpeed's model is 16-bit; the Trainer's is fp32
    opt = OPTIMIZERS[optimizer] + (4 if wb == 2 else 0)  # + fp32 master copy under ZeRO
    if d["family"] in ("unet", "sd"):
        # CUDA autocast runs GroupNorm in fp32; CPU autocast in 16 bits
        acts, redo = _unet_acts(
            d["unet"], batch, seq, p, p if kernels == "cpu" else r, ckpt, d.get("context", 77)
        )
        acts += redo
        # autocast casts every UNet weight, the frozen ones too; ZeRO-3 gathers about a tenth at a
        # time
        matmul, layer_params, tail = N + base, N / 10, 0
    else:
        tokens, h = batch * seq, d["h"]
        dropout_mask = 1 if d["dropout"] else 0
        acts, redo = _transformer_acts(d, tokens, seq, p, r, dropout_mask, ckpt, kernels)
        acts += max(_loss_bytes(d, tokens, p), redo)  # the loss's backward comes first
        head = d["vocab"] * h if (d["tied"] and d["lm_head"]) else 0
        full = N + lora_base  # autocast casts the frozen weights too
        matmul = full - d["embedding_params"] + head  # weights that autocast casts to 16 bits
        layer_params = (full - d["embedding_params"]) / (
            d["layers"] + (d["dec_layers"] if d["family"] == "t5" else 0)
        )
        tail = 2 * 4 * d["vocab"] * h if head else 0  # tied embedding: dense grad + accumulation
    acts *= stage / (tensor * context)
    N, lora_base, frozen = (x * stage / model_parallel for x in (N, lora_base, frozen))
    matmul, layer_params = matmul * stage / model_parallel, layer_params / tensor
    if mixed and zero == 0:
        acts += 2 * matmul  # autocast's 16-bit weight copies, saved for backward
    weights = wb * (N + lora_base) / (replicas if zero >= 3 else 1) + frozen
    if zero >= 3:
        weights += 2 * wb * layer_params  # the gathered layer and the prefetched one
    # Megatron's layouts: 16-bit gradients (NeMo's performance recipes set grad_reduce_in_fp32
    # False), 4 + 12 / d bytes a parameter (Megatron-LM docs/source/api-guide/dist_optimizer.md)
    grads = wb * N / (replicas if zero >= 2 else 1)
    ddp = 4 * N if (zero == 0 and replicas > 1) else 0  # DDP's gradient buckets (a second copy)
    opt_state = opt * N / (replicas if zero >= 1 else 1)
    # backward starts with every activation and ends with every gradient (plus, with
    # checkpointing, the last recomputed layer); the optimizer step needs no more
    peak = weights + opt_state + ddp + max(acts, grads + max(tail, redo))
    overlap = weights + grads + ddp + opt_state + acts - peak
    margin = MARGIN[0] * peak + MARGIN[1]
    return {
        k: int(round(v))
        for k, v in dict(
            weights=weights,
            gradients=grads + ddp,
            optimizer_state=opt_state,
            activations=acts,
            overlap=overlap,
            margin=margin,
        ).items()
    }


def stage_share(layers: int, pipeline: int) -> float:
    """The largest pipeline stage's layers over an even stage's: ``pipeline x ceil(layers /
    pipeline) / layers`` (1 where ``pipeline`` divides the layers): the memory it holds and
    the pace it sets."""
    return pipeline * -(-layers // pipeline) / layers if pipeline > 1 else 1.0


def traffic_per_unit(d, seq: int, precision: str) -> float:
    """Bytes a token (a UNet: an image) moves through HBM outside the matmuls, about: each
    activation saved for backward is written in the forward and read in the backward, and
    its gradient written once (3 x the saved bytes, fused kernels, no weight copies). The
    memory-bound share of a step, which a chip's HBM bandwidth speeds up and its peak does not."""
    p = 4 if precision == "fp32" else 2
    if d["family"] in ("unet", "sd"):
        saved, _ = _unet_acts(d["unet"], 1, seq, p, 4, False, d.get("context", 77))
        return 3 * saved
    saved, _ = _transformer_acts(d, 1, seq, p, 4, 1 if d["dropout"] else 0, False, "fused")
    loss = 12 * d["vocab"] if d.get("lm_head") else 0  # fp32 log-softmax and its gradients
    return 3 * saved + loss
