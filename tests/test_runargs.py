"""A run's arguments are one record: every name, default and check is stated once in
``workbench.runargs.FIELDS``, and every door (wb.train, wb.launch_command,
wb.profile, the pickers, the form) reads it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import workbench as wb
from workbench import runargs
from workbench.runargs import FIELDS, RunArgs

pytestmark = pytest.mark.usefixtures("runs_in_tmp")


@pytest.fixture
def batch_of_3(monkeypatch):
    """The record's batch_size default changed to 3, for this test only (after the doors are
    imported: their help() signatures are drawn from the record once, at import)."""
    _ = wb.train, wb.launch, wb.profile, wb.pick_model, wb.train_form
    monkeypatch.setitem(FIELDS, "batch_size", dataclasses.replace(FIELDS["batch_size"], default=3))
    return 3


@pytest.mark.slow
def test_a_default_changed_in_the_record_is_the_default_of_every_door(batch_of_3):
    run = wb.train("bert-tiny", "docstrings-topic", max_steps=1, live=False)
    assert run.spec.args.batch_size == batch_of_3
    cmd = wb.launch_command("bert-tiny", "docstrings-topic", nodes=1, devices_per_node=2,
                            hosts=["node-0"], max_steps=1)
    assert wb.Run.open(cmd.run_dir).spec.args.batch_size == batch_of_3
    prof = wb.profile("bert-tiny", "docstrings-topic", steps=1, warmup=1, live=False)
    assert prof.run.spec.args.batch_size == batch_of_3
    assert wb.pick_model().batch_size.value == batch_of_3
    assert wb.pick_dataset().batch_size.value == batch_of_3
    form = wb.train_form()
    assert form.batch_size.value == batch_of_3
    assert form.call()[2]["batch_size"] == batch_of_3


def test_help_shows_every_run_argument_with_the_records_default():
    for door in (wb.train, wb.launch, wb.launch_command, wb.profile):
        params = inspect.signature(door).parameters
        for name, field in FIELDS.items():
            if door is wb.profile and name in ("max_steps", "eval_every"):
                continue  # the profile sets these itself (warmup + steps, no evaluation)
            assert params[name].default == field.default, (door.__name__, name)
        assert params["trainer_overrides"].kind is inspect.Parameter.VAR_KEYWORD


def test_the_record_round_trips_and_keeps_overrides_apart():
    args = RunArgs.from_options({"lr": 3e-4, "max_steps": 5, "weight_decay": 0.1})
    assert args.lr == 3e-4 and args.batch_size == FIELDS["batch_size"].default
    assert args.trainer_overrides == {"weight_decay": 0.1}
    assert RunArgs.from_dict(args.to_dict()) == args
    assert args.replace(max_steps=7).max_steps == 7 and args.max_steps == 5
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'lr'"):
        args.lr = 1.0  # type: ignore[misc]  # the assignment the record refuses


@pytest.mark.parametrize("options, message", [
    ({"learning_rate": -1e-3}, r"learning_rate=-0.001 is not a learning rate"),
    ({"lr": float("nan")}, r"lr=nan is not a learning rate"),
    ({"per_device_train_batch_size": 0}, r"per_device_train_batch_size must be at least 1"),
    ({"num_train_epochs": 0}, r"num_train_epochs must be a number of epochs above 0"),
    ({"lr": 1e-3, "learning_rate": 1e-4}, r"learning_rate= and lr= name the same argument"),
    ({"padding": "dynamic"}, r"unknown padding 'dynamic'; known: auto, longest, max_length"),
    ({"mode": "graph"}, r"unknown mode 'graph'; known: eager, lazy, compile"),
    ({"cache_latents": "yes"}, r"cache_latents must be True or False"),
])
def test_every_alias_is_checked_as_its_field(options, message, tmp_path):
    with pytest.raises((ValueError, TypeError), match=message):
        wb.train("bert-tiny", "docstrings-topic", run_dir=tmp_path / "r", live=False, **options)
    assert not (tmp_path / "r").exists(), "refused before anything is written"


def test_an_alias_becomes_its_field_in_the_spec():
    run = wb.train("bert-tiny", "docstrings-topic", max_steps=1, learning_rate=2e-3, live=False)
    assert run.spec.args.lr == 2e-3
    assert "learning_rate" not in run.spec.args.trainer_overrides


def test_the_padding_vocabulary_is_one():
    from workbench.shapes import buckets as shapes

    assert set(shapes.STRATEGIES) <= set(runargs.PADDINGS)
