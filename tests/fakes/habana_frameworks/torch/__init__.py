"""TEST DOUBLE of habana_frameworks.torch: importing it loads the bridge in the mode
PT_HPU_LAZY_MODE chose, registers ``torch.hpu`` and "hccl", and chooses the card.

Source: gaudi-pytorch-bridge python_packages/habana_frameworks/torch/__init__.py @ 5a56187:
it marks the autoload entry point as done, reads the mode through ``is_lazy()`` (and loads
the lazy or the eager plugin library accordingly: the mode is fixed from here on), then
imports activity_profiler (line 53), core, distributed.hccl and hpu.
"""

import habana_frameworks.autoload

habana_frameworks.autoload.is_loaded = True

import torch  # noqa: E402,F401

from habana_frameworks.torch.utils.internal import is_lazy  # noqa: E402

is_lazy()  # the mode is read here, once: the plugin library it selects cannot change

# Both bridges load their lazy plugin only under Intel's own torch build: a stock torch is
# refused in lazy mode (torch/__init__.py:41-48 @ 5a56187, the 1.19 release: `assert
# is_torch_fork, f"Stock PyTorch version {run_time_ver} is not supported in Lazy mode."`, a
# fork being a local version starting "git"; the same assert @ ea38cef, where "hpu" counts too:
# _release.intel_torch).
from habana_frameworks import _release  # noqa: E402

if is_lazy() and not _release.intel_torch():
    raise AssertionError(f"Stock PyTorch version {torch.__version__} is not supported in Lazy mode.")

# Test hook (not bridge API): the variables the bridge reads as it loads (its flags are read
# through a cache, env_flags_impl.h @ 5a56187), as they were at this moment: the recipe cache
# and the autocast op lists (PT_HPU_AUTOCAST_*, read by the autocast registration,
# hpu_ops/backend/autocast_helpers.cpp @ 5a56187).
import os as _os  # noqa: E402

ENV_AT_LOAD = {name: _os.environ.get(name) for name in (
    "PT_HPU_RECIPE_CACHE_CONFIG", "PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST",
    "PT_HPU_AUTOCAST_FP32_OPS_LIST", "PT_HPU_LAZY_MODE")}

import habana_frameworks.torch._recipe_cache_config  # noqa: E402,F401 (read once, here)
import habana_frameworks.torch.activity_profiler  # noqa: E402,F401 (replaces torch.profiler's enum)
import habana_frameworks.torch.core  # noqa: E402,F401
import habana_frameworks.torch.distributed.hccl  # noqa: E402,F401
import habana_frameworks.torch.hpu as hpu  # noqa: E402,F401

__version__ = "0.0.0-fake"
