"""Attention for packed causal blocks: no mask at all (concat), or one per document (isolated).
The run switches the model to an alias of transformers' SDPA (its documented
``AttentionInterface``), and back when the run ends.
"""

from __future__ import annotations

import logging

# An alias of transformers' own SDPA attention under a name of ours: transformers builds no
# mask for an implementation without a registered mask function, so SDPA gets is_causal=True
# and no mask, and can take its flash kernel (under "sdpa" a mask is built under compile).
CAUSAL_SDPA = "workbench_causal_sdpa"


def causal_sdpa(model):
    """Switch a model that uses SDPA to CAUSAL_SDPA; returns the function that switches it
    back, or None where the model uses another attention (left as is)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA
    before = getattr(base.config, "_attn_implementation", None)
    if before != "sdpa" or not hasattr(base, "set_attn_implementation"):
        return None
    AttentionInterface.register(CAUSAL_SDPA, sdpa_attention_forward)
    base.set_attn_implementation(CAUSAL_SDPA)
    return lambda: base.set_attn_implementation(before)


class NoMaskAdvice(logging.Filter):
    """Drops transformers' advice to pass an attention mask: packed blocks go without one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "passing in an `attention_mask`" not in record.getMessage()


def quiet_missing_mask_warning() -> None:
    """Filter transformers' missing-mask advice (once per process; filters are idempotent here)."""
    log = logging.getLogger("transformers.modeling_utils")
    if not any(isinstance(f, NoMaskAdvice) for f in log.filters):
        log.addFilter(NoMaskAdvice())


def without_padding_check(model):
    """Skip transformers' check for padding without a mask on a packed run's model (its
    PreTrainedModel parts); returns the function that restores it. The check
    (``warn_if_padding_and_no_attention_mask``, transformers 5.24 ``modeling_utils.py:4701``)
    reads two token ids to the host every forward: a sync per step for advice we drop."""
    from transformers import PreTrainedModel

    parts = [m for m in model.modules() if isinstance(m, PreTrainedModel)]
    for m in parts:
        m.warn_if_padding_and_no_attention_mask = _no_check

    def restore():
        for m in parts:
            m.__dict__.pop("warn_if_padding_and_no_attention_mask", None)

    return restore


def _no_check(input_ids, attention_mask) -> None:
    """Packed blocks go without a mask on purpose (see ``without_padding_check``)."""


def without_cache(model):
    """Turn the model's KV cache off for training (transformers reads packed positions only
    when there is no cache); returns the function that turns it back."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA
    config = getattr(base, "config", None)
    if config is None or not hasattr(config, "use_cache"):
        return None
    before = config.use_cache
    config.use_cache = False
    return lambda: setattr(config, "use_cache", before)


# An alias of transformers' own SDPA attention whose mask function always builds the mask.
# Under "sdpa", transformers 5.24 reads the mask to decide whether to leave it out
# (``masking_utils.py:354``, ``padding_mask.all()``; ``fast_all`` at line 292): a host read
# every forward, and another graph for a batch without padding. Under torch.compile it always
# builds it (``is_tracing``): this alias does the same without compiling, through
# transformers' documented ``AttentionInterface`` and ``AttentionMaskInterface``.
MASKED_SDPA = "workbench_masked_sdpa"


def _built_mask(*args, **kwargs):
    """transformers' SDPA mask, never skipped for want of padding (no read of the mask)."""
    from transformers.masking_utils import sdpa_mask

    kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
    return sdpa_mask(*args, **kwargs)


def masked_sdpa(model):
    """Switch a model that uses SDPA to MASKED_SDPA (static-shape devices); returns the
    function that switches it back, or None where the model uses another attention."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA
    before = getattr(getattr(base, "config", None), "_attn_implementation", None)
    if before != "sdpa" or not hasattr(base, "set_attn_implementation"):
        return None
    AttentionInterface.register(MASKED_SDPA, sdpa_attention_forward)
    AttentionMaskInterface.register(MASKED_SDPA, _built_mask)
    base.set_attn_implementation(MASKED_SDPA)
    return lambda: base.set_attn_implementation(before)
