"""Gaudi Workbench: train Hugging Face models on Gaudi, GPU or CPU from a notebook.

``import workbench`` stays light: torch, transformers, datasets and the Habana bridge are
imported only when a function that needs them is called.
"""

from __future__ import annotations

import lazy_loader

from .backends.hpu import prepare_recipe_cache
from .backends.registry import DeviceInfo as DeviceInfo  # light: imports no torch
from .backends.registry import device as device
from .backends.registry import devices as devices
from .version import __version__ as __version__

# The Habana bridge reads PT_HPU_RECIPE_CACHE_CONFIG as it loads, which in eager mode
# `import torch` does: this line runs before a notebook that imports workbench first does
prepare_recipe_cache()
del prepare_recipe_cache

# The public names, listed once in __init__.pyi (what a type checker reads, so `wb.train(`
# completes its keywords), each served from its module on first use, so that
# `import workbench` pulls in nothing heavy. A module never bears the name of a public
# function: importing `workbench.X` would set the package attribute X to the module.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)


def load_ipython_extension(ipython) -> None:
    """``%load_ext workbench``: registers the ``%wb`` line magic."""
    from .commands.magics import load_ipython_extension as load

    load(ipython)
