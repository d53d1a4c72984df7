"""TEST DOUBLE's release profile: which Habana bridge release the double behaves as.

``FAKE_HPU_RELEASE`` (test hook, not bridge API): ``current`` (default) follows the 1.22-1.24
bridges, ``1.19`` the 1.19.0 release. Only the 1.19 source is published by Intel
(HabanaAI/gaudi-pytorch-bridge @ 5a56187); the newer rules come from a public copy of a newer
bridge (ankurneog/gaudi-pytorch-bridge @ ea38cef, "Copyright 2021-2025") and Intel's latest
Runtime Flags page (docs.habana.ai/en/latest/PyTorch/Reference/Runtime_Flags.html). Each rule
that differs says which in a comment where it is applied.
"""

import os

RELEASES = ("current", "1.19")


def release() -> str:
    value = os.environ.get("FAKE_HPU_RELEASE", "current")
    if value not in RELEASES:
        raise ValueError(f"FAKE_HPU_RELEASE={value!r}; known: {', '.join(RELEASES)}")
    return value


def current() -> bool:
    return release() == "current"


def lazy_default() -> str:
    """What an unset PT_HPU_LAZY_MODE means: "0" (eager) on current bridges, "1" on 1.19
    (utils/internal.py and autoload/__init__.py @ ea38cef default it to "0"; @ 5a56187 to "1";
    the latest Runtime Flags page lists PT_HPU_LAZY_MODE with default 0)."""
    return "0" if current() else "1"


def intel_torch() -> bool:
    """Whether this torch counts as Intel's build (``is_torch_fork``): its local version starts
    with ``git`` on 1.19 (torch/__init__.py:41 @ 5a56187), ``git`` or ``hpu`` on current
    bridges (the same file @ ea38cef). Intel's containers ship such a build; the CPU torch the
    tests run on is stock, so FAKE_HPU_INTEL_TORCH=1 (test hook) marks it as Intel's, as the
    container's would be. Not emulated: 1.19 reads ``Version(torch.__version__).local``, which
    is None for a torch without a local version, and then fails with ``AttributeError`` in
    either mode."""
    if os.environ.get("FAKE_HPU_INTEL_TORCH") == "1":
        return True
    import torch

    local = torch.__version__.partition("+")[2]
    return local.startswith(("git", "hpu") if current() else ("git",))
