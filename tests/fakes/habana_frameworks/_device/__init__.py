"""TEST DOUBLE's emulated ``hpu`` device: builds (once) and loads ``hpu_device.cpp``.

The extension registers the HPU device guard, allocator, copies and CPU fallback with torch's
dispatcher (see the comments in ``hpu_device.cpp``); ``load`` then gives the HPU its answer to
``aten::_fused_sdp_choice`` (``sdp_choice`` below). It is built with
``torch.utils.cpp_extension.load`` into ``FAKE_HPU_BUILD_DIR`` (default ``.fake_hpu_build``
at the repository root, ignored by git), keyed by the source's hash and torch's version, so
the suite compiles it once; a file lock serialises concurrent builds (pytest workers).
"""

import fcntl
import hashlib
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("hpu_device.cpp")
# the counts behind the bridge's metrics (op_counts.h is included by both)
COUNTS = [Path(__file__).with_name(n) for n in ("op_counts.cpp", "op_counts.h")]
_loaded = {}


def build_dir() -> Path:
    root = Path(__file__).resolve().parents[4]  # <root>/tests/fakes/habana_frameworks/_device
    default = root / ".fake_hpu_build"
    # the sources, torch's version and the Python ABI: what the built module depends on, so
    # that any interpreter with the same three loads one build (the rehearsal's, the classroom's)
    abi = f"{torch.__version__} {sysconfig.get_config_var('SOABI')}"
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in (SOURCE, *COUNTS))
                            + abi.encode()).hexdigest()[:12]
    return Path(os.environ.get("FAKE_HPU_BUILD_DIR") or default) / digest


def load():
    """The compiled extension module (built on first use, then loaded from the cache)."""
    if "ext" in _loaded:
        return _loaded["ext"]
    folder = build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others then load
        stale = folder / "lock"
        if stale.exists():
            # torch's own build lock (torch/utils/cpp_extension.py: FileBaton(build_directory
            # /'lock'), which a later build waits on for as long as the file exists, silently:
            # file_baton.py's wait). Every builder here holds the flock above first, and the
            # kernel releases a flock when its process dies: one found while holding it was
            # left by a build killed mid-way.
            stale.unlink()
            print(f"fake hpu: removed {stale}, left by an extension build that was killed",
                  file=sys.stderr)
        # a module that imports is whole (a link killed mid-way leaves one that does not)
        _loaded["ext"] = _built(folder / "fake_hpu_device.so") or _build(folder)
    _loaded["sdp_choice"] = register_sdp_choice()  # the Library must live as long as the kernel
    return _loaded["ext"]


def _build(folder: Path):
    from torch.utils.cpp_extension import load as load_extension

    return load_extension(name="fake_hpu_device", sources=[str(SOURCE), str(COUNTS[0])],
                          build_directory=str(folder), extra_cflags=["-O1"], verbose=False)


def _built(path: Path):
    """The module built earlier for this digest, imported as it is; None: build it. Not through
    torch's ``load``, which writes its ninja file afresh and recompiles when the torch it runs
    with lies elsewhere (the rehearsal's image, the classroom's copy of the interpreter), though
    the headers are the same release's: three builds of 80 CPU s on a new machine, not one."""
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("fake_hpu_device", path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:  # cut short: built again
        return None
    return module


# scaled_dot_product_attention's kernel choice, answered on the HPU without a fallback.
# - torch before PyTorch PR #149512 ("Added _fused_sdp_choice_stub dispatcher support for HPU
#   device", merged April 2025, by Intel's pralay-das) never asked an HPU: the choice stub had
#   no HPU entry, so SDPA on an HPU took the MATH backend (the PR's description says so).
#   Gaudi 1.22 ships torch 2.7, before the PR; 1.23 ships 2.9 and 1.24 2.10, after it
#   (shared/HPU_FACTS.md, docs.habana.ai support matrix): the 1.19 bridge was never asked.
# - Since that PR, torch registers `_fused_sdp_choice_meta` as the stub's HPU entry, and for an
#   HPU tensor it redispatches `aten::_fused_sdp_choice` to DispatchKey::HPU (pytorch
#   aten/src/ATen/native/transformers/attention.cpp: `REGISTER_HPU_DISPATCH(_fused_sdp_choice_stub,
#   &_fused_sdp_choice_meta)`, read in the fork cyyever/pytorch @ 0d18888): the PR's purpose is
#   that the HPU backend answers it "according to user choice".
# - The 1.19 op table (scripts/ops_list/ops_table.csv, generated against torch 2.2, before
#   anything asked) lists no HPU kernel for it. Without this kernel the double's boxed fallback
#   would run torch's CPU choice on host copies and count a CPU fallback that neither pairing
#   shows (an old one never asks; a new one is asked so that it answers).
# The double answers MATH, what a 1.19 bridge got de facto; what a newer bridge answers (its
# fused SDPA through OVERRIDEABLE, say) is not in public source: unverified here. MATH runs
# matmul, softmax and the like, ops the same table gives HPU kernels.
def sdp_choice(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False) -> int:
    """The HPU's SDPA backend: MATH (see above)."""
    return int(torch.nn.attention.SDPBackend.MATH)


def register_sdp_choice():
    """Register ``sdp_choice`` for ``aten::_fused_sdp_choice`` on the HPU dispatch key; the
    returned Library keeps the registration alive."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_fused_sdp_choice", sdp_choice, "HPU")
    return lib
