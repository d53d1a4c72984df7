"""Bad input stopped at the door: one clear error (argument, value, fix) before a run
directory exists; and a run's output holds only what the user asked for."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import nbformat
import pytest

import workbench as wb
from workbench.commands import cli
from workbench.rundir import run as runs
from workbench.training.engine import prepare

from conftest import ROOT

pytestmark = pytest.mark.usefixtures("runs_in_tmp")


def _no_run_dir(tmp_path: Path) -> None:
    made = list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else []
    assert made == [], f"a refused run left a run directory behind: {made}"


def _refused(tmp_path, error, match, model="gpt2-tiny", data="docstrings-lm", **kw):
    """wb.train(...) raises ``error`` matching ``match`` and leaves no run directory."""
    kw.setdefault("max_steps", 2)
    with pytest.raises(error, match=match):
        wb.train(model, data, live=False, **kw)
    _no_run_dir(tmp_path)


def _csv(path: Path, labels: list[str]) -> Path:
    path.write_text("text,label\n" + "".join(f"row {i} says {lab or 'nothing'},{lab}\n"
                                             for i, lab in enumerate(labels)))
    return path


# ---------------------------------------------------------------- data files
def test_empty_and_header_only_csv_name_the_file(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"dataset file '.*empty\.csv' is empty \(0 bytes\)"):
        wb.dataset(str(empty))
    header = tmp_path / "header.csv"
    header.write_text("text,label\n")
    with pytest.raises(ValueError, match=r"'.*header\.csv' has column names \(text, label\) but no rows"):
        wb.dataset(str(header))
    with pytest.raises(ValueError, match=r"'.*header\.csv' has column names \(text, label\) but no rows"):
        wb.dataset(str(header), text="text", label="label")  # its columns are read there too
    rows = tmp_path / "rows.csv"  # a file emptied after it was described: training refuses it
    rows.write_text("text,label\nhello,0\nbye,1\n")
    spec = wb.dataset(str(rows), text="text", label="label")
    rows.write_text("text,label\n")
    _refused(tmp_path, ValueError, "has column names .* but no rows", model="bert-tiny", data=spec)


@pytest.mark.slow
def test_blank_and_nan_labels_are_dropped_with_a_count_and_the_run_trains(tmp_path):
    labels = ["" if i % 10 == 0 else "NaN" if i % 10 == 5 else ("a" if i % 2 else "b") for i in range(80)]
    spec = wb.dataset(str(_csv(tmp_path / "blanks.csv", labels)), text="text", label="label")
    with pytest.warns(UserWarning, match=r"dropped 16 of 80 rows of 'blanks' whose 'label' is blank or NaN"):
        dd = spec.load()
    assert dd["train"].num_rows + dd["eval"].num_rows == 64
    assert dd["train"].features["label"].names == ["a", "b"]
    with pytest.warns(UserWarning, match="dropped 16 of 80 rows"):
        run = wb.train("bert-tiny", spec, max_steps=3, batch_size=8, max_length=32, live=False)
    assert run.status == "completed", run.summary.get("error")


def test_all_labels_blank_is_refused(tmp_path):
    spec = wb.dataset(str(_csv(tmp_path / "nolabels.csv", [""] * 20)), text="text", label="label")
    with pytest.raises(ValueError, match=r"every row of 'nolabels' has a blank 'label'"):
        spec.load()


def test_label_only_in_eval_split_is_named(tmp_path):
    import datasets

    train = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(20)], "label": ["a", "b"] * 10})
    evals = datasets.Dataset.from_dict({"text": ["e1", "e2", "e3"], "label": ["a", "c", "c"]})
    datasets.DatasetDict({"train": train, "validation": evals}).save_to_disk(str(tmp_path / "saved"))
    spec = wb.dataset(str(tmp_path / "saved"), text="text", label="label")
    with pytest.raises(ValueError, match=r"label 'c' \(2 rows\) is in the eval split of 'saved' but never in train"):
        spec.load()
    _refused(tmp_path, ValueError, "never in train", model="bert-tiny", data=spec)


def test_an_unlabelled_test_split_is_replaced_by_a_split_of_train(tmp_path):
    import datasets

    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["a", "b"])})
    train = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(40)], "label": [0, 1] * 20}, features=features)
    hidden = datasets.Dataset.from_dict({"text": ["x", "y", "z"], "label": [-1] * 3}, features=features)
    datasets.DatasetDict({"train": train, "test": hidden}).save_to_disk(str(tmp_path / "hub-like"))
    spec = wb.dataset(str(tmp_path / "hub-like"), text="text", label="label")
    with pytest.warns(UserWarning, match=r"dropped 3 of 43 rows of 'hub-like' whose 'label' is blank"):
        dd = spec.load()
    assert (dd["train"].num_rows, dd["eval"].num_rows) == (36, 4) and set(dd["eval"]["label"]) == {0, 1}


def test_a_class_with_one_row_is_named(tmp_path):
    spec = wb.dataset(str(_csv(tmp_path / "rare.csv", ["a", "b"] * 20 + ["c"])), text="text", label="label")
    with pytest.raises(ValueError, match=r"class 'c' has 1 row in 'rare'.*at least 2"):
        spec.load()


def test_a_single_class_is_refused_not_trained_to_accuracy_one(tmp_path):
    spec = wb.dataset(str(_csv(tmp_path / "one.csv", ["spam"] * 20)), text="text", label="label")
    with pytest.raises(ValueError, match=r"every row of 'one' has the same label 'spam' in 'label' "
                                         r"\(20 rows\): classification needs at least two classes.*"
                                         r"Add rows of another class; a number to predict .* is regression"):
        spec.load()
    _refused(tmp_path, ValueError, "at least two classes", model="bert-tiny", data=spec)
    from workbench.data.checks import check_classes

    with pytest.raises(ValueError, match=r"\(the 3 rows limit=3 keeps\).*another class, or a larger limit"):
        check_classes({"a": 3}, "label", "sorted", limit=3)  # a limit that kept one class says so


def test_an_all_blank_text_column_is_named_blank_not_numbers(tmp_path):
    path = tmp_path / "quiet.csv"
    path.write_text("message,label\n" + "".join(f",{'ab'[i % 2]}\n" for i in range(20)))
    spec = wb.dataset(str(path), text="message", label="label")
    with pytest.raises(ValueError, match=r"every row of 'quiet' has a blank 'message': nothing to train on"):
        spec.load()
    _refused(tmp_path, ValueError, r"has a blank 'message'.*text='<column>'", model="bert-tiny", data=spec)


@pytest.mark.parametrize("limit", [0, -5, 1.5, True, "10"])
def test_limit_must_be_a_whole_number_of_rows(tmp_path, limit):
    with pytest.raises(ValueError, match=rf"^limit must be a whole number of rows, at least 1, got "
                                         rf"{re.escape(repr(limit))}: .*limit=None\) for all rows"):
        wb.dataset("docstrings-lm", limit=limit)
    _no_run_dir(tmp_path)


@pytest.mark.parametrize("seed", ["1", -1, 1.5, True])
def test_a_datasets_seed_is_checked_as_wb_trains_is(tmp_path, seed):
    """A str seed was kept, and training failed in numpy's shuffle ("SeedSequence expects int
    or sequence of ints for entropy") without naming seed."""
    with pytest.raises(ValueError, match=rf"^seed must be a whole number, 0 or more, got "
                                         rf"{re.escape(repr(seed))}$"):
        wb.dataset("docstrings-lm", seed=seed)
    _no_run_dir(tmp_path)
    assert wb.dataset("docstrings-lm", seed=3).seed == 3


def test_packed_text_too_short_for_one_block_is_refused(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text("text\nhello there and a short line of text\nanother short line\n")
    spec = wb.dataset(str(path), text="text")
    _refused(tmp_path, ValueError, r"^'two' makes no training block: padding='packed' joins its 1 training row "
             r"into \d+ tokens .* blocks of max_length=128.*Use more text, or pass max_length=\d+ or less",
             data=spec)


def test_more_classes_than_eval_rows_names_eval_fraction(tmp_path):
    spec = wb.dataset(str(_csv(tmp_path / "many.csv", [f"k{i % 8}" for i in range(40)])),
                      text="text", label="label", eval_fraction=0.1)
    with pytest.raises(ValueError, match=r"8 classes.*4 eval rows.*eval_fraction=0\.2"):
        spec.load()


def test_non_utf8_file_names_the_encoding_and_encoding_reads_it(tmp_path):
    path = tmp_path / "latin.csv"
    body = "text,label\n" + "".join(f"caf\u00e9 number {i},{'a' if i % 2 else 'b'}\n" for i in range(40))
    path.write_bytes(body.encode("latin-1"))
    with pytest.raises(ValueError, match=r"'.*latin\.csv' is not UTF-8 text \(byte 0xe9 at offset 14\).*encoding="):
        wb.dataset(str(path))
    spec = wb.dataset(str(path), encoding="latin-1")
    assert spec.encoding == "latin-1" and type(spec).from_dict(spec.to_dict()) == spec
    rows = spec.load()["train"]["text"]
    assert all(t.startswith("caf\u00e9 number") for t in rows)
    with pytest.raises(ValueError, match="encoding= is for local text files"):
        wb.dataset("docstrings-topic", encoding="latin-1")


def test_a_numeric_text_column_is_named_with_the_text_columns_there_are(tmp_path):
    path = tmp_path / "numbers.csv"
    path.write_text("code,note,label\n" + "".join(f"{i},row {i},{'ab'[i % 2]}\n" for i in range(40)))
    spec = wb.dataset(str(path), text="code", label="label")
    _refused(tmp_path, ValueError, r"column 'code' \(for text\) of 'numbers' holds int64 numbers, not "
             r"text.*pass text='<a text column>' \(text columns: note\)", model="bert-tiny", data=spec)


def test_a_label_column_of_mixed_types_is_named(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i}", "label": i % 3 if i % 2 else "abc"[i % 3]}) + "\n"
                            for i in range(40)))
    spec = wb.dataset(str(path), text="text", label="label")
    _refused(tmp_path, ValueError, r"label column 'label' of 'mixed' mixes value types.*all text or all "
             r"whole numbers", model="bert-tiny", data=spec)


def test_continuous_labels_are_not_classes(tmp_path):
    path = tmp_path / "scores.csv"
    path.write_text("text,label\n" + "".join(f"row {i},{i * 0.37:.2f}\n" for i in range(40)))
    spec = wb.dataset(str(path), text="text", label="label")
    _refused(tmp_path, ValueError, r"the labels in 'label' of 'scores' are continuous \(0\.37, 0\.74, 1\.11, "
             r"\.\.\.\), not classes.*Bin them into classes", model="bert-tiny", data=spec)
    path.write_text("text,label\n" + "".join(f"row {i},{float(i % 2)}\n" for i in range(40)))
    assert wb.dataset(str(path), text="text", label="label").num_labels == 2, "1.0 and 0.0 are classes"


def test_a_saved_two_class_classifier_trains_on_six_classes_with_a_new_head_and_says_so(tmp_path):
    model, tok = wb.model("bert-tiny", num_labels=2).build()
    assert model.config.num_labels == 2
    model.save_pretrained(tmp_path / "two")
    tok.save_pretrained(tmp_path / "two")
    spec = wb.model("bert", size=str(tmp_path / "two"), task="classification")
    data = wb.dataset("docstrings-topic", limit=120)
    with pytest.warns(UserWarning, match=r"'?.*two is a 2-class classifier and the data has 6 classes: its "
                                         r"classification head is replaced by a new 6-class one.*"
                                         r"ignore_mismatched_sizes"):
        run = wb.train(spec, data, max_steps=2, batch_size=8, max_length=32, live=False)
    assert run.status == "completed", run.summary.get("error")
    assert run.model.config.num_labels == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a head that fits says nothing
        assert spec.new_head(2) is None


# ---------------------------------------------------------------- arguments
def test_batch_size_larger_than_the_training_rows(tmp_path):
    spec = wb.dataset(str(_csv(tmp_path / "small.csv", ["a", "b"] * 20)), text="text", label="label")
    _refused(tmp_path, ValueError, r"batch_size=64 is more than the 36 training rows of 'small'.*batch_size=36",
             model="bert-tiny", data=spec, batch_size=64)


@pytest.mark.parametrize("name", ["lr", "learning_rate"])  # TrainingArguments' name is lr's alias: checked too
@pytest.mark.parametrize("lr", [0, -1e-3, float("nan")])
def test_learning_rate_must_be_positive(tmp_path, lr, name):
    _refused(tmp_path, ValueError, rf"^{name}={lr!r} .*must be a number above 0", **{name: lr})


@pytest.mark.parametrize("name", [1e-3, ["a"]])
def test_a_run_name_must_be_text(tmp_path, name):
    _refused(tmp_path, TypeError, rf"name must be text \(the run directory's name\), got {re.escape(repr(name))}: "
             r"pass name='my-run'", name=name)


@pytest.mark.parametrize("name", ["", "  "])
def test_a_blank_run_name_is_called_blank(tmp_path, name):
    _refused(tmp_path, ValueError, rf"^name={re.escape(repr(name))} is blank: a run directory needs a name\. "
             r"Pass name='my-run', or leave it out for <model>-<data>$", name=name)


@pytest.mark.parametrize("door", ["train", "launch", "launch_command", "profile"])
def test_a_misspelt_argument_is_refused_with_the_name_meant(tmp_path, door):
    """Not passed through to TrainingArguments (a failed run, 12 s later): every door checks
    the names first, suggesting from the run's own arguments and TrainingArguments'."""
    call = {"train": lambda **kw: wb.train("gpt2-tiny", "docstrings-lm", live=False, **kw),
            "launch": lambda **kw: wb.launch("gpt2-tiny", "docstrings-lm", devices=2, live=False, **kw),
            "launch_command": lambda **kw: wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=1,
                                                             devices_per_node=2, hosts=["node-0"], **kw),
            "profile": lambda **kw: wb.profile("gpt2-tiny", "docstrings-lm", steps=1, warmup=1, live=False, **kw),
            }[door]
    with pytest.raises(ValueError, match=r"^unknown argument bach_size=8 \(did you mean batch_size=8\?\): a run "
                                         r"takes wb\.train's arguments .* and transformers\.TrainingArguments "
                                         r"fields\. Fix the spelling, or leave it out$"):
        call(bach_size=8)
    with pytest.raises(ValueError, match=r"^unknown arguments colour='red', learning_rat=0\.1 \(did you mean "
                                         r"learning_rate=0\.1\?\), warmup_step=3 \(did you mean warmup_steps=3\?\)"):
        call(warmup_step=3, learning_rat=0.1, colour="red")
    _no_run_dir(tmp_path)


@pytest.mark.parametrize("lora, match", ids=str, argvalues=[
    ({"r": 0}, r"^lora's r must be a whole number, at least 1 \(the adapters' rank\), got 0: pass e\.g\. "
               r"lora=\{'r': 8\}"),
    ({"r": 2.5}, r"^lora's r must be a whole number, at least 1 .*got 2\.5"),
    ({"alpha": -1}, r"^lora's alpha must be a number above 0 .*got -1: pass e\.g\. lora=\{'r': 8, 'alpha': 16\}"),
    ({"alpha": True}, r"^lora's alpha must be a number above 0 .*got True"),
    ({"dropout": 1.0}, r"^lora's dropout must be a fraction from 0 up to \(not including\) 1, got 1\.0"),
    ({"dropout": float("nan")}, r"^lora's dropout must be a fraction .*got nan"),
    ({"lora_alpha": 32, "rank": 4}, r"^unknown LoRA options 'lora_alpha' \(did you mean 'alpha'\?\), 'rank'; known: r, "
                                    r"alpha, dropout, target_modules, and peft\.LoraConfig's other fields"),
])
def test_lora_options_are_checked_where_the_model_spec_takes_them(tmp_path, lora, match):
    with pytest.raises(ValueError, match=match):
        wb.model("gpt2-tiny", lora=lora)
    _no_run_dir(tmp_path)
    assert wb.model("gpt2-tiny", lora={"r": 4, "alpha": 8.0, "dropout": 0, "bias": "none"}).lora["r"] == 4


def test_lora_target_modules_matching_no_layer_are_refused_before_a_run_is_written(tmp_path):
    """peft matches target_modules only against a model: wb.model tries them on the meta device,
    so the refusal comes before wb.train writes anything (it came after, from a failed run)."""
    with pytest.raises(ValueError, match=r"^lora: target_modules \['nope'\] match no layer of gpt2-tiny; "
                                         r"its linear layers: c_attn, c_fc, c_proj, lm_head"):
        wb.train(wb.model("gpt2-tiny", lora={"target_modules": ["nope"]}), "docstrings-lm", live=False)
    _no_run_dir(tmp_path)
    assert wb.model("bert-tiny", lora={"target_modules": ".*query"}).lora_trainable() > 0


def test_max_length_above_the_model_positions_is_refused(tmp_path):
    assert wb.model("gpt2-tiny").max_positions == 512 and wb.model("t5-tiny").max_positions is None
    _refused(tmp_path, ValueError, r"max_length=1024 is more than gpt2-tiny's 512 positions.*max_length=512",
             max_length=1024)
    _refused(tmp_path, ValueError, r"max_length must be at least 1, got 0", max_length=0)


def test_fp16_on_a_cpu_is_refused_and_unknown_precision_before_the_run_dir(tmp_path):
    _refused(tmp_path, ValueError, r"precision='fp16' on cpu.*would train in fp32.*precision='bf16'",
             precision="fp16", device="cpu")
    _refused(tmp_path, ValueError, "unknown precision 'fp8'", precision="fp8")


def test_model_directory_without_config_or_tokenizer(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"model directory '.*empty' is empty.*save_pretrained"):
        wb.model("bert", size=str(tmp_path / "empty"))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"0")
    with pytest.raises(FileNotFoundError, match=r"'.*weights' has no config\.json \(it holds: model\.safetensors\)"):
        wb.model("bert", size=str(tmp_path / "weights"))
    model, _ = wb.model("gpt2").build()
    model.save_pretrained(tmp_path / "notok")
    spec = wb.model("gpt2", size=str(tmp_path / "notok"))
    with pytest.raises(FileNotFoundError, match=r"no tokenizer files in '.*notok'.*tokenizer="):
        spec.build()


def test_run_name_longer_than_the_filesystem_allows_is_shortened(tmp_path):
    long_a, long_b = "\u00e9" * 200 + "-a", "\u00e9" * 200 + "-b"
    with pytest.warns(UserWarning, match=r"run name of 202 characters \(402 bytes\) .* shortened"):
        a = runs.new_run_dir(long_a, tmp_path / "r")
    with pytest.warns(UserWarning, match="shortened"):
        b = runs.new_run_dir(long_b, tmp_path / "r")
    assert a != b and a.is_dir() and b.is_dir()
    assert len(a.name.encode()) <= 255 and a.name.split("-", 2)[2].startswith("\u00e9\u00e9")
    with pytest.warns(UserWarning, match="shortened"):
        run = prepare("gpt2-tiny", "docstrings-lm", max_steps=2, name="x" * 300)
    assert (run.path / "spec.json").exists()


@pytest.mark.parametrize("where", ["proc", "under_a_file", "read_only", "env"])
def test_an_unusable_run_dir_is_named_before_anything_is_written(tmp_path, small_disk, monkeypatch, where):
    """/proc, a path under a file, a read-only filesystem (root ignores permission bits: a
    read-only mount), or $WORKBENCH_RUNS under a file: one error naming the argument, the path
    and why, before the data is read or anything is written."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not a directory\n")
    named, why = "run_dir", f"{re.escape(str(notes))} is a file, not a directory"
    if where == "proc":
        run_dir, why = "/proc/x", "cannot create a directory in /proc: No such file or directory"
    elif where == "under_a_file":
        run_dir = notes / "runs"
    elif where == "read_only":
        run_dir, why = small_disk(1, ",ro").path / "runs", r"cannot create a directory in .*: Read-only file system"
    else:
        run_dir, named = None, "WORKBENCH_RUNS"
        monkeypatch.setenv("WORKBENCH_RUNS", str(notes / "runs"))
    shown = re.escape(repr(str(run_dir if run_dir is not None else notes / "runs")))
    read = []
    monkeypatch.setattr(wb.DataSpec, "load", lambda self: read.append(self) or pytest.fail("the data was read"))
    with pytest.raises(ValueError, match=rf"^{named}={shown} cannot hold run directories: {why}\. Pass run_dir="):
        wb.train("gpt2-tiny", "docstrings-lm", max_steps=2, run_dir=run_dir, live=False)
    assert not read and notes.read_text() == "not a directory\n"
    _no_run_dir(tmp_path)


@pytest.mark.parametrize("devices, fix", [("2", "devices=2"), (None, "a count such as devices=2"),
                                          (2.5, "a count such as devices=2"), (2.0, "devices=2"),
                                          (True, "a count such as devices=2"), (0, "a count such as devices=2")])
def test_launch_devices_must_be_a_whole_number(tmp_path, devices, fix):
    with pytest.raises(ValueError, match=rf"^devices must be a whole number of devices \(one worker process each\), "
                                         rf"at least 1; got {re.escape(repr(devices))}: pass {fix}$"):
        wb.launch("gpt2-tiny", "docstrings-lm", devices=devices, max_steps=2, live=False)
    _no_run_dir(tmp_path)


@pytest.mark.parametrize("kwargs, match", [
    (dict(nodes=True), r"^nodes must be a whole number of machines, at least 1; got True: pass a count such as nodes=2"),
    (dict(devices_per_node="8"), r"^devices_per_node must be a whole number of worker processes per machine, at "
                                 r"least 1; got '8': pass devices_per_node=8$"),
    (dict(devices_per_node=1.5), r"^devices_per_node must be a whole number .*got 1\.5"),
])
def test_launch_command_counts_must_be_whole_numbers(tmp_path, kwargs, match):
    args = {"nodes": 1, "devices_per_node": 2, "hosts": ["node-0"], **kwargs}
    with pytest.raises(ValueError, match=match):
        wb.launch_command("gpt2-tiny", "docstrings-lm", max_steps=2, **args)
    _no_run_dir(tmp_path)


def test_wb_plan_refuses_a_runs_path_that_is_not_a_directory(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not runs\n")
    plan = dict(tokens=1e9, batch_size=8, seq_len=512, devices=["H100"])
    for where, why in ((tmp_path / "nowhere", "does not exist"), (notes, "is a file, not a directory")):
        with pytest.raises(ValueError, match=rf"^runs={re.escape(repr(str(where)))} {why}, so no runs could be read: "
                                             r"pass runs= the directory your run directories are in"):
            wb.plan("gpt2-small", runs=where, **plan)
    assert not (tmp_path / "runs").exists(), "the default ./runs ($WORKBENCH_RUNS) is missing here"
    assert wb.plan("gpt2-small", **plan).row("H100 SXM")["mfu_from"] != "your runs", "a missing default is no runs"
    assert wb.plan("gpt2-small", runs=os.devnull, **plan).rows
    _no_run_dir(tmp_path)


# ---------------------------------------------------------------- gaudi_config.json
def _gaudi_config(tmp_path: Path, text: str) -> Path:
    (tmp_path / "gc").mkdir(exist_ok=True)
    (tmp_path / "gc" / "gaudi_config.json").write_text(text)
    return tmp_path / "gc" / "gaudi_config.json"


def _config_refused(tmp_path: Path, match: str) -> None:
    """GaudiTrainingArguments reading the file refuses it: no output_dir, no run directory."""
    from workbench.compat import optimum_habana as oh

    with pytest.raises(ValueError, match=match):
        oh.GaudiTrainingArguments(output_dir=str(tmp_path / "out"), use_habana=True,
                                  gaudi_config_name=str(tmp_path / "gc"))
    assert not (tmp_path / "out").exists()
    _no_run_dir(tmp_path)


@pytest.mark.parametrize("text, match", [
    ('{"use_fused_adam": "false"}', r'"use_fused_adam" is "false", not true or false: write "use_fused_adam": false '
                                    r"\(JSON's true/false, without quotes\)$"),
    ('{"use_torch_autocast": 1}', r'"use_torch_autocast" is 1, not true or false: write "use_torch_autocast": true'),
    ('{"autocast_bf16_ops": "add,mul", "autocast_fp32_ops": ["nll_loss"]}',
     r'"autocast_bf16_ops" is "add,mul", not a list of op names: write a JSON list, "autocast_bf16_ops": \["add", "mul"\]$'),
    ('{"autocast_fp32_ops": ["embedding", 3]}', r'"autocast_fp32_ops" is \["embedding", 3\], not a list of op names'),
])
def test_a_gaudi_config_of_the_wrong_types_is_refused_naming_the_file_and_key(tmp_path, text, match):
    path = _gaudi_config(tmp_path, text)
    _config_refused(tmp_path, rf"^{re.escape(repr(str(path)))}: {match}")


@pytest.mark.parametrize("text, match", [
    ("", r"is empty: a gaudi_config\.json is a JSON object of GaudiConfig fields"),
    ('{"use_fused_adam": tr', r"is not valid JSON \(Expecting value at line 1, column 20; cut short\?\): write it "
                              r"again as a JSON object of GaudiConfig fields"),
    ('["use_fused_adam"]', r"holds a JSON list, not an object: a gaudi_config\.json is a JSON object"),
])
def test_a_broken_gaudi_config_names_the_file_and_what_is_wrong(tmp_path, text, match):
    path = _gaudi_config(tmp_path, text)
    _config_refused(tmp_path, rf"^{re.escape(repr(str(path)))} {match}")


# ---------------------------------------------------------------- workbench run -p
def _notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('MAX_STEPS = 20\nMODEL, SIZE = "gpt2", "tiny"\nLR = 1e-3\nLIVE = False')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("steps = list(range(MAX_STEPS))")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_workbench_run_checks_parameters_against_the_parameters_cell(tmp_path, capsys):
    src = _notebook(tmp_path / "nb.ipynb")
    assert cli.main(["run", str(src), "-p", "MAX_STEPS", "abc", "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "-p MAX_STEPS: 'abc' is not an int (nb.ipynb's parameters cell has MAX_STEPS = 20)" in err
    assert not (tmp_path / "out").exists(), "nothing ran"
    assert cli.main(["run", str(src), "-p", "MAX_STEP", "5"]) == 2
    assert "unknown parameter 'MAX_STEP'; nb.ipynb's parameters: MAX_STEPS, MODEL, SIZE, LR, LIVE" in capsys.readouterr().err
    checked = cli.checked_parameters(src, {"LR": "1", "SIZE": "123", "LIVE": "true", "MAX_STEPS": "7"})
    assert checked == {"LR": 1, "SIZE": "123", "LIVE": True, "MAX_STEPS": 7}
    with pytest.raises(ValueError, match=r"-p LIVE: 2 is not a bool"):
        cli.checked_parameters(src, {"LIVE": "2"})
    with pytest.raises(ValueError, match=r"-p MAX_STEPS: 2\.5 is not an int"):
        cli.checked_parameters(src, {"MAX_STEPS": "2.5"})


# ---------------------------------------------------------------- noise
@pytest.mark.slow
def test_a_run_prints_nothing_the_user_did_not_ask_for(tmp_path):
    """In a fresh process (DeepSpeed's warning comes once per process, at its import)."""
    data = _csv(tmp_path / "noise.csv", ["a", "b"] * 40)
    script = textwrap.dedent(f"""
        import workbench as wb
        spec = wb.dataset({str(data)!r}, text="text", label="label")
        run = wb.train("bert-tiny", spec, epochs=1, batch_size=8, max_length=32, save_every=3, live=False)
        gpt = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), max_steps=2, batch_size=4,
                       max_length=32, save_every=1, live=False)
        print("STATUS", run.status, gpt.status, len(run.checkpoints), len(gpt.checkpoints))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_RUNS": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "STATUS completed completed 2 2" in out, out
    for noise in ("Setting accelerator to CPU", "ds_accelerator", "Writing model shards",
                  "loss_type=None", "Generating train split", "examples/s]", "it/s]"):
        assert noise not in out, f"{noise!r} reached the user:\n{out}"
    assert out.strip() == "STATUS completed completed 2 2", out


@pytest.mark.parametrize("call", ["train", "launch", "attach"])
@pytest.mark.parametrize("live", ["sometimes", 1, None])
def test_a_live_no_display_reads_is_refused_before_anything_is_written(tmp_path, call, live):
    """live= takes 'auto', True, False or a callable: one check for every public call (it
    went unchecked through wb.train and wb.launch, into the front-end guess)."""
    import workbench as wb

    with pytest.raises(ValueError, match=r"live=.*pass 'auto', True, False or a callable"):
        if call == "train":
            wb.train("gpt2-tiny", "docstrings-lm", max_steps=2, live=live, run_dir=tmp_path / "runs")
        elif call == "launch":
            wb.launch("gpt2-tiny", "docstrings-lm", devices=2, max_steps=2, live=live,
                      run_dir=tmp_path / "runs")
        else:
            wb.callback(live=live)
    assert not (tmp_path / "runs").exists()
