"""A run directory is data: nothing in it decides what code runs (docs/runs.md).

A run shared or downloaded may say ``"trust_remote_code": true`` in its spec.json and point at a
model directory whose config names a Python file (``auto_map``). Opening, listing, comparing,
loading, sampling, generating, the panel's runs endpoint and ``resume()`` must import none of
it; ``resume(trust_remote_code=True)``, the caller's own word, still trains such a model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

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


def _run_of_a_local_model(src, runs):
    """A completed 4-step run of a GPT-2 saved as a local directory ``src``."""
    model, tok = wb.model("gpt2-tiny").build()
    model.save_pretrained(src)
    tok.save_pretrained(src)
    run = wb.train(wb.model("gpt2", size=str(src)), wb.dataset("docstrings-lm", limit=64),
                   run_dir=runs, **SMALL)
    assert run.status == "completed" and run.step == 4
    return run


@pytest.fixture
def planted(tmp_path):
    """(run, marker): a completed run of a local GPT-2 directory, then the directory, its
    checkpoints and its spec.json changed as a stranger's run would come."""
    src = tmp_path / "model_with_code"
    run = _run_of_a_local_model(src, tmp_path / "runs")
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



# --------------------------------------------------------------------------- wb.plan
def _as_if_on_gaudi(run) -> None:
    """The run's summary says it completed on a Gaudi 2, so the planner learns from it."""
    summary = json.loads((run.path / "summary.json").read_text())
    summary["device"] = {"kind": "hpu", "available": True, "count": 1, "name": "HL-225",
                         "generation": "Gaudi2", "precision": "bf16"}
    summary["tokens_per_s"] = 1000.0
    (run.path / "summary.json").write_text(json.dumps(summary))


def _planned_from_runs(plan) -> list[str]:
    """The sources of the plan's figures that came from the user's runs."""
    return [v for r in plan.rows for v in r["sources"].values() if "your completed run" in str(v)]


def test_plan_reads_a_planted_run_as_data(planted, tmp_path, monkeypatch):
    """wb.plan learns from ./runs: a run whose spec asks for trust_remote_code, whose model
    directory, checkpoints and tokenizer name code (auto_map), or whose source is a relative
    path into the run, is read without importing any of it (the run is skipped)."""
    run, marker = planted
    for directory in run.checkpoints:
        tok = json.loads((directory / "tokenizer_config.json").read_text())
        tok["auto_map"] = {"AutoTokenizer": ["marked.MarkedTokenizer", None]}
        (directory / "tokenizer_config.json").write_text(json.dumps(tok))
    _as_if_on_gaudi(run)
    # a second planted run: its source a relative path into the run's own checkpoint
    twin = tmp_path / "runs" / "twin"
    import shutil

    shutil.copytree(run.path, twin)
    spec = json.loads((twin / "spec.json").read_text())
    spec["model"]["source"] = spec["model"]["tokenizer"] = "runs/twin/checkpoints/checkpoint-4"
    (twin / "spec.json").write_text(json.dumps(spec))
    monkeypatch.chdir(tmp_path)

    plan = wb.plan(wb.model("gpt2-tiny"), tokens=1e6, batch_size=4, seq_len=32,
                   devices=["Gaudi2"], runs=tmp_path / "runs")
    assert not marker.exists(), "wb.plan imported a run directory's code"
    assert _planned_from_runs(plan) == []

    # the control: the same run without the planted code is learned from (the path is read)
    clean = wb.train(wb.model("gpt2-tiny"), wb.dataset("docstrings-lm", limit=64),
                     run_dir=tmp_path / "runs", **SMALL)
    _as_if_on_gaudi(clean)
    plan = wb.plan(wb.model("gpt2-tiny"), tokens=1e6, batch_size=4, seq_len=32,
                   devices=["Gaudi2"], runs=tmp_path / "runs")
    assert _planned_from_runs(plan) and clean.name in _planned_from_runs(plan)[0]
    assert not marker.exists()


# --------------------------------------------------------------------------- resume
@pytest.fixture
def finished(tmp_path):
    """A completed 4-step run of the tiny GPT-2 (checkpoints at 2 and 4)."""
    run = wb.train(wb.model("gpt2-tiny"), wb.dataset("docstrings-lm", limit=64),
                   run_dir=tmp_path / "runs", **SMALL)
    assert run.status == "completed" and run.step == 4
    return Run.open(run.path)


def _files(run) -> dict[str, str]:
    return {f: (run.path / f).read_text() for f in ("spec.json", "summary.json", "events.jsonl")}


@pytest.fixture
def connections(monkeypatch):
    """Every address this process tries to connect to (none is reached: each try fails)."""
    import socket

    tried = []

    def connect(self, address):
        tried.append(address)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    return tried


def test_resume_takes_no_destination_or_credential_from_a_run(finished, tmp_path, connections):
    run = finished
    elsewhere = tmp_path / "elsewhere"
    spec = json.loads((run.path / "spec.json").read_text())
    spec["args"]["trainer_overrides"].update(
        push_to_hub=True, hub_model_id="stranger/uploads", hub_token="hf_planted",
        output_dir=str(elsewhere), weight_decay=0.01,
    )
    spec["args"]["report_to"] = "wandb"
    (run.path / "spec.json").write_text(json.dumps(spec))
    before = _files(run)

    with pytest.raises(ValueError, match=r"push_to_hub=True.*hub_model_id='stranger/uploads'.*"
                                         r"report_to='wandb'.*Say it again to keep it") as e:
        run.resume(max_steps=6, live=False)
    assert "hf_planted" not in str(e.value)
    assert _files(Run.open(run.path)) == before, "refused before anything is written"

    resumed = Run.open(run.path).resume(max_steps=6, live=False, push_to_hub=False,
                                        hub_model_id=None, report_to="none")
    assert resumed.status == "completed" and resumed.step == 6
    args = resumed.trainer.args
    assert (args.push_to_hub, args.hub_token, args.report_to) == (False, None, [])
    assert args.weight_decay == 0.01, "a training knob from the spec is kept"
    assert not elsewhere.exists(), "a resume wrote outside its run"
    assert [p.name for p in resumed.checkpoints] == ["checkpoint-4", "checkpoint-6"]
    assert Run.open(run.path).model is not None
    resumed_spec = json.loads((run.path / "spec.json").read_text())
    assert "output_dir" not in resumed_spec["args"]["trainer_overrides"]
    assert "hub_token" not in resumed_spec["args"]["trainer_overrides"]
    assert connections == [], "a resume reached for the network"


@pytest.mark.parametrize("field", ["output_dir", "hub_token"])
def test_outputs_land_in_the_run_and_no_token_is_written(finished, tmp_path, field):
    before = _files(finished)
    with pytest.raises(ValueError, match=rf"{field}= is not taken: "):
        finished.resume(max_steps=6, live=False, **{field: str(tmp_path / "x")})
    assert _files(Run.open(finished.path)) == before
    root = tmp_path / "fresh"
    with pytest.raises(ValueError, match=rf"{field}= is not taken: "):
        wb.train("gpt2-tiny", "docstrings-lm", run_dir=root, **SMALL, **{field: "x"})
    assert not root.exists() or not any(root.iterdir())


def test_a_resume_that_fails_before_a_step_leaves_the_run_as_it_was(tmp_path):
    src = tmp_path / "base"
    run = _run_of_a_local_model(src, tmp_path / "runs")
    before = _files(run)
    src.rename(tmp_path / "moved")

    with pytest.raises((FileNotFoundError, OSError)):
        Run.open(run.path).resume(max_steps=6, live=False)
    again = Run.open(run.path)
    assert (again.status, again.step) == ("completed", 4)
    assert wb.runs(tmp_path / "runs")[["status", "step"]].values.tolist() == [["completed", 4]]
    after = _files(again)
    assert after["summary.json"] == before["summary.json"]
    assert after["events.jsonl"] == before["events.jsonl"]
    failure = json.loads(after["spec.json"])["resumes"][-1]
    assert failure["max_steps"] == 6 and "base" in failure["failed"]
    assert json.loads(after["spec.json"])["args"] == json.loads(before["spec.json"])["args"]

    (tmp_path / "moved").rename(src)  # nothing was lost: moved back, it resumes
    resumed = Run.open(run.path).resume(max_steps=6, live=False)
    assert (resumed.status, resumed.step) == ("completed", 6)


def test_a_checkpoint_s_pickles_never_run(finished, tmp_path):
    marker = tmp_path / "pickle-ran"
    # protocol 0 by hand: builtins.exec("open(marker, 'w').write('ran')") when unpickled
    payload = (
        b"cbuiltins\nexec\n(V" + f"open({str(marker)!r}, 'w').write('ran')".encode() + b"\ntR."
    )
    ckpt = finished.last_checkpoint
    for name in ("rng_state.pth", "optimizer.pt", "scheduler.pt"):
        (ckpt / name).write_bytes(payload)
    before = _files(finished)
    with pytest.raises(Exception, match="(?i)weights_only|unpickl|unsupported"):
        Run.open(finished.path).resume(max_steps=6, live=False)
    assert not marker.exists(), "a checkpoint's pickle ran"
    after = Run.open(finished.path)
    assert (after.status, after.step) == ("completed", 4)
    assert _files(after)["summary.json"] == before["summary.json"]
    assert Run.open(finished.path).generate(["def add"], max_new_tokens=2)  # safetensors only
    assert not marker.exists()


# --------------------------------------------------------------------------- the spec's record
@pytest.mark.parametrize("change, message", ids=str, argvalues=[
    ({"args": ["batch_size", 8]}, r"args must be an object, got list"),
    ({"args": {"batch_size": "8"}}, r"args\.batch_size must be a whole number, got '8'"),
    ({"args": {"lr": "__import__('os')"}}, r"args\.lr=\"__import__\('os'\)\" is not a learning rate"),
    ({"args": {"trainer_overrides": "weight_decay=0.1"}}, r"args\.trainer_overrides must be an object"),
    ({"launch": {"devices": "2"}}, r"launch\.devices must be a whole number from 1, got '2'"),
    ({"launch": {"devices": 2, "env": {"PT_HPU_LAZY_MODE": 1}}}, r"launch\.env must map names to text"),
    ({"resumes": [{"from": 12}]}, r"resumes\[0\]\.from must be text, got int 12"),
    ({"model": "gpt2"}, r"model must be an object, got str"),
    ({"version": 99}, r"its version 99 is newer than this workbench's \(2\): upgrade gaudi-workbench"),
])
def test_a_spec_of_the_wrong_shape_is_refused_by_key(tmp_path, make_run, change, message):
    """A run directory is data: a spec.json whose values have the wrong type is refused by
    RunDir.spec with the file, the key and what it holds, before any reader acts on it."""
    path = make_run(tmp_path, "odd")
    spec = json.loads((path / "spec.json").read_text())
    (path / "spec.json").write_text(json.dumps({**spec, **change}))
    with pytest.raises(ValueError, match=rf"odd/spec\.json is not a run spec this workbench reads: {message}"):
        _ = wb.Run.open(path).spec
    row = RunTable(tmp_path).row(path)  # the panel lists it, saying why it cannot read it
    assert row["error"].startswith("unreadable run directory: ") and "spec.json" in row["error"]


def test_a_spec_older_code_wrote_opens_after_one_upgrade_step(tmp_path, make_run):
    """A spec.json without a version (written before it, or before an argument existed) reads
    with what the absence meant then: batches padded to their longest row, every logging step
    logged; the record it reads is written back with the version."""
    path = make_run(tmp_path, "old")
    spec = json.loads((path / "spec.json").read_text())
    del spec["args"]["padding"], spec["args"]["cache_latents"]
    assert "log_interval_s" not in spec["args"] and "version" not in spec
    (path / "spec.json").write_text(json.dumps({**spec, "resumes": [{"from": "checkpoint-4", "max_steps": 8}]}))
    read = wb.Run.open(path).spec
    assert (read.version, read.args.padding, read.args.log_interval_s, read.args.cache_latents) == (
        2, "longest", 0.0, False)
    assert read.resumes[0].origin == "checkpoint-4" and read.args.batch_size == 16
    written = read.to_dict()
    assert written["version"] == 2 and written["resumes"][0]["from"] == "checkpoint-4"
    assert type(read).read(written) == read, "the record round-trips through its file"


# --------------------------------------------------------------------------- every reader
PACKAGE = Path(__file__).resolve().parent.parent / "workbench"
# What reads a run directory, matched in the source; each module is listed with the public
# calls that reach it and the test above that plants against them (or why none needs one).
READS_RUNS = re.compile(
    r"RunDir\(|Run\.open\(|RunDir\.open\(|spec\.json\"|summary\.json\"|runs_root\(|"
    r"\.model_spec\(|events\.jsonl\""
)
READERS = {
    "rundir/run.py": "wb.runs, wb.compare, wb.Run.open, .model/.generate/.sample: "
    "test_nothing_a_run_directory_says_runs_its_code_but_the_caller_can_let_it",
    "training/engine.py": "run.resume(): the tests of resume above",
    "training/trainer.py": "resume's model, from RunDir.model_spec(the caller's trust): "
    "test_nothing_a_run_directory_says_runs_its_code_but_the_caller_can_let_it",
    "planning/yourruns.py": "wb.plan: test_plan_reads_a_planted_run_as_data",
    "server/runs.py": "the lab panel: test_nothing_a_run_directory_says_runs_its_code_but_the_"
    "caller_can_let_it",
    "scaleout/worker.py": "torchrun's workers: test_a_worker_runs_a_model_s_code_only_when_its_"
    "command_says_so",
    "commands/magics.py": "%wb runs / compare / stop: wb.runs, wb.compare and Run.open (above)",
    "diffusion/pipeline.py": "wb.model('sd', vae=RUN): the VAE's family and size from spec.json "
    "as text, its weights from safetensors (diffusers' from_config: no code)",
    "rundir/writer.py": "writes a run's files (the one writer); reads nothing to act on",
    "rundir/lock.py": "the run's lock file: a pid to show, never to signal",
    "training/interrupts.py": "names the run's path in a message",
    "training/attachment.py": "a rank of the user's own Trainer writing the end of a run whose "
    "rank 0 died: its own run (the path from rank 0, in this training), summary and events",
    "settings.py": "where runs go ($WORKBENCH_RUNS, ./runs): the caller's setting",
    "rundir/spec.py": "spec.json's record, read by RunDir.spec: test_a_spec_of_the_wrong_shape_is_"
    "refused_by_key",
}


@pytest.mark.policy
def test_every_reader_of_run_directories_is_listed():
    found = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if READS_RUNS.search(p.read_text())
    }
    new = sorted(found - set(READERS))
    assert not new, (
        f"{new} read run directories: a run directory is data (docs/runs.md). Build its model "
        f"with RunDir.model_spec(the caller's trust), plant a test against the public call in "
        f"this file, and list the module in READERS"
    )
    assert not set(READERS) - found, f"listed but no longer reading runs: {set(READERS) - found}"
    # one path from a run's files to a ModelSpec: RunDir.model_spec, the caller's trust
    rebuilt = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if re.search(r"ModelSpec\.from_dict\([^)]*spec(\[|\.model)", p.read_text())
    ]
    assert rebuilt == ["rundir/run.py"], f"{rebuilt} build a ModelSpec from a run's spec: use RunDir.model_spec"
