"""A run directory is data: nothing in it decides what code runs (docs/runs.md).

A run shared or downloaded may say ``"trust_remote_code": true`` in its spec.json and point at a
model directory whose config names a Python file (``auto_map``). Opening, listing, comparing,
loading, sampling, generating, the panel's runs endpoint and ``resume()`` must import none of
it; ``resume(trust_remote_code=True)``, the caller's own word, still trains such a model.
"""

from __future__ import annotations

import json

import pytest

import workbench as wb
from workbench.scaleout import worker
from workbench.scaleout.launchfiles import worker_args
from workbench.server.runs import RunTable
from workbench.training.engine import Run

SMALL = dict(max_steps=4, save_every=2, batch_size=4, max_length=32, live=False)

# A model whose class comes from a file in its directory; importing it leaves a marker.
CODE = """
import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import GPT2Config, GPT2LMHeadModel


class MarkedConfig(GPT2Config):
    model_type = "marked-gpt2"


class MarkedModel(GPT2LMHeadModel):
    config_class = MarkedConfig
"""
AUTO_MAP = {"AutoConfig": "marked.MarkedConfig", "AutoModelForCausalLM": "marked.MarkedModel"}


def _plant(directory, marker) -> None:
    """Make ``directory``'s model one that needs its own code (``marked.py``)."""
    (directory / "marked.py").write_text(CODE.format(marker=str(marker)))
    config = json.loads((directory / "config.json").read_text())
    config.update(model_type="marked-gpt2", auto_map=AUTO_MAP)
    (directory / "config.json").write_text(json.dumps(config))


@pytest.fixture
def planted(tmp_path):
    """(run, marker): a completed run of a local GPT-2 directory, then the directory, its
    checkpoints and its spec.json changed as a stranger's run would come."""
    src = tmp_path / "model_with_code"
    model, tok = wb.model("gpt2-tiny").build()
    model.save_pretrained(src)
    tok.save_pretrained(src)
    run = wb.train(wb.model("gpt2", size=str(src)), wb.dataset("docstrings-lm", limit=64),
                   run_dir=tmp_path / "runs", **SMALL)
    assert run.status == "completed" and run.step == 4
    marker = tmp_path / "code-ran"
    for directory in (src, *run.checkpoints):
        _plant(directory, marker)
    spec = json.loads((run.path / "spec.json").read_text())
    spec["model"]["trust_remote_code"] = True
    (run.path / "spec.json").write_text(json.dumps(spec))
    return Run.open(run.path), marker


def test_nothing_a_run_directory_says_runs_its_code_but_the_caller_can_let_it(planted, tmp_path):
    run, marker = planted
    files = ("spec.json", "summary.json", "events.jsonl")
    before = {f: (run.path / f).read_text() for f in files}

    with pytest.raises(ValueError, match=r"asks for trust_remote_code=True.*"
                                         r"resume\(trust_remote_code=True\)"):
        Run.open(run.path).resume(max_steps=6, live=False)
    assert {f: (run.path / f).read_text() for f in files} == before, "refused before any write"
    assert Run.open(run.path).status == "completed"

    assert wb.runs(tmp_path / "runs")["step"].tolist() == [4]
    assert wb.compare(run.path).table.loc["steps"].tolist() == [4]
    panel = RunTable(tmp_path)
    assert [r["status"] for r in panel.rows()] == ["completed"]
    assert panel.detail(panel.relative(run.path))["spec"]["model"]["trust_remote_code"] is True
    for use in (lambda r: r.model, lambda r: r.generate(["def add"]), lambda r: r.sample(1)):
        try:
            use(Run.open(run.path))
        except ValueError as e:  # refusing is fine (transformers: "contains custom code")
            assert "custom code" in str(e) or "run.generate" in str(e)
    assert not marker.exists(), "a run directory made this process import its code"

    resumed = Run.open(run.path).resume(max_steps=6, live=False, trust_remote_code=True)
    assert marker.exists(), "the caller's trust_remote_code=True let the model's code run"
    assert type(resumed.trainer.model).__name__ == "MarkedModel"
    assert resumed.status == "completed" and resumed.step == 6


def test_a_worker_runs_a_model_s_code_only_when_its_command_says_so(planted):
    run, marker = planted
    with pytest.raises(ValueError, match="start the workers with --trust-remote-code"):
        worker.main([str(run.path)])
    assert not marker.exists()
    assert worker_args(run.path)[-1] == str(run.path)
    assert worker_args(run.path, trust_remote_code=True)[-1] == "--trust-remote-code"

