"""What a number JSON cannot hold becomes, decided in one place (``workbench.jsonvalues``)
and named by each writer: the run's files keep "nan" as text, the browser's JSON gets null,
``wb.record`` refuses it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.jsonvalues import plain


def test_each_rule_and_the_scalars_it_unwraps():
    value = {"loss": [float("nan"), 1.0], "x": (float("inf"),), "t": torch.tensor(2.5),
             "n": np.float32(0.5), "s": "ok"}
    assert plain(value, "text") == {"loss": ["nan", 1.0], "x": ["inf"], "t": 2.5, "n": 0.5, "s": "ok"}
    assert plain(value, "null") == {"loss": [None, 1.0], "x": [None], "t": 2.5, "n": 0.5, "s": "ok"}
    with pytest.raises(ValueError, match="cannot record nan: it is not a finite number"):
        plain(value, "refuse")
    with pytest.raises(ValueError, match="unknown nonfinite rule 'zero'; known: text, null, refuse"):
        plain(value, "zero")


def test_the_three_writers_follow_their_rules(tmp_path):
    from workbench.rundir.run import write_json
    from workbench.views.page import finite_json

    write_json(tmp_path / "summary.json", {"train_loss": float("nan"), "step": torch.tensor(3)})
    assert json.loads((tmp_path / "summary.json").read_text()) == {"train_loss": "nan", "step": 3}
    assert finite_json({"loss": [float("inf"), np.float64(1.5)]}) == {"loss": [None, 1.5]}
    with pytest.raises(ValueError, match="not a finite number"):
        wb.record("loss", float("nan"))
