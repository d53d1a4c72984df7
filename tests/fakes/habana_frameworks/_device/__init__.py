"""TEST DOUBLE's emulated ``hpu`` device: builds (once) and loads ``hpu_device.cpp``.

The extension registers the HPU device guard, allocator, copies and CPU fallback with torch's
dispatcher (see the comments in ``hpu_device.cpp``). It is built with
``torch.utils.cpp_extension.load`` into ``FAKE_HPU_BUILD_DIR`` (default ``.fake_hpu_build``
at the repository root, ignored by git), keyed by the source's hash and torch's version, so
the suite compiles it once; a file lock serialises concurrent builds (pytest workers).
"""

import fcntl
import hashlib
import os
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("hpu_device.cpp")
# the counts behind the bridge's metrics (op_counts.h is included by both)
COUNTS = [Path(__file__).with_name(n) for n in ("op_counts.cpp", "op_counts.h")]
_loaded = {}


def build_dir() -> Path:
    root = Path(__file__).resolve().parents[4]  # <root>/tests/fakes/habana_frameworks/_device
    default = root / ".fake_hpu_build"
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in (SOURCE, *COUNTS))
                            + torch.__version__.encode()).hexdigest()[:12]
    return Path(os.environ.get("FAKE_HPU_BUILD_DIR") or default) / digest


def load():
    """The compiled extension module (built on first use, then loaded from the cache)."""
    if "ext" in _loaded:
        return _loaded["ext"]
    from torch.utils.cpp_extension import load as load_extension

    folder = build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others then load
        _loaded["ext"] = load_extension(name="fake_hpu_device", sources=[str(SOURCE), str(COUNTS[0])],
                                         build_directory=str(folder),
                                         extra_cflags=["-O1"], verbose=False)
    return _loaded["ext"]
