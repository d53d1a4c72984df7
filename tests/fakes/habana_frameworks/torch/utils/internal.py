"""TEST DOUBLE of habana_frameworks.torch.utils.internal: the execution mode.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/utils/internal.py @ 5a56187
(1.19) and @ ea38cef (a newer copy, ankurneog/gaudi-pytorch-bridge).
"""

import logging
import os

logger = logging.getLogger(__name__)


def is_lazy() -> bool:
    # Read once, on the first call, anything but "0" meaning lazy; then cached for the life
    # of the process: changing PT_HPU_LAZY_MODE afterwards changes nothing. Unset means lazy
    # on 1.19 (utils/internal.py @ 5a56187, default "1") and eager on current bridges
    # (the same file @ ea38cef, default "0").
    from habana_frameworks._release import lazy_default

    if is_lazy._is_lazy is None:
        is_lazy._is_lazy = os.getenv("PT_HPU_LAZY_MODE", lazy_default()) != "0"
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
