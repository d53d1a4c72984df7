"""The run's arguments as keywords a reader, an editor and a type checker can see.

``wb.train``, ``wb.launch``, ``wb.launch_command`` and ``wb.profile`` take them as
``**options: Unpack[RunOptions]`` (what a type checker reads: training/overrides.pyi, held to
``runargs.FIELDS`` by tests/test_overrides.py) and show them, through ``runargs.spelled_out``,
in the signature ``help()``, ``inspect`` and IPython's completion read. These tests hold that
signature to the record (names, order, defaults, types) and check that what a caller passes
arrives as it did before.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import workbench as wb
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
def test_every_run_argument_is_a_keyword_of_the_signature_with_the_records_default(name):
    func = getattr(wb, name)
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
        assert p.annotation == FIELDS[field].annotation, field
    tail = list(params.values())[-1]
    assert tail.kind is inspect.Parameter.VAR_KEYWORD and tail.name == "trainer_overrides"
    assert "batch_size" in (func.__doc__ or "") or "wb.train" in func.__doc__


@pytest.mark.parametrize("module, func", [
    ("workbench/training/engine.py", "train"),
    ("workbench/scaleout/launcher.py", "launch"),
    ("workbench/scaleout/launcher.py", "launch_command"),
    ("workbench/training/profiler.py", "profile"),
])
def test_the_source_hands_a_type_checker_the_typed_options(module, func):
    """What pyright and an editor read is the ``def``: ``**options: Unpack[RunOptions]``, and no
    run argument written out a second time beside it."""
    tree = ast.parse((ROOT / module).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    assert node.args.kwarg is not None and node.args.kwarg.arg == "options"
    assert ast.unparse(node.args.kwarg.annotation) == "Unpack[RunOptions]"
    assert not {a.arg for a in node.args.kwonlyargs} & set(FIELDS)


def test_profile_refuses_what_it_sets_itself(runs_in_tmp):
    for own in OWN["profile"]:
        with pytest.raises(ValueError, match=f"wb.profile sets {own}= itself"):
            wb.profile("bert-tiny", "docstrings-topic", live=False, **{own: 3})
    assert not runs_in_tmp.exists() or not any(runs_in_tmp.iterdir())


def test_an_alias_still_reaches_its_field_through_the_keywords(runs_in_tmp):
    """``learning_rate=`` (TrainingArguments' name for ``lr``) was accepted by ``wb.train``
    before the keywords were spelled out; the default ``lr=None`` must not collide with it."""
    run = wb.train("bert-tiny", "docstrings-topic", max_steps=1, learning_rate=3e-4,
                   live=False, save_every=1)
    assert run.spec.args.lr == 3e-4
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


def test_a_notebooks_completion_offers_the_run_arguments(ipython):
    """What a user sees typing ``wb.train(model, data, bat<Tab>`` in a notebook: IPython's
    completer (with jedi and without) reads the signature ``spelled_out`` gives."""
    from IPython.core.completer import provisionalcompleter

    shell = ipython
    jedi_before = shell.Completer.use_jedi
    shell.run_cell("import workbench as wb")
    for jedi in (True, False):
        shell.Completer.use_jedi = jedi
        for line, want in [("wb.train('bert-tiny', 'd', bat", "batch_size="),
                           ("wb.launch('bert-tiny', 'd', pad", "padding="),
                           ("wb.profile('bert-tiny', 'd', max_l", "max_length=")]:
            with provisionalcompleter():
                offered = [c.text for c in shell.Completer.completions(line, len(line))]
            assert want in offered, (jedi, line, offered)
    shell.Completer.use_jedi = jedi_before
