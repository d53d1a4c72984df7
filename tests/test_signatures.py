"""The run's arguments as keywords a reader, an editor and a type checker can see.

``wb.train``, ``wb.launch``, ``wb.launch_command`` and ``wb.profile`` spell every field of
``runargs.FIELDS`` in their own ``def`` (no synthesised ``__signature__``): these tests hold
the names, their order, defaults and annotations to the record, so the record stays the one
home of each default, and check that what a caller passes arrives as it did before.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import workbench as wb
from workbench import runargs
from workbench.runargs import FIELDS

ROOT = Path(__file__).resolve().parents[1]

# what each function sets itself instead of taking from the caller
OWN = {
    "train": {},
    "launch": {},
    "launch_command": {},
    "profile": {"max_steps": None, "eval_every": None},  # warmup + steps, and no evaluation
}


@pytest.mark.parametrize("name", sorted(OWN))
def test_every_run_argument_is_a_keyword_of_the_function_with_the_records_default(name):
    func = getattr(wb, name)
    assert "__signature__" not in vars(func), f"wb.{name} synthesises its signature"
    params = inspect.signature(func).parameters
    run_params = [p for p in params if p in FIELDS]
    expected = [f for f in FIELDS if f not in OWN[name]]
    assert run_params == expected, f"wb.{name}'s run arguments differ from runargs.FIELDS"
    for field in expected:
        p = params[field]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, field
        want = FIELDS[field].default
        assert p.default == want and type(p.default) is type(want), (
            f"wb.{name}({field}=) defaults to {p.default!r}; runargs.FIELDS says {want!r}")
        assert p.annotation.replace("pathlib.", "") == _text(FIELDS[field].annotation), field
    tail = list(params.values())[-1]
    assert tail.kind is inspect.Parameter.VAR_KEYWORD and tail.name == "trainer_overrides"


def _text(annotation) -> str:
    """An annotation as the source spells it (``from __future__ import annotations``)."""
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace(
        "pathlib.", "").replace("typing.", "")


@pytest.mark.parametrize("module, func", [
    ("workbench/training/engine.py", "train"),
    ("workbench/scaleout/launcher.py", "launch"),
    ("workbench/scaleout/launcher.py", "launch_command"),
    ("workbench/training/profiler.py", "profile"),
])
def test_the_keywords_are_in_the_source_where_a_type_checker_reads_them(module, func):
    """What pyright and an editor read is the ``def`` itself: the keywords are written there."""
    tree = ast.parse((ROOT / module).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    written = [a.arg for a in node.args.kwonlyargs]
    assert [f for f in FIELDS if f not in OWN[func]] == [w for w in written if w in FIELDS]
    assert not any(isinstance(n, ast.Assign) and "__signature__" in ast.unparse(n)
                   for n in tree.body), f"{module} assigns a __signature__"


def test_given_keeps_what_the_caller_chose_and_drops_defaults():
    chosen = runargs.given(wb.train, {"lr": 1e-3, "batch_size": 16, "max_length": 64, "padding": "auto",
                            "model": "bert-tiny", "live": False, "seed": 0.0})
    # 16 and "auto" are the defaults; 0.0 is not the int default 0 (and is refused later)
    assert chosen == {"lr": 1e-3, "max_length": 64, "seed": 0.0}


def test_an_alias_still_reaches_its_field_through_the_keywords(runs_in_tmp):
    """``learning_rate=`` (TrainingArguments' name for ``lr``) was accepted by ``wb.train``
    before the keywords were spelled out; the default ``lr=None`` must not collide with it."""
    run = wb.train("bert-tiny", "docstrings-topic", max_steps=1, learning_rate=3e-4,
                   live=False, save_every=1)
    assert run.spec["args"]["lr"] == 3e-4
    with pytest.raises(ValueError, match="learning_rate= and lr= name the same argument"):
        wb.train("bert-tiny", "docstrings-topic", lr=1e-3, learning_rate=3e-4, live=False)


def test_a_bad_value_is_refused_by_name_before_anything_is_written(runs_in_tmp):
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        wb.train("bert-tiny", "docstrings-topic", batch_size=0, live=False)
    with pytest.raises(ValueError, match="unknown padding 'longer'"):
        wb.launch("bert-tiny", "docstrings-topic", padding="longer", live=False)
    assert not runs_in_tmp.exists() or not any(runs_in_tmp.iterdir())


def test_the_front_door_serves_exactly_the_names_of_its_stub_each_from_its_module():
    """The public names are listed once, in ``workbench/__init__.pyi``: type checkers read it,
    and ``lazy_loader.attach_stub`` serves it. ``wb.__all__`` is that list, every name is the
    object of the module the stub names, and an unknown name is an AttributeError."""
    import importlib

    import workbench

    tree = ast.parse((ROOT / "workbench" / "__init__.pyi").read_text())
    stub = {alias.asname or alias.name: node.module for node in tree.body
            if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert {"train", "Run", "launch", "device", "__version__"} <= set(stub)
    assert sorted(workbench.__all__) == sorted(stub)
    for name, module in stub.items():
        assert getattr(workbench, name) is getattr(importlib.import_module(f"workbench.{module}"), name), name
    assert all(alias.asname == alias.name for node in tree.body
               if isinstance(node, ast.ImportFrom) for alias in node.names), (
        "write `from .m import x as x`: the explicit re-export form")
    with pytest.raises(AttributeError):
        workbench.trian  # noqa: B018
