"""TEST DOUBLE: importing the real bridge registers ``torch.hpu``; so does this one."""

import torch as _torch

from . import hpu  # noqa: F401

__version__ = "0.0.0-fake"
_torch.hpu = hpu
