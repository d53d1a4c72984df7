"""A user's own Trainer with one line added: wb.attach(trainer) / callbacks=[wb.callback()]."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.training.attachment import Attachment

from conftest import RecordingFrontend, wait_for

pytestmark = pytest.mark.usefixtures("runs_in_tmp")


def own_parts(rows: int = 96, max_length: int = 32):
    """What a researcher's notebook has: a model built from its config, a tokenized dataset
    (``datasets``, mapped with the tokenizer), a compute_metrics."""
    import transformers

    tok = wb.model("bert", size="tiny").load_tokenizer()
    splits = wb.dataset("docstrings-topic", limit=rows).load()
    labels = splits["train"].features["label"].names

    def tokenize(batch):
        return tok(batch["text"], truncation=True, max_length=max_length)

    data = splits.map(tokenize, batched=True, remove_columns=["text"])
    config = transformers.BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64,
                                     num_labels=len(labels), pad_token_id=tok.pad_token_id)
    transformers.set_seed(0)
    model = transformers.BertForSequenceClassification(config)

    def compute_metrics(pred):
        return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}

    return model, tok, data, compute_metrics


def own_trainer(tmp_path: Path, callbacks=None, max_steps: int = 12, **kw):
    import transformers

    model, tok, data, metrics = own_parts()
    args = transformers.TrainingArguments(**{
        "output_dir": str(tmp_path / "out"), "max_steps": max_steps,
        "per_device_train_batch_size": 8, "learning_rate": 1e-3, "eval_strategy": "steps",
        "eval_steps": 6, "save_strategy": "no", "report_to": "none",
        "disable_tqdm": True, "seed": 0, **kw})
    return transformers.Trainer(model=model, args=args, train_dataset=data["train"],
                                eval_dataset=data["eval"], processing_class=tok,
                                data_collator=transformers.DataCollatorWithPadding(tok),
                                compute_metrics=metrics, callbacks=callbacks)


@pytest.mark.slow
def test_one_added_line_makes_a_run_with_events_and_summary(tmp_path):
    trainer = own_trainer(tmp_path)
    attachment = wb.attach(trainer, live=False)  # the one line
    trainer.train()
    table = wb.runs()
    assert len(table) == 1 and table.loc[0, "status"] == "completed"
    assert table.loc[0, "model"] == "BertForSequenceClassification"
    run = wb.Run.open(table.loc[0, "path"])
    assert run.path == attachment.run.path
    events = run.events
    train = [e for e in events if e.get("phase") in ("warmup", "train")]
    assert train and train[-1]["step"] == 12
    assert all(e["lr"] is not None for e in train)
    # samples counted from the steps: the batches stay the user's collator's, untouched
    assert all(e["samples_per_s"] > 0 for e in train)
    assert trainer.data_collator.__class__.__name__ == "DataCollatorWithPadding"
    assert "grad_norm" in train[-1] and train[-1]["mem_alloc"] is not None
    evals = [e for e in events if e.get("phase") == "eval"]
    assert [e["step"] for e in evals] == [6, 12] and "eval_accuracy" in evals[-1]
    s = run.summary
    assert s["device"]["kind"] == "cpu" and "torch" in s["versions"]
    assert s["train_loss"] == train[-1]["loss"] and "accuracy" in s["eval"]
    assert s["samples_per_s"] > 0
    spec = run.spec
    assert spec.model["config"]["hidden_size"] == 32
    assert spec.training_arguments["per_device_train_batch_size"] == 8
    assert (spec.data["train_rows"], spec.data["eval_rows"]) == (86, 10)
    assert spec.attached["rebuildable"] is False
    assert (run.path / "checkpoints").resolve() == (tmp_path / "out").resolve()
    assert wb.compare(run).table.loc["status", run.name] == "completed"


def test_the_callback_form_is_the_same_run(tmp_path):
    trainer = own_trainer(tmp_path, callbacks=[wb.callback(live=False, name="mine")])
    trainer.train()
    (run_path,) = wb.runs()["path"]
    run = wb.Run.open(run_path)
    assert run.name.endswith("-mine") and run.status == "completed"
    # the eval set is seen at its first evaluation (wb.callback() is given no Trainer)
    assert run.spec.data["eval_rows"] == 10
    assert [e["step"] for e in run.events if e.get("phase") == "eval"] == [6, 12]


def test_the_callback_twice_on_one_trainer_is_refused_before_a_run_is_written(tmp_path):
    """One training makes one run: ``callbacks=[wb.callback(), wb.callback()]`` (or one
    callback listed twice) is refused as the Trainer is built, naming the fix, with no run
    directory written; it made two runs of one training."""
    twice = r"twice.*one training makes one run.*Pass wb\.callback\(\) once"
    with pytest.raises(ValueError, match=twice):
        own_trainer(tmp_path, callbacks=[wb.callback(live=False), wb.callback(live=False)])
    one = wb.callback(live=False)
    with pytest.raises(ValueError, match=twice):
        own_trainer(tmp_path, callbacks=[one, one])
    assert not (tmp_path / "runs").exists()
    # added after the Trainer was built, past wb.attach's refusal: refused as training begins,
    # when the first has written its run, which ends failed with the fix
    trainer = own_trainer(tmp_path, max_steps=2, callbacks=[wb.callback(live=False)])
    trainer.add_callback(wb.callback(live=False))
    with pytest.raises(ValueError, match=twice):
        trainer.train()
    (path,) = wb.runs()["path"]
    run = wb.Run.open(path)
    assert run.status == "failed" and run.summary["error"].endswith("Pass wb.callback() once")


def _stopped_with_a_checkpoint(run, tmp_path):
    assert run.status == "stopped", run.summary.get("error")
    step = run.summary["step"]
    assert 0 < step < 400
    ckpt = tmp_path / "out" / f"checkpoint-{step}"
    assert (ckpt / "model.safetensors").exists(), "the stop saved a checkpoint in output_dir"
    assert run.last_checkpoint.resolve() == ckpt.resolve(), "the run links it"


def test_stop_from_the_dashboard_saves_a_checkpoint(tmp_path):
    from workbench.views import dashboard

    trainer = own_trainer(tmp_path, max_steps=400, eval_strategy="no")
    front = RecordingFrontend()

    def live(run):  # the live view with a recording front end, as the kernel would show it
        d = dashboard.Dashboard(run, mode="live", sink=front)
        run.subscribe(d)
        run.dashboard = d

    attachment = wb.attach(trainer, live=live)
    thread = threading.Thread(target=trainer.train)
    thread.start()
    run = wait_for(lambda: attachment.run, 60, "the run to start")
    wait_for(lambda: run.step >= 2, 60, "two steps")
    front.answer({"type": "stop"})  # the view's Stop button
    thread.join(120)
    assert not thread.is_alive()
    _stopped_with_a_checkpoint(wb.Run.open(run.path), tmp_path)


def test_stop_from_another_handle_saves_a_checkpoint(tmp_path):
    trainer = own_trainer(tmp_path, max_steps=400, eval_strategy="no")
    attachment = wb.attach(trainer, live=False)
    thread = threading.Thread(target=trainer.train)
    thread.start()
    run = wait_for(lambda: attachment.run, 60, "the run to start")
    wait_for(lambda: run.step >= 2, 60, "two steps")
    wb.Run.open(run.path).stop()  # as another process would: the STOP file
    thread.join(120)
    assert not thread.is_alive()
    _stopped_with_a_checkpoint(wb.Run.open(run.path), tmp_path)


def test_an_attached_run_resumes_through_its_own_trainer(tmp_path):
    trainer = own_trainer(tmp_path, max_steps=4, eval_strategy="no", save_strategy="steps",
                          save_steps=4)
    attachment = wb.attach(trainer, live=False)
    trainer.train()
    run = wb.Run.open(attachment.run.path)
    with pytest.raises(ValueError, match=r"resume_from_checkpoint"):
        run.resume(max_steps=8, live=False)
    trainer.args.max_steps = 8
    trainer.train(resume_from_checkpoint=True)  # the user's own way: the next run
    second = attachment.run
    assert second.path != run.path and second.status == "completed"
    assert [e["step"] for e in second.events if e.get("phase") == "start"] == [4]


def test_an_error_in_training_ends_the_run_failed(tmp_path):
    trainer = own_trainer(tmp_path, max_steps=6, eval_strategy="no")
    attachment = wb.attach(trainer, live=False)

    class Boom(Exception):
        pass

    def explode(*a, **k):
        raise Boom("a bug in the user's code")

    trainer.compute_loss_func = explode
    with pytest.raises(Boom):
        trainer.train()
    run = attachment.run
    assert run.status == "running"  # caught by the caller: theirs (they may retry)
    trainer.compute_loss_func = None
    trainer.train()
    assert wb.Run.open(run.path).status == "failed"
    assert "on_train_end" in wb.Run.open(run.path).summary["error"]
    assert attachment.run.status == "completed"


SCRIPT_THAT_FAILS = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
import workbench as wb
from test_attach import own_trainer

trainer = own_trainer(Path({tmp!r}), max_steps=6, eval_strategy="no",
                      callbacks=[wb.callback(live=False)])

def explode(*a, **k):
    raise RuntimeError("a bug in the user's loss")

trainer.compute_loss_func = explode
trainer.train()  # uncaught: the script ends here
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["script", "ipython"])
def test_an_uncaught_error_in_a_script_is_the_runs_error(tmp_path, where):
    """A script (or a notebook's cell, in IPython) whose train() raises: the run says the
    exception and its traceback, not that the process exited."""
    import os
    import subprocess
    import sys

    code = SCRIPT_THAT_FAILS.format(tests=str(Path(__file__).parent), tmp=str(tmp_path))
    script = tmp_path / "train.py"
    script.write_text(code)
    if where == "ipython":  # the cell's error is IPython's to show; the process goes on
        (tmp_path / "cell.py").write_text(code)
        script.write_text("from IPython.core.interactiveshell import InteractiveShell\n"
                          "from pathlib import Path\n"
                          f"cell = Path({str(tmp_path / 'cell.py')!r}).read_text()\n"
                          "InteractiveShell.instance().run_cell(cell)\n")
    env = {**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300)
    said = done.stderr + done.stdout
    assert done.returncode == (1 if where == "script" else 0), said[-3000:]
    assert "a bug in the user's loss" in said, said[-3000:]
    (path,) = wb.runs(tmp_path / "runs")["path"]
    s = wb.Run.open(path).summary
    assert s["status"] == "failed"
    assert s["error"] == "RuntimeError: a bug in the user's loss (in train(), at step 0)"
    assert "in explode" in s["traceback"] and "trainer.train()" in s["traceback"]
    assert "on_train_end" not in s["error"]


def test_an_uncaught_error_in_a_training_thread_is_the_runs_error(tmp_path):
    """train() in a thread of its own (a notebook's background training): the thread's
    unhandled exception ends the run failed with it, at once."""
    trainer = own_trainer(tmp_path, max_steps=6, eval_strategy="no")
    attachment = wb.attach(trainer, live=False)
    trainer.compute_loss_func = _explode
    reported = []
    previous = threading.excepthook
    threading.excepthook = lambda args: reported.append(args.exc_type)  # instead of printing
    try:
        thread = threading.Thread(target=trainer.train)
        thread.start()
        thread.join()
    finally:
        threading.excepthook = previous
    assert reported == [_Boom]  # the hook it replaced still ran
    s = attachment.run.summary
    assert s["status"] == "failed" and s["error"].startswith("_Boom: a bug in the user's code")
    assert "in _explode" in s["traceback"]


def test_an_error_after_training_is_not_the_runs(tmp_path):
    """An unhandled exception that did not leave this Trainer's train() changes no run."""
    import gc
    import sys

    trainer = own_trainer(tmp_path, max_steps=6, eval_strategy="no")
    attachment = wb.attach(trainer, live=False)
    trainer.compute_loss_func = _explode
    with pytest.raises(_Boom):
        trainer.train()
    try:
        raise KeyError("elsewhere")
    except KeyError as e:
        sys.excepthook(type(e), e, e.__traceback__)  # as the interpreter reports it
    run = attachment.run
    assert run.status == "running"
    del trainer, attachment  # ends it here, in the main thread (its Ctrl-C handler goes back)
    gc.collect()
    assert wb.Run.open(run.path).summary["error"].startswith("the Trainer was dropped (garbage")


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    trainer = own_trainer(tmp_path)
    with pytest.raises(TypeError, match="transformers.Trainer"):
        wb.attach(object())
    with pytest.raises(ValueError, match="live="):
        wb.attach(trainer, live="sometimes")
    with pytest.raises(ValueError, match="throughput_warmup_steps"):
        wb.callback(throughput_warmup_steps=-1)
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match="run_dir"):
        wb.attach(trainer, run_dir=tmp_path / "afile" / "runs")
    wb.attach(trainer, live=False)
    with pytest.raises(ValueError, match="attached already"):
        wb.attach(trainer, live=False)
    assert not (tmp_path / "runs").exists()
    assert sum(isinstance(c, Attachment) for c in trainer.callback_handler.callbacks) == 1


@pytest.mark.parametrize("lazy", ["0", "1"], ids=["eager", "lazy"])
def test_training_args_take_the_hpu_records_choices(fake_hpu, monkeypatch, lazy):
    """On the HPU (the bridge's test double; the mode is fixed when the bridge loads): bf16,
    torch.compile with hpu_backend in eager mode and none in lazy mode, AdamW for the
    Trainer (the fused hpex one comes through wb.attach), no per-step NaN filter, about 50
    logging steps."""
    from workbench.training.defaults import defaults_for

    monkeypatch.setenv("PT_HPU_LAZY_MODE", lazy)
    chosen = defaults_for(wb.device("hpu"), {"max_steps": 500})
    assert chosen["bf16"] and not chosen["use_cpu"] and chosen["dataloader_pin_memory"]
    assert chosen["optim"] == "adamw_torch" and chosen["logging_nan_inf_filter"] is False
    assert chosen["logging_steps"] == 10
    if lazy == "0":
        assert chosen["torch_compile"] and chosen["torch_compile_backend"] == "hpu_backend"
        assert defaults_for(wb.device("hpu"), {"torch_compile": False})["torch_compile"] is False
    else:
        assert not chosen["torch_compile"] and "torch_compile_backend" not in chosen


def test_training_args_on_the_cpu_and_every_user_keyword_wins(tmp_path):
    args = wb.training_args(tmp_path / "out", max_steps=100, report_to="none")
    assert (args.bf16, args.use_cpu, args.optim, args.logging_steps) == (
        False, True, "adamw_torch_fused", 2)
    mine = wb.training_args(str(tmp_path / "out"), max_steps=100, logging_steps=7,
                            optim="adamw_torch", report_to="none")
    assert (mine.logging_steps, mine.optim) == (7, "adamw_torch")
    with pytest.raises(ValueError, match=r"learning_rat \(did you mean learning_rate\?\)"):
        wb.training_args("out", learning_rat=1e-3)
    # wb.train's words, as a user of both writes them here: the field they name (a misspelt
    # bach_size was pointed to auto_find_batch_size)
    with pytest.raises(ValueError, match=r"bach_size \(did you mean per_device_train_batch_size,"
                                         r" wb.train's batch_size\?\)"):
        wb.training_args("out", bach_size=8)
    with pytest.raises(ValueError, match=r"lr \(TrainingArguments calls it learning_rate\)"):
        wb.training_args("out", lr=1e-3)


def test_the_bucket_collator_pads_your_dataset_to_few_shapes(tmp_path):
    import transformers

    model, tok, data, metrics = own_parts(rows=200, max_length=128)  # lengths vary
    collator = wb.bucket_collator(tok, data["train"], data["eval"], batch_size=8, buckets=3)
    assert len(collator.boundaries) <= 3
    args = wb.training_args(str(tmp_path / "out"), max_steps=20, per_device_train_batch_size=8,
                            report_to="none", save_strategy="no", disable_tqdm=True)
    shapes = {}
    for name, collate in (("longest", transformers.DataCollatorWithPadding(tok)),
                          ("bucketed", collator)):
        seen = set()

        def recording(features, collate=collate, seen=seen):
            batch = collate(features)
            seen.add(tuple(batch["input_ids"].shape))
            return batch

        trainer = transformers.Trainer(model=model, args=args, train_dataset=data["train"],
                                       data_collator=recording)
        attachment = wb.attach(trainer, live=False, name=name)
        trainer.train()
        assert attachment.run.status == "completed"
        shapes[name] = len(seen)
    assert shapes["bucketed"] <= 3 < shapes["longest"], shapes


# ------------------------------------------------------------------ issue 39: wrap, don't keep
class _Boom(Exception):
    pass


def _explode(*a, **k):
    raise _Boom("a bug in the user's code")


class _StopAt:
    """The user's own callback, after the attachment: asks the run to stop from "another
    process" (the run's STOP file) at the end of step ``step``."""

    def __init__(self, step):
        from transformers import TrainerCallback

        outer = self

        class Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == step:
                    outer.path = Path(wb.runs().loc[0, "path"])
                    wb.Run.open(outer.path).stop()

        self.callback = Callback()


@pytest.mark.parametrize("ending", ["trained", "stopped", "failed"])
@pytest.mark.parametrize("how", ["attach", "callback"])
def test_nothing_of_yours_is_kept_alive(tmp_path, how, ending):
    """After ``del trainer, model; gc.collect()`` the model is freed, as a plain Trainer's
    is: a notebook that re-runs its cell keeps no older model (on a Gaudi or GPU, its device
    memory). A run that an error left open ends as failed when its Trainer goes."""
    import gc
    import weakref

    stopper = _StopAt(2)
    callbacks = [stopper.callback] if ending == "stopped" else []
    if how == "callback":
        callbacks.insert(0, wb.callback(live=False))
    trainer = own_trainer(tmp_path, max_steps=6, eval_strategy="no", callbacks=callbacks)
    if how == "attach":
        wb.attach(trainer, live=False)
    model = trainer.model
    freed = weakref.ref(model)
    if ending == "failed":
        trainer.compute_loss_func = _explode
        with pytest.raises(_Boom):
            trainer.train()
    else:
        trainer.train()
    path = Path(wb.runs().loc[0, "path"])
    del trainer, model, callbacks  # the user holds nothing else of theirs
    gc.collect()
    assert freed() is None, "the model is still referenced after del and gc.collect()"
    status = {"trained": "completed", "stopped": "stopped", "failed": "failed"}[ending]
    assert wb.Run.open(path).status == status
    if ending == "failed":  # this process did not exit: the run says what ended it
        assert wb.Run.open(path).summary["error"].startswith(
            "the Trainer was dropped (garbage collected) while it trained")


def test_a_stop_from_another_process_takes_effect_after_the_current_step(tmp_path):
    """400 steps log every 8th; a stop asked at step 2 ends the run at step 3, not 8."""
    stopper = _StopAt(2)
    trainer = own_trainer(tmp_path, max_steps=400, eval_strategy="no",
                          callbacks=[wb.callback(live=False), stopper.callback])
    trainer.train()
    run = wb.Run.open(stopper.path)
    assert run.status == "stopped" and run.summary["step"] == 3
    assert (tmp_path / "out" / "checkpoint-3" / "model.safetensors").exists()


def test_an_evaluation_after_train_is_recorded_in_the_run(tmp_path):
    """Every example script calls ``trainer.evaluate()`` after ``train()``: its figures reach
    the run's events and summary, and so ``wb.runs()`` and ``wb.compare()``."""
    trainer = own_trainer(tmp_path, max_steps=4, eval_strategy="no")
    attachment = wb.attach(trainer, live=False)
    trainer.train()
    assert wb.Run.open(attachment.run.path).summary["eval"] == {}
    metrics = trainer.evaluate()
    run = wb.Run.open(attachment.run.path)
    assert run.summary["eval"]["accuracy"] == metrics["eval_accuracy"]
    assert run.summary["eval"]["loss"] == metrics["eval_loss"] and run.status == "completed"
    assert [e["step"] for e in run.events if e.get("phase") == "eval"] == [4]
    table = wb.runs()
    assert table.loc[0, "eval_accuracy"] == metrics["eval_accuracy"]
    assert wb.compare(run).table.loc["accuracy", run.name] == metrics["eval_accuracy"]


def _lm_parts(kind: str):
    """A GPT-2 (``run_clm``'s model) or a BERT masked LM, from a config, and token rows."""
    import transformers

    family = "gpt2" if kind == "causal" else "bert"
    tok = wb.model(family, size="tiny").load_tokenizer()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    rows = wb.dataset("docstrings-lm", limit=48).load().map(
        lambda b: tok(b["text"], truncation=True, max_length=32), batched=True,
        remove_columns=["text"])
    transformers.set_seed(0)
    if kind == "causal":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64))
    else:
        model = transformers.BertForMaskedLM(transformers.BertConfig(
            vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64))
    collator = transformers.DataCollatorForLanguageModeling(tok, mlm=kind == "masked")
    return model, rows, collator


@pytest.mark.parametrize("kind", ["causal", "masked"])
def test_language_models_get_their_perplexity(tmp_path, kind):
    import math

    import transformers

    model, rows, collator = _lm_parts(kind)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4,
        report_to="none", disable_tqdm=True, save_strategy="no")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows["train"],
                                   eval_dataset=rows["eval"], data_collator=collator,
                                   callbacks=[wb.callback(live=False)])
    trainer.train()
    metrics = trainer.evaluate()
    run = wb.Run.open(wb.runs().loc[0, "path"])
    assert run.spec.model["task"] == ("causal_lm" if kind == "causal" else "masked_lm")
    assert run.summary["eval"]["perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]))


def test_attach_leaves_no_output_in_a_cell(tmp_path):
    from IPython.core.formatters import DisplayFormatter

    attachment = wb.attach(own_trainer(tmp_path), live=False)
    shown, _ = DisplayFormatter().format(attachment)
    assert shown == {}, f"a cell ending in wb.attach(trainer) shows {shown}"


def test_an_evaluation_after_the_end_prints_a_whole_line():
    """The text view: the end's line, then trainer.evaluate()'s, each ends with a newline."""
    import io

    from workbench.views.progress import TextProgress

    class Named:
        name = "bert-own"

    out = io.StringIO()
    view = TextProgress(Named(), stream=out)
    for event in ({"phase": "start", "max_steps": 4}, {"phase": "end", "step": 4,
                  "status": "completed"}, {"phase": "eval", "step": 4, "eval_loss": 1.5}):
        view(event)
    lines = out.getvalue().split("\n")
    assert lines[-1] == "" and "eval_loss 1.5" in lines[-2] and "completed" in lines[-3]


SCRIPT_THAT_PRINTS = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
import workbench as wb
from test_attach import own_trainer

trainer = own_trainer(Path({tmp!r}), max_steps=12, eval_strategy="no", **{kw!r})
wb.attach(trainer, live="auto")  # a script: the text line
trainer.train()
"""


@pytest.mark.slow
@pytest.mark.parametrize("kw,dicts", [
    # tqdm's bar (the Trainer's default in a terminal); the user asked for a log every 4 steps
    ({"disable_tqdm": False, "logging_steps": 4}, 3),
    ({"disable_tqdm": True, "logging_steps": 6}, 2),  # PrinterCallback prints the user's logs
], ids=["bar", "printer"])
def test_a_script_prints_only_the_logs_its_user_asked_for_and_whole_lines(tmp_path, kw, dicts):
    """The attachment makes the Trainer log about 50 times a run for its dashboard:
    transformers' printers print only the logs the user's arguments asked for. With tqdm's
    bar, the attachment's text writes no \\r line into the bar, only its end, a whole line."""
    import os
    import re
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(SCRIPT_THAT_PRINTS.format(tests=str(Path(__file__).parent),
                                                tmp=str(tmp_path), kw=kw))
    env = {**os.environ, "WORKBENCH_RUNS": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    logs = re.findall(r"\{'loss': '?[\d.]+'?", said)
    assert len(logs) == dicts, said[-3000:]
    assert "'train_runtime'" in said, "the Trainer's own summary at the end is printed"
    (path,) = wb.runs(tmp_path / "runs")["path"]
    name = wb.Run.open(path).name
    ours = [ln for ln in re.split(r"[\r\n]", said) if name in ln]
    assert ours and ours[-1].replace("\x1b[K", "").endswith("completed"), ours
    if not kw["disable_tqdm"]:
        assert not re.search(rf"\r{re.escape(name)}", said), "no \\r line drawn into tqdm's bar"
        assert re.search(rf"(^|\n){re.escape(name)} \| step 12/12 .*completed\n", said), said[-2000:]
