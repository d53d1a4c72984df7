"""TEST DOUBLE of habana_frameworks.autoload: the ``torch.backends`` entry point.

Source: HabanaAI/gaudi-pytorch-bridge python_packages/habana_frameworks/autoload/__init__.py
@ 5a56187 (1.19) and its newer copy @ ea38cef (ankurneog/gaudi-pytorch-bridge), and the entry point ``device_backend = habana_frameworks.autoload:__autoload`` in
python_packages/setup.py @ 5a56187. torch calls every ``torch.backends`` entry point at the end
of ``import torch``; the double registers the same one through
``tests/fakes/habana_frameworks_double-0.0.0.dist-info``, so a subprocess with tests/fakes on
PYTHONPATH autoloads the double on ``import torch`` exactly when the bridge would.
"""

import os

is_loaded = False  # set by habana_frameworks.torch when it is imported (either way)


def is_autoload_enabled() -> bool:
    # PT_HPU_AUTOLOAD decides when set; otherwise autoload is off in lazy mode, and the
    # lazy-mode test here reads the variable with the release's default: "1" on 1.19
    # (autoload/__init__.py @ 5a56187: unset means no autoload), "0" on current bridges
    # (@ ea38cef: unset means autoload, so `import torch` loads the bridge eager).
    from habana_frameworks._release import lazy_default

    flag = os.getenv("PT_HPU_AUTOLOAD", "-1")
    if flag in ("0", "1"):
        return flag == "1"
    return os.getenv("PT_HPU_LAZY_MODE", lazy_default()) != "1"


def __autoload():  # noqa: N807 (the bridge's entry point name)
    # Not the bridge's rule: the double's emulated device (a C++ extension) is loaded here in
    # every mode, because torch caches its HPU hooks the first time anything asks for the
    # accelerator; loaded later, the device would exist but torch.accelerator (and autograd
    # through it) would not see it. FAKE_HPU_DEVICE=0 leaves it out (tests/fakes/README.md).
    if os.getenv("FAKE_HPU_DEVICE", "1") != "0":
        from habana_frameworks import _device

        _device.load()
    if is_loaded or not is_autoload_enabled():
        return
    import habana_frameworks.torch  # noqa: F401
