"""Notebook pickers over the catalog, the datasets and ``wb.train``, built from ipywidgets.

``pick_model`` shows a model's parameters and whether it fits (``plan_memory``);
``pick_dataset`` previews a dataset with its token lengths and padding waste
(``workbench.shapes``); ``train_form`` starts ``wb.train`` and prints the equivalent code.
This module is their public home; the code lives in ``pickers.py`` (the two pickers),
``form.py`` (the training form) and ``composite.py`` (what they share).
"""

from __future__ import annotations

from .composite import GREEN, RED
from .form import TrainForm, train_form
from .pickers import (
    BUCKET_KS,
    COLUMN_ROLES,
    HUB,
    HUB_DATA,
    LOCAL,
    STRATEGY_NAMES,
    TASK_TOKENIZER,
    DataPicker,
    ModelPicker,
    pick_dataset,
    pick_model,
)

__all__ = [
    "pick_model", "pick_dataset", "train_form", "ModelPicker", "DataPicker", "TrainForm",
    "HUB", "LOCAL", "HUB_DATA", "COLUMN_ROLES", "TASK_TOKENIZER", "STRATEGY_NAMES", "BUCKET_KS",
    "GREEN", "RED",
]
