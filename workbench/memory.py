"""``wb.plan_memory``: will this training run fit, and if not, what is the cheapest fix?

The estimate counts, per device, the tensors of one training step (forward, backward,
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

Accuracy. tests/test_memory.py measures the peak of one fp32 training step on CPU for the
tiny model of every family and requires ``peak_allocated`` within +-35% of it. PyTorch's
CPU kernels differ from the accelerator kernels assumed above (with attention dropout SDPA
takes the math path and saves seq x seq scores; dropout masks are float), which makes the
tiny BERT and T5 need ~22% more at seq 128; ``kernels="cpu"`` models those kernels and is
required within +-10% (measured: 0-6%). A second target, within +-15% of
``torch.cuda.max_memory_allocated`` for a GPT-2-124M-shaped model, can only be checked on
a CUDA GPU (the ``requires_cuda`` test, skipped elsewhere).
"""

from __future__ import annotations

import html
import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Any

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
KERNELS = ("auto", "fused", "cpu")
OPTIMIZERS = {"adamw": 8, "adam": 8, "sgd": 4, "adamw_8bit": 2}  # state bytes per parameter
GiB = 2**30
MARGIN = (0.10, 512 * 2**20)  # fraction of the peak, constant bytes
# name -> (kind, full name, nominal memory in GiB: HBM is sized in binary units)
KNOWN_DEVICES = {
    "Gaudi1": ("hpu", "Intel Gaudi", 32),
    "Gaudi2": ("hpu", "Intel Gaudi 2", 96),
    "Gaudi3": ("hpu", "Intel Gaudi 3", 128),
    "A100": ("cuda", "NVIDIA A100 80GB", 80),
    "H100": ("cuda", "NVIDIA H100 80GB", 80),
    "H200": ("cuda", "NVIDIA H200", 141),
}
MAX_DEVICES = 4096


# --------------------------------------------------------------------------- model shape
def _first(cfg, *names, default=None):
    """The first of ``names`` that ``cfg`` has and is not None."""
    for n in names:
        v = cfg.get(n) if isinstance(cfg, dict) else getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def _unet_config(spec) -> dict[str, Any]:
    """The UNet config with diffusers' defaults filled in (no model is built)."""
    from .catalog import _unet_class

    cfg = spec.config()
    params = inspect.signature(_unet_class(cfg).__init__).parameters
    full = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    full.update(cfg)
    return full


def _dims(spec) -> dict[str, Any]:
    """The architecture numbers the estimate needs."""
    d: dict[str, Any] = {"family": spec.family, "name": spec.name, "params": spec.num_params,
                         "task": spec.task}
    if spec.family == "unet":
        d["unet"] = _unet_config(spec)
        return d
    cfg = spec.config()
    h, heads = cfg.hidden_size, cfg.num_attention_heads
    head_dim = _first(cfg, "d_kv", "head_dim", default=h // heads)
    d.update(
        h=h, heads=heads, layers=cfg.num_hidden_layers, vocab=cfg.vocab_size,
        f=_first(cfg, "intermediate_size", "n_inner", "d_ff", default=4 * h),
        inner=heads * head_dim, kv=_first(cfg, "num_key_value_heads", default=heads) * head_dim,
        dec_layers=_first(cfg, "num_decoder_layers", default=cfg.num_hidden_layers),
        act=str(_first(cfg, "activation_function", "hidden_act", "dense_act_fn", default="gelu")),
        gated=bool(getattr(cfg, "is_gated_act", False)),
        dropout=_first(cfg, "hidden_dropout_prob", "resid_pdrop", "dropout_rate", default=0.0) > 0,
        attn_dropout=_first(cfg, "attention_probs_dropout_prob", "attn_pdrop", "dropout_rate",
                            "attention_dropout", default=0.0) > 0,
        tied=bool(getattr(cfg, "tie_word_embeddings", False)),
        positions=_first(cfg, "n_positions", "max_position_embeddings") if spec.family in ("gpt2", "bert") else None,
        lm_head=spec.task in ("causal_lm", "seq2seq"),
    )
    extra = (d["positions"] or 0) + _first(cfg, "type_vocab_size", default=0)
    d["embedding_params"] = (d["vocab"] + extra) * h  # input embeddings: looked up, never cast
    return d


# --------------------------------------------------------------------------- activations
def _lin(k: int, p: int) -> int:
    """Bytes per element saved when ``k`` linears read one fp32 tensor (autocast casts it ``k`` times)."""
    return 4 if p == 4 else k * p


def _layer_bytes(d, p: int, r: int, m: int, scores: float, u: int, decoder: bool = False) -> float:
    """Bytes per token one transformer layer saves (``u``: bytes of autocast's fp32 ops such as pow)."""
    h, f, inner, kv = d["h"], d["f"], d["inner"], d["kv"]
    sm = 4 * d["heads"] + scores  # per attention: fp32 logsumexp (+ materialised scores)
    fam = d["family"]
    if fam == "gpt2":  # ln_1 in, c_attn in, q/k/v, attn out, mask, ln_2 in, c_fc in, MLP, mask
        # gelu_new (tanh formula in Python) saves x, tanh, x/2, 1+tanh; the last two in fp32
        mlp = (3 * p + 2 * u) * f if d["act"] == "gelu_new" else (1 if d["act"] == "relu" else 2) * p * f
        return 2 * r * h + p * h + 3 * p * h + p * h + sm + 2 * m * h + p * h + mlp
    if fam == "bert":  # q/k/v in, q/k/v, attn out, mask, LN in, fc in, GELU in + out, mask, LN in
        return _lin(3, p) * h + 3 * p * h + sm + p * h + 2 * m * h + 2 * r * h + p * h + 2 * p * f
    if fam == "llama":  # 2x RMSNorm (in, normalised), q/k/v in, q, k, v, out, MLP in, SwiGLU (4)
        return 4 * r * h + _lin(3, p) * h + p * (2 * inner + 2 * kv) + sm + _lin(2, p) * h + 4 * p * f
    # t5: RMSNorm (in, normalised), q/k/v in, q/k/v, out, mask; FF in, FF, mask
    attn = 2 * r * h + _lin(3, p) * h + 4 * p * inner + sm + m * h
    # ReLU saves its output (= wo's input without dropout); gated GELU saves 4 tensors
    ff = 4 * p * f + m * f if d["gated"] else (2 * p * f + m * f if m else p * f)
    layer = attn + 2 * r * h + _lin(2 if d["gated"] else 1, p) * h + ff + m * h
    if decoder:  # cross-attention: RMSNorm, q in, q, k, v, out, mask, and K/V input casts
        layer += 2 * r * h + p * h + 4 * p * inner + sm + m * h + (2 * p * h if p != 4 else 0)
    return layer


def _transformer_acts(d, tokens: int, seq: int, p: int, r: int, m: int, ckpt: bool,
                      kernels: str) -> tuple[float, float]:
    """(bytes saved by the stacks and heads, bytes of the one layer recomputed in backward)."""
    h, scores, u = d["h"], 0, r
    if kernels == "cpu":
        # CPU dropout keeps a float mask, CPU autocast runs pow and tanh in 16 bits, and with
        # attention dropout SDPA takes the math path: it saves the softmax output, the
        # dropout noise and its output (heads x seq per token each, in fp32)
        m, u = (p if m else 0), p
        scores = 3 * 4 * d["heads"] * seq if d["attn_dropout"] else 0
    stacks = [(d["layers"], _layer_bytes(d, p, r, m, scores, u))]
    extras = {"gpt2": m * h + r * h + p * h, "bert": r * h + m * h,
              "llama": 2 * r * h + p * h}.get(d["family"], 0)
    if d["family"] == "t5":
        stacks.append((d["dec_layers"], _layer_bytes(d, p, r, m, scores, u, decoder=True)))
        # per stack: embedding dropout, final RMSNorm, final dropout; encoder output for K/V
        extras = 2 * (2 * m * h + 2 * r * h) + p * h + (4 * h if p == 4 else 0)
    if ckpt:  # each layer keeps its input (the fp32 residual stream); one layer is recomputed
        return (sum(n * r * h for n, _ in stacks) + extras) * tokens, max(b for _, b in stacks) * tokens
    return (sum(n * b for n, b in stacks) + extras) * tokens, 0.0


def _loss_bytes(d, tokens: int, p: int) -> float:
    """Peak of the vocabulary head's loss: log-softmax and its gradients, or the head's gradient."""
    if not d.get("lm_head"):
        return 0.0
    V, h = d["vocab"], d["h"]
    # backward of cross_entropy: saved fp32 log-softmax + its incoming and outgoing gradients;
    # then the lm_head matmul: gradient of the logits + the weight gradient (16-bit + fp32).
    return max(12 * V * tokens, (4 if p == 4 else 2) * V * tokens + (4 if p == 4 else 6) * V * h)


def _unet_acts(cfg, batch: int, res: int, p: int, r: int, ckpt: bool) -> tuple[float, float]:
    """(saved bytes, recomputed bytes) of a diffusers UNet at ``res`` x ``res``, walking its blocks."""
    chans, lpb = list(cfg["block_out_channels"]), int(cfg["layers_per_block"])
    conditional = "cross_attention_dim" in cfg and any("CrossAttn" in t for t in cfg["down_block_types"])
    head_dim = int(cfg.get("attention_head_dim") or 8)
    # (saved bytes, bytes kept under checkpointing): diffusers checkpoints the resnets and
    # each transformer block, not the plain attention blocks, samplers or conv_in/out
    blocks: list[tuple[float, float]] = []
    fixed = [cfg["in_channels"] * p]  # per pixel at full resolution: conv_in input

    def resnet(ci, co, n):  # GroupNorm in (fp32), SiLU in (fp32), conv in (16-bit), twice
        blocks.append(((ci + co) * (2 * r + p) * n, ci * p * n))

    def attention(c, n):
        if conditional:  # Transformer2DModel: GN, proj_in, self-attn, cross-attn, GEGLU, proj_out
            heads = head_dim
            per_px = 4 * r * c + _lin(3, p) * c + 26 * p * c + 8 * heads
            context = 77 * (2 * p * c + 2 * p * int(cfg["cross_attention_dim"]))
            blocks.append((per_px * n + context, (r + 3 * p) * c * n))
        else:  # GN in, q/k/v inputs (3 copies), q/k/v, out
            full = (r + 7 * p) * c * n + 4 * (c // head_dim) * n
            blocks.append((full, full))

    n, c_prev, skips = res * res, chans[0], [chans[0]]
    for i, kind in enumerate(cfg["down_block_types"]):
        for _ in range(lpb):
            resnet(c_prev, chans[i], n)
            if "Attn" in kind:
                attention(chans[i], n)
            c_prev = chans[i]
            skips.append(c_prev)
        if i < len(chans) - 1:  # strided conv saves its input
            blocks.append((p * c_prev * n, p * c_prev * n))
            n //= 4
            skips.append(c_prev)
    resnet(c_prev, c_prev, n)
    if conditional or cfg.get("add_attention", True):
        attention(c_prev, n)
    resnet(c_prev, c_prev, n)
    for i, kind in enumerate(cfg["up_block_types"]):
        c = chans[::-1][i]
        for _ in range(lpb + 1):
            resnet(c_prev + skips.pop(), c, n)
            if "Attn" in kind:
                attention(c, n)
            c_prev = c
        if i < len(chans) - 1:  # nearest upsampling, then a conv that saves its input
            n *= 4
            blocks.append((p * c * n, p * c * n))
    fixed += [(2 * r + p) * chans[0], 8 * cfg["out_channels"]]  # GN, SiLU, conv_out; MSE loss
    fixed_bytes = sum(fixed) * res * res
    if ckpt:
        return batch * (sum(k for _, k in blocks) + fixed_bytes), batch * max(b - k for b, k in blocks)
    return batch * (sum(b for b, _ in blocks) + fixed_bytes), 0.0


# --------------------------------------------------------------------------- estimate
def _estimate(d, batch: int, seq: int, precision: str, optimizer: str, zero: int,
              ckpt: bool, devices: int, kernels: str = "fused") -> dict[str, int]:
    """Per-device bytes of each component for one configuration."""
    N, mixed = d["params"], precision != "fp32"
    p = 2 if mixed else 4  # activation bytes
    r = 4 if (not mixed or zero == 0) else 2  # autocast keeps norms and residuals in fp32
    wb = 2 if (mixed and zero) else 4  # DeepSpeed's model is 16-bit; the Trainer's is fp32
    opt = OPTIMIZERS[optimizer] + (4 if wb == 2 else 0)  # + fp32 master copy under ZeRO
    if d["family"] == "unet":
        # CUDA autocast runs GroupNorm in fp32; CPU autocast in 16 bits
        acts, redo = _unet_acts(d["unet"], batch, seq, p, p if kernels == "cpu" else r, ckpt)
        acts += redo
        matmul, layer_params, tail = N, N / 10, 0  # ZeRO-3 gathers about a tenth at a time
    else:
        tokens, h = batch * seq, d["h"]
        dropout_mask = 1 if d["dropout"] else 0
        acts, redo = _transformer_acts(d, tokens, seq, p, r, dropout_mask, ckpt, kernels)
        acts += max(_loss_bytes(d, tokens, p), redo)  # the loss's backward comes first
        head = d["vocab"] * h if (d["tied"] and d["lm_head"]) else 0
        matmul = N - d["embedding_params"] + head  # weights that autocast casts to 16 bits
        layer_params = (N - d["embedding_params"]) / (d["layers"] + (d["dec_layers"] if d["family"] == "t5" else 0))
        tail = 2 * 4 * d["vocab"] * h if head else 0  # tied embedding: dense grad + accumulation
    if mixed and zero == 0:
        acts += 2 * matmul  # autocast's 16-bit weight copies, saved for backward
    weights = wb * N / (devices if zero >= 3 else 1)
    if zero >= 3:
        weights += 2 * wb * layer_params  # the gathered layer and the prefetched one
    grads = wb * N / (devices if zero >= 2 else 1)
    ddp = 4 * N if (zero == 0 and devices > 1) else 0  # DDP's gradient buckets (a second copy)
    opt_state = opt * N / (devices if zero >= 1 else 1)
    # backward starts with every activation and ends with every gradient (plus, with
    # checkpointing, the last recomputed layer); the optimizer step needs no more
    peak = weights + opt_state + ddp + max(acts, grads + max(tail, redo))
    overlap = weights + grads + ddp + opt_state + acts - peak
    margin = MARGIN[0] * peak + MARGIN[1]
    return {k: int(round(v)) for k, v in dict(weights=weights, gradients=grads + ddp,
            optimizer_state=opt_state, activations=acts, overlap=overlap, margin=margin).items()}


def _fmt(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if abs(n) >= GiB else f"{n / 2**20:.1f} MiB"


@dataclass
class MemoryPlan:
    """Estimated memory of one training step, per device, in bytes.

    Attributes
    ----------
    weights, gradients, optimizer_state, activations : int
        Per-device bytes of each component (activations include the loss and, with
        autocast, the 16-bit weight copies; gradients include DDP's buckets).
    overlap : int
        Bytes never live together: gradients grow as activations are freed.
    margin : int
        Runtime, workspaces and fragmentation: 10% + 512 MiB.
    model, num_params, batch_size, seq_len, precision, optimizer, zero_stage,
    grad_checkpointing, devices
        The inputs (``precision`` resolved: ``auto`` is bf16, the accelerators' choice).
    """

    model: str
    num_params: int
    batch_size: int
    seq_len: int
    precision: str
    optimizer: str
    zero_stage: int
    grad_checkpointing: bool
    devices: int
    weights: int
    gradients: int
    optimizer_state: int
    activations: int
    overlap: int
    margin: int
    kernels: str = "fused"
    requested_precision: str = "auto"
    requested_kernels: str = "auto"
    _dims: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def peak_allocated(self) -> int:
        """Peak bytes of live tensors per device (what ``max_memory_allocated`` reports)."""
        return self.weights + self.gradients + self.optimizer_state + self.activations - self.overlap

    @property
    def per_device(self) -> int:
        """Bytes each device needs: ``peak_allocated`` plus the margin."""
        return self.peak_allocated + self.margin

    @property
    def total(self) -> int:
        """Bytes over all devices."""
        return self.per_device * self.devices

    def _with(self, **changes) -> MemoryPlan:
        """The same plan with some inputs changed."""
        new = replace(self, **changes)
        parts = _estimate(self._dims, new.batch_size, new.seq_len, new.precision, new.optimizer,
                          new.zero_stage, new.grad_checkpointing, new.devices, new.kernels)
        return replace(new, **parts)

    def _target(self, device) -> tuple[int, MemoryPlan]:
        """(capacity in bytes, the plan for that device's precision)."""
        if isinstance(device, (int, float)) and not isinstance(device, bool):
            return int(device), self
        if isinstance(device, str) and device.lower() != "detected":
            names = {k.lower(): k for k in KNOWN_DEVICES}
            if device.lower() not in names:
                raise ValueError(f"unknown device {device!r}; known: {', '.join(KNOWN_DEVICES)}, "
                                 "'detected', or a number of bytes")
            return KNOWN_DEVICES[names[device.lower()]][2] * GiB, self
        from .device import device as detect

        info = detect() if isinstance(device, str) else device
        changes = {}  # "auto" follows the detected device: its precision, its kernels
        if self.requested_precision == "auto" and info.precision != self.precision:
            changes["precision"] = info.precision
        if self.requested_kernels == "auto" and info.kind == "cpu" and self.kernels != "cpu":
            changes["kernels"] = "cpu"
        return int(info.total_memory), self._with(**changes) if changes else self

    def fits(self, device) -> bool:
        """Whether one device holds the plan: a known name (``"H100"``), ``"detected"``, bytes or a DeviceInfo."""
        capacity, plan = self._target(device)
        return plan.per_device <= capacity

    def suggestion(self, device) -> str:
        """The cheapest change that makes the plan fit ``device``; ``""`` when it fits.

        Tried in order: a smaller batch (the largest that fits), gradient checkpointing,
        bf16 (from fp32), ZeRO stage 1/2/3 over the fewest devices (2, 4, ... 64), then
        more devices: checkpointing (and bf16) with ZeRO-3 over up to 4096 devices, with
        the largest batch that fits.
        """
        capacity, plan = self._target(device)

        def largest(base: MemoryPlan) -> int:  # largest batch <= batch_size that fits, or 0
            lo, hi = 0, plan.batch_size  # memory grows with the batch: bisect
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if base._with(batch_size=mid).per_device <= capacity else (lo, mid - 1)
            return lo

        def batch(b: int) -> str:
            steps = math.ceil(plan.batch_size / b)
            return f"batch_size={b} (gradient_accumulation_steps={steps} keeps the effective batch)"

        if plan.per_device <= capacity:
            return ""
        candidates = [("", {})] if plan.batch_size > 1 else []
        if not plan.grad_checkpointing:
            candidates.append(("gradient checkpointing", {"grad_checkpointing": True}))
        if plan.precision == "fp32":
            candidates.append(("bf16", {"precision": "bf16"}))
        counts = [n for n in (2**k for k in range(1, 13)) if n >= plan.devices]
        candidates += [(f"ZeRO-{z} over {n} devices", {"zero_stage": z, "devices": n})
                       for n in counts if n <= 64 for z in range(max(1, plan.zero_stage), 4)]
        for text, changes in candidates:
            if not text:  # the batch alone
                b = largest(plan)
                if b:
                    return batch(b)
            elif plan._with(**changes).per_device <= capacity:
                return text
        cheap = {"grad_checkpointing": True, "precision": "bf16" if plan.precision == "fp32" else plan.precision}
        extra = "gradient checkpointing" + (" and bf16" if plan.precision == "fp32" else "")
        for n in [plan.devices] + [c for c in counts if c > plan.devices]:
            zero = plan.zero_stage if n == plan.devices else 3
            b = largest(plan._with(devices=n, zero_stage=zero, **cheap))
            if b:
                where = f"ZeRO-3 over {n} devices with " if n != plan.devices else ""
                return f"{where}{extra}" + (f", {batch(b)}" if b < plan.batch_size else "")
        return f"does not fit even with ZeRO-3 over {MAX_DEVICES} devices, {extra} and batch_size=1"

    def table(self):
        """Known devices and the detected one: memory, need, fits, and the cheapest fix (DataFrame)."""
        import pandas as pd

        from .device import device as detect

        rows = []
        for name, (kind, full, gib) in KNOWN_DEVICES.items():
            rows.append((name, kind, full, gib * GiB, self))
        try:
            info = detect()
            _, plan = self._target(info)
            rows.append(("detected", info.kind, info.name, int(info.total_memory), plan))
        except Exception as e:  # an unusable $WORKBENCH_DEVICE must not hide the table
            rows.append(("detected", "-", f"unavailable: {e}", 0, self))
        out = []
        for name, kind, full, capacity, plan in rows:
            fits = capacity > 0 and plan.per_device <= capacity
            hint = "" if fits or not capacity else plan.suggestion(capacity)
            if name == "Gaudi1" and plan.precision == "fp16":
                hint = ("Gaudi1 has no fp16: use bf16 (same memory). " + hint).strip()
            out.append({"device": name, "kind": kind, "name": full, "memory_gib": round(capacity / GiB, 1),
                        "needs_gib": round(plan.per_device / GiB, 2), "precision": plan.precision,
                        "fits": fits, "suggestion": hint})
        return pd.DataFrame(out)

    def _rows(self) -> list[tuple[str, int]]:
        return [("weights", self.weights), ("gradients", self.gradients),
                ("optimizer state", self.optimizer_state), ("activations", self.activations),
                ("overlap (grads vs activations)", -self.overlap), ("margin", self.margin),
                ("per device", self.per_device)] + ([("total", self.total)] if self.devices > 1 else [])

    def _title(self) -> str:
        zero = f", ZeRO-{self.zero_stage}" if self.zero_stage else ""
        ckpt = ", gradient checkpointing" if self.grad_checkpointing else ""
        return (f"{self.model} ({self.num_params / 1e6:,.1f}M params), batch {self.batch_size} x "
                f"{self.seq_len}, {self.precision}, {self.optimizer}{zero}{ckpt}, {self.devices} device(s)")

    def __repr__(self) -> str:
        lines = [f"MemoryPlan: {self._title()}"]
        lines += [f"  {k:<31}{_fmt(v):>12}" for k, v in self._rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        td = "<td style='padding:1px 8px;{}'>{}</td>"
        comp = "".join(f"<tr>{td.format('color:#666', html.escape(k))}{td.format('text-align:right', _fmt(v))}</tr>"
                       for k, v in self._rows())
        df = self.table()
        head = "".join(td.format("font-weight:bold", c) for c in ("device", "memory", "needs", "fits", "suggestion"))
        devs = "".join(
            "<tr>" + td.format("", html.escape(f"{r.device} ({r.name})" if r.device == "detected" else r.device))
            + td.format("text-align:right", f"{r.memory_gib:g} GiB") + td.format("text-align:right", f"{r.needs_gib:g} GiB")
            + td.format(f"color:{'#2e7d32' if r.fits else '#c62828'}", "yes" if r.fits else "no")
            + td.format("", html.escape(r.suggestion)) + "</tr>" for r in df.itertuples())
        return (f"<div style='font:12px sans-serif'><div style='font-weight:bold;margin:2px 8px'>"
                f"{html.escape(self._title())}</div><div style='display:flex;gap:16px;align-items:flex-start'>"
                f"<table style='border-collapse:collapse'>{comp}</table>"
                f"<table style='border-collapse:collapse'><tr>{head}</tr>{devs}</table></div></div>")


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def plan_memory(model, batch_size: int, seq_len: int | None = None, precision: str = "auto",
                optimizer: str = "adamw", zero_stage: int = 0, grad_checkpointing: bool = False,
                devices: int = 1, *, kernels: str = "auto") -> MemoryPlan:
    """Estimate the memory of training ``model`` and say where it fits.

    Parameters
    ----------
    model : ModelSpec or str
        ``wb.model("gpt2", size="small")`` or a catalog name such as ``"llama-7b"``.
    batch_size : int
        Samples per device per step (the Trainer's ``per_device_train_batch_size``).
    seq_len : int
        Tokens per sample (T5: for both the input and the target). For a UNet, the image
        (latent) side in pixels; default its ``sample_size``.
    precision : {"auto", "fp32", "bf16", "fp16"}
        ``auto`` is bf16 for the accelerators; the "detected" row of ``table()`` uses the
        detected device's own preference (fp32 on CPU).
    optimizer : {"adamw", "adam", "sgd", "adamw_8bit"}
    zero_stage : {0, 1, 2, 3}
        DeepSpeed ZeRO: 1 shards the optimizer state over ``devices``, 2 also the
        gradients, 3 also the weights. Needs ``devices > 1``.
    grad_checkpointing : bool
        Keep only each layer's input; recompute one layer at a time in backward.
    devices : int
        Data-parallel devices.
    kernels : {"auto", "fused", "cpu"}
        ``fused``: flash / memory-efficient attention and 1-byte dropout masks (CUDA,
        Gaudi). ``cpu``: PyTorch's CPU kernels, which save seq x seq attention scores when
        attention dropout is on and keep float dropout masks. ``auto``: fused, and cpu for
        the "detected" row when that device is a CPU.

    Returns
    -------
    MemoryPlan
        Components in bytes, ``per_device``, ``total``, ``table()``, ``fits()``, ``suggestion()``.

    Examples
    --------
    >>> from workbench.memory import plan_memory  # also wb.plan_memory
    >>> plan = plan_memory("gpt2-small", batch_size=8, seq_len=1024)
    >>> plan.fits("H100"), plan.fits("Gaudi1")
    (True, True)
    >>> plan_memory("llama-7b", batch_size=8, seq_len=2048).suggestion("H200")
    'batch_size=2 (gradient_accumulation_steps=4 keeps the effective batch)'
    """
    from .catalog import ModelSpec
    from .catalog import model as as_model

    if not isinstance(model, (ModelSpec, str)):
        raise TypeError(f"model must be a ModelSpec or a catalog name such as 'gpt2-small', got {type(model).__name__}")
    spec = as_model(model)
    _positive("batch_size", batch_size)
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if kernels not in KERNELS:
        raise ValueError(f"unknown kernels {kernels!r}; known: {', '.join(KERNELS)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    if zero_stage not in (0, 1, 2, 3) or isinstance(zero_stage, bool):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    _positive("devices", devices)
    if zero_stage and devices == 1:
        raise ValueError(f"zero_stage={zero_stage} shards over devices: pass devices=N with N > 1, "
                         "or zero_stage=0 for one device")
    d = _dims(spec)
    if seq_len is None and spec.family == "unet":
        seq_len = int(d["unet"].get("sample_size") or 64)
    if seq_len is None:
        raise ValueError(f"seq_len is required for {spec.name}: tokens per sample, e.g. seq_len=512")
    _positive("seq_len", seq_len)
    if d.get("positions") and seq_len > d["positions"]:
        raise ValueError(f"{spec.name} has learned positions for at most {d['positions']} tokens: "
                         f"use seq_len <= {d['positions']}")
    resolved = "bf16" if precision == "auto" else precision
    kern = "fused" if kernels == "auto" else kernels
    parts = _estimate(d, batch_size, seq_len, resolved, optimizer, zero_stage, grad_checkpointing, devices, kern)
    return MemoryPlan(model=spec.name, num_params=d["params"], batch_size=batch_size, seq_len=seq_len,
                      precision=resolved, optimizer=optimizer, zero_stage=zero_stage,
                      grad_checkpointing=bool(grad_checkpointing), devices=devices,
                      kernels=kern, requested_precision=precision, requested_kernels=kernels,
                      _dims=d, **parts)
