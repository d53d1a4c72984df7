"""TEST DOUBLE of habana_frameworks.torch.core: counts mark_step calls."""

MARK_STEPS = [0]


def mark_step() -> None:
    MARK_STEPS[0] += 1
