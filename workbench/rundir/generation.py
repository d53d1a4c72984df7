"""Text generation with static shapes, for Gaudi's lazy mode.

``generate`` grows the sequence a token per step, so each token would compile a new graph.
As optimum-habana does (``optimum/habana/transformers/generation/utils.py`` @ 1d8504c,
``static_shapes``, ``bucket_size``), the prompt and its new tokens are padded on the right to a
multiple of ``BUCKET`` tokens and the whole padded sequence runs at each step: causal logits do
not see the padding after them, so each step reads the logits at the current position
(``index_select``) and writes the new token (``index_copy_``). No KV cache (optimum-habana's
static one): each step recomputes the padded sequence, cheap for the workbench's small models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BUCKET = 32  # tokens: a prompt plus its new tokens is padded up to a multiple of this
OPTIONS = ("do_sample", "temperature", "top_k", "top_p")  # what the static loop supports


def supports(options: dict[str, Any]) -> bool:
    """Whether the static loop can honour these ``generate`` options."""
    return set(options) <= set(OPTIONS)


def padded_length(prompt: int, new_tokens: int, limit: int | None) -> int:
    """The static length for a prompt of ``prompt`` tokens and ``new_tokens`` more: the next
    multiple of ``BUCKET``, at most the model's ``limit`` of positions."""
    length = -(-(prompt + new_tokens) // BUCKET) * BUCKET
    return min(length, limit) if limit else length


def generate(
    model,
    ids,
    max_new_tokens: int,
    mark_step: Callable[[], None],
    *,
    pad_token_id: int,
    eos_token_id: int | None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
):
    """``ids`` (1 x prompt, on the host) continued by up to ``max_new_tokens`` tokens (greedy or
    sampled), stopping at ``eos_token_id``, a ``mark_step`` after each; 1 x (prompt + new)."""
    import torch
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    prompt = ids.shape[1]
    limit = getattr(model.config, "max_position_embeddings", None) or getattr(
        model.config, "n_positions", None
    )
    length = padded_length(prompt, max_new_tokens, limit)
    if prompt >= length:
        raise ValueError(
            f"the prompt has {prompt} tokens; the model takes {limit} positions: shorten it"
        )
    warpers = LogitsProcessorList()
    if do_sample:
        if temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(temperature))
        if top_k:
            warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
    # padded on the host, as optimum-habana pads before moving the inputs to the device
    host = torch.full((1, length), pad_token_id, dtype=ids.dtype)
    host[:, :prompt] = ids
    buffer = host.to(model.device)
    end = min(prompt + max_new_tokens, length)
    done = prompt
    with torch.no_grad():
        for position in range(prompt, end):
            read = torch.tensor([position - 1], device=model.device)
            logits = model(input_ids=buffer).logits.index_select(1, read)[:, 0, :]
            logits = warpers(buffer, logits.float())  # pyright: ignore[reportArgumentType]  # typed LongTensor: an int64 Tensor is one
            if do_sample:
                token = torch.multinomial(torch.softmax(logits, dim=-1), 1)
            else:
                token = logits.argmax(dim=-1, keepdim=True)
            buffer.index_copy_(1, read + 1, token.to(buffer.dtype))
            mark_step()
            done = position + 1
            if eos_token_id is not None and int(token.item()) == eos_token_id:
                break
    return buffer.cpu()[:, :done]
