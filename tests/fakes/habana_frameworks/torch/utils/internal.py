"""TEST DOUBLE of habana_frameworks.torch.utils.internal: the execution mode.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/utils/internal.py @ 5a56187.
"""

import logging
import os

logger = logging.getLogger(__name__)


def is_lazy() -> bool:
    # Read once, on the first call, with default "1" (lazy) and anything but "0" meaning
    # lazy; then cached for the life of the process: changing PT_HPU_LAZY_MODE afterwards
    # changes nothing (utils/internal.py @ 5a56187).
    if is_lazy._is_lazy is None:
        is_lazy._is_lazy = os.getenv("PT_HPU_LAZY_MODE", "1") != "0"
    return is_lazy._is_lazy


is_lazy._is_lazy = None


def lazy_only(func):
    """Decorator: ``func`` in lazy mode, a no-op that warned once at decoration otherwise.

    The choice is made when the decorated module is imported (utils/internal.py @ 5a56187).
    """
    def lazy_wrapper(*args, **kwargs):
        func(*args, **kwargs)

    def non_lazy_wrapper(*args, **kwargs):
        pass

    if is_lazy():
        return lazy_wrapper
    logger.warning(f"Calling {func.__name__} function does not have any effect. It's lazy mode only functionality.")
    return non_lazy_wrapper
