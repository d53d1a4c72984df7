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

import habana_frameworks.torch._recipe_cache_config  # noqa: E402,F401 (read once, here)
import habana_frameworks.torch.activity_profiler  # noqa: E402,F401 (replaces torch.profiler's enum)
import habana_frameworks.torch.core  # noqa: E402,F401
import habana_frameworks.torch.distributed.hccl  # noqa: E402,F401
import habana_frameworks.torch.hpu as hpu  # noqa: E402,F401

__version__ = "0.0.0-fake"
