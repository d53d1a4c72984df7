"""Process-wide torch settings a run needs, set for the run and put back after it: a kernel
outlives its runs. Each setter returns the function that restores what it found.
"""

from __future__ import annotations

from collections.abc import Callable


def _dynamo_config():
    import torch._dynamo

    return torch._dynamo.config


def _limit_name(config) -> str:
    # torch 2.7 renamed cache_size_limit to recompile_limit (the old name stays an alias);
    # Intel's Gaudi containers may ship an older torch
    return "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"


def raise_recompile_limit(at_least: int) -> Callable[[], None]:
    """Let dynamo keep ``at_least`` graphs per function (never lowers the limit); returns
    the function that puts the previous limit back."""
    config = _dynamo_config()
    name = _limit_name(config)
    before = getattr(config, name)
    # torch._dynamo.config is torch's documented settings module (torch.compile's
    # troubleshooting guide sets recompile_limit this way); restored by the returned function
    setattr(config, name, max(before, int(at_least)))
    return lambda: setattr(config, name, before)


def dynamo_settings(**values) -> Callable[[], None]:
    """Set ``torch._dynamo.config`` fields (``cache_size_limit`` means the recompile limit
    under either name); returns the function that puts every one back."""
    config = _dynamo_config()
    before = {}
    for key, value in values.items():
        name = _limit_name(config) if key == "cache_size_limit" else key
        if not hasattr(config, name):
            raise ValueError(f"torch._dynamo.config has no setting {key!r}")
        before[name] = getattr(config, name)
        setattr(config, name, value)

    def restore() -> None:
        for name, value in before.items():
            setattr(config, name, value)

    return restore


def reduced_precision_sdp_math(enabled: bool) -> Callable[[], None]:
    """``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(enabled)`` (SDPA's math
    kernel may reduce in bf16/fp16); returns the function that puts the previous value back."""
    import torch

    before = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(enabled)
    return lambda: torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(before)
