"""``**trainer_overrides`` is typed: a type checker flags a misspelt keyword of the doors.

``workbench/training/overrides.pyi`` lists the TrainingArguments fields the doors pass through
(``TrainerOverrides``); the first test holds it to the installed transformers, the second
runs pyright on a caller's code. (The run-time refusal, with the closest name, is
tests/test_inputs.py's.)
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import tomllib

import pytest

from workbench.runargs import ALIASES, FIELDS, REFUSED

from conftest import ROOT

pytestmark = pytest.mark.policy  # the source and the installed transformers: `make lint` runs these

STUB = ROOT / "workbench" / "training" / "overrides.pyi"
PYRIGHT = ROOT / "node_modules" / ".bin" / "pyright"


def test_the_stub_lists_every_training_argument_the_doors_pass_through_with_its_type():
    """Every TrainingArguments field, with transformers' own type, but the doors' keywords
    (``seed``: a keyword of ``wb.train`` itself) and the names every door refuses;
    the aliases (``learning_rate``) stay, as the doors take them."""
    import transformers

    namespace: dict = {}
    exec(compile(STUB.read_text(), str(STUB), "exec", dont_inherit=True), namespace)  # a stub is Python too
    stub = namespace["TrainerOverrides"]
    refused = set(REFUSED) | {"resume_from_checkpoint"}  # wb.train refuses it (training.engine)
    want = {f.name: f.type for f in dataclasses.fields(transformers.TrainingArguments)
            if f.name not in set(FIELDS) | refused}
    assert list(stub.__annotations__) == list(want), (
        f"overrides.pyi and transformers {transformers.__version__} differ: write "
        f"{sorted(want.keys() - stub.__annotations__.keys())} in, take "
        f"{sorted(stub.__annotations__.keys() - want.keys())} out")
    assert {k: v for k, v in stub.__annotations__.items() if v != want[k]} == {}, "types differ"
    assert stub.__required_keys__ == frozenset() and set(ALIASES) <= stub.__optional_keys__


def test_the_stubs_run_options_are_the_records_fields_with_their_types_in_order():
    """``RunOptions`` adds the run's own arguments to ``TrainerOverrides``: the names, order
    and types of ``runargs.RunArgs`` (what ``wb.train``'s ``**options`` takes)."""
    tree = ast.parse(STUB.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunOptions")
    assert [ast.unparse(b) for b in node.bases] == ["TrainerOverrides"]
    own = {n.target.id: ast.unparse(n.annotation) for n in node.body if isinstance(n, ast.AnnAssign)}
    assert own == {name: str(f.annotation) for name, f in FIELDS.items()}
    assert list(own) == list(FIELDS)


CALLER = """\
import workbench as wb
wb.train("bert-tiny", "docstrings-topic", bach_size=8)
wb.launch("bert-tiny", "docstrings-topic", devices=2, bach_size=8)
wb.launch_command("bert-tiny", "docstrings-topic", nodes=1, devices_per_node=2, bach_size=8)
wb.profile("bert-tiny", "docstrings-topic", bach_size=8)
wb.train("bert-tiny", "docstrings-topic", max_grad_norm="high")
wb.launch("bert-tiny", "docstrings-topic", devices=2, batch_size="8")
wb.train("bert-tiny", "docstrings-topic", batch_size=8, max_grad_norm=1.0, learning_rate=3e-4)
wb.launch("bert-tiny", "docstrings-topic", devices=2, batch_size=8, max_grad_norm=1.0)
wb.launch_command("bert-tiny", "docstrings-topic", nodes=1, devices_per_node=2, batch_size=8, warmup_steps=10, fp16=True)
wb.profile("bert-tiny", "docstrings-topic", batch_size=8, optim="adamw_torch")
"""


@pytest.mark.skipif(not PYRIGHT.exists(), reason="pyright is not installed: run `npm ci` "
                    "(package.json's devDependencies)")
def test_pyright_flags_a_misspelt_keyword_and_passes_real_training_arguments(tmp_path):
    """pyright as the project configures it (pyproject's [tool.pyright]: its venv and mode),
    on a caller's file that imports this checkout's workbench."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pyright"]
    config.update(include=["caller.py"], exclude=[], extraPaths=[str(ROOT)],
                  venvPath=str(ROOT / config["venvPath"]))
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    (tmp_path / "caller.py").write_text(CALLER)
    out = subprocess.run([str(PYRIGHT), "--outputjson"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    report = json.loads(out.stdout)
    errors = {}
    for d in report["generalDiagnostics"]:
        if d["severity"] == "error":
            errors.setdefault(d["range"]["start"]["line"] + 1, []).append(d["message"])
    assert report["summary"]["filesAnalyzed"] == 1, out.stdout
    assert {line: [("bach_size" in m) for m in ms] for line, ms in errors.items() if line <= 5} == {
        line: [True] for line in (2, 3, 4, 5)}, errors
    assert len(errors.get(6, [])) == 1 and 'parameter "max_grad_norm" of type "float"' in errors[6][0], (
        errors)
    assert len(errors.get(7, [])) == 1 and 'parameter "batch_size" of type "int"' in errors[7][0], (
        errors)  # a run argument is typed too (RunOptions)
    assert not [line for line in errors if line > 7], errors
