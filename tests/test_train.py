"""The training engine on CPU with the real Trainer: events, runs, stop, faults, resume."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench.catalog.modelspec import FAMILIES
from workbench.runargs import RunArgs
from workbench.rundir.spec import RunSpec
from workbench.training.engine import Run

from conftest import wait_for

DATA = {"bert": "docstrings-topic", "gpt2": "docstrings-lm", "t5": "docstrings-summary",
        "llama": "docstrings-lm", "unet": "digits", "sd": "digits-captioned",
        "vae": "digits-captioned"}
SUMMARY_KEYS = {"status", "error", "step", "max_steps", "train_loss", "eval", "samples_per_s",
                "tokens_per_s", "step_time", "mem_peak", "mem_total", "wall_time_s", "device",
                "versions", "checkpoint", "started", "ended"}


pytestmark = pytest.mark.usefixtures("runs_in_tmp")


def _train_events(run):
    return [e for e in run.events if e["phase"] in ("warmup", "train")]


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_trains_on_its_bundled_data(family):
    steps, batch = {"bert": (80, 16), "unet": (20, 8), "sd": (20, 8), "vae": (20, 8)}.get(family, (30, 8))
    run = wb.train(wb.model(family), wb.dataset(DATA[family], limit=400), max_steps=steps,
                   batch_size=batch, max_length=64, log_every=2, live=False)
    assert run.status == "completed", run.summary.get("error")
    events = _train_events(run)
    steps_seen = [e["step"] for e in events]
    assert steps_seen == list(range(2, steps + 1, 2)), "an event at every logging step, monotonic"
    for e in events:
        assert {"step", "loss", "lr", "grad_norm", "samples_per_s", "step_time", "mem_alloc",
                "mem_peak", "phase"} <= set(e)
        assert e["samples_per_s"] > 0 and e["mem_alloc"] > 0
    if family not in ("unet", "sd", "vae"):  # images: no tokens to count
        assert all(e["tokens_per_s"] > 0 for e in events)
    if family not in ("unet", "sd", "vae"):  # the language and classification families learn visibly
        first = sum(e["loss"] for e in events[:3]) / 3
        last = sum(e["loss"] for e in events[-3:]) / 3
        assert last < first * 0.95, (first, last)
    assert [e["phase"] for e in run.events][0] == "start" and run.events[-1]["phase"] == "end"
    assert any(e["phase"] == "eval" and "eval_loss" in e for e in run.events)
    summary = json.loads((run.path / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["step"] == steps and summary["device"]["kind"] == "cpu"
    assert (run.last_checkpoint / "model.safetensors").exists()
    assert not list(run.last_checkpoint.glob("pytorch_model*.bin")), "weights are saved as safetensors only"


@pytest.mark.slow
def test_throughput_excludes_warmup_and_summary_uses_train_intervals():
    run = wb.train("gpt2-tiny", "docstrings-lm", max_steps=12, batch_size=4, log_every=2,
                   throughput_warmup_steps=4, max_length=32, live=False)
    phases = {e["step"]: e["phase"] for e in _train_events(run)}
    assert phases == {2: "warmup", 4: "warmup", 6: "train", 8: "train", 10: "train", 12: "train"}
    train = sorted(e["tokens_per_s"] for e in _train_events(run) if e["phase"] == "train")
    assert run.summary["tokens_per_s"] == pytest.approx((train[1] + train[2]) / 2)


@pytest.mark.slow
def test_default_logging_on_an_accelerator_waits_between_events(monkeypatch):
    from workbench.training import recipe

    every = wb.train("gpt2-tiny", "docstrings-lm", max_steps=12, batch_size=4, max_length=32,
                     save_every=6, log_every=1, live=False)
    assert every.spec.args.log_interval_s == 0, "an explicit log_every is kept exactly"
    losses = {e["step"]: e["loss"] for e in _train_events(every)}
    assert sorted(losses) == list(range(1, 13))
    # the same run with the default cadence, as on a GPU where no event comes sooner than
    # log_interval_s after the last: here never, so only the first step, checkpoints and the end
    monkeypatch.setattr(recipe, "log_interval", lambda a, device, size: 3600.0)
    sparse = wb.train("gpt2-tiny", "docstrings-lm", max_steps=12, batch_size=4, max_length=32,
                      save_every=6, live=False)
    assert sparse.spec.args.log_interval_s is None, "the device's default interval"
    events = {e["step"]: e["loss"] for e in _train_events(sparse)}
    assert sorted(events) == [1, 6, 12]
    # the Trainer averages the loss over the steps since its last log
    assert events[6] == pytest.approx(sum(losses[s] for s in range(2, 7)) / 5, rel=1e-4)
    assert events[12] == pytest.approx(sum(losses[s] for s in range(7, 13)) / 6, rel=1e-4)
    assert [c.name for c in sparse.checkpoints][-1].endswith("12")


def test_the_default_cadence_logs_when_the_last_event_is_a_few_seconds_old(monkeypatch):
    """A CPU run logged every 25 steps however slow they were: the chart looked stuck. The
    default cadence also logs once the last event is live_gap old (2 s, then 2% of the time
    trained), reading only the host's clock to decide; an explicit log_every and more than
    one rank keep their steps."""
    import threading
    from types import SimpleNamespace

    from transformers import TrainerControl

    from workbench.rundir.run import NullLog
    from workbench.training import callbacks, recipe

    clock = [100.0]
    monkeypatch.setattr(callbacks, "monotonic", lambda: clock[0])
    device = SimpleNamespace(kind="cpu", total_memory=0, synchronize=lambda: None, fallbacks=lambda: None,
                             compiles=lambda: None, dynamo_graphs=lambda: None, graph_breaks=lambda: None,
                             host_syncs=lambda: None)
    counter = SimpleNamespace(consume=lambda n: None)
    events = callbacks.Events(NullLog(), threading.Event(), "classification", device, counter, 8, 3,
                              gap=recipe.live_gap)
    args, state = SimpleNamespace(gradient_accumulation_steps=1), SimpleNamespace(global_step=0, max_steps=10_000)
    events.on_train_begin(args, state, TrainerControl())

    def step(seconds, logging_step=False):
        clock[0] += seconds
        state.global_step += 1
        control = events.on_step_end(args, state, TrainerControl(should_log=logging_step))
        if control.should_log:
            events._last_log = clock[0]  # as on_log does
        return control.should_log

    assert not step(1.0) and step(1.0), "2 s after the start, though no logging step came"
    assert not step(1.9) and step(0.1) and step(5.0)
    clock[0] += 1000  # 1000 s into training: the gap is 2% of it
    events._last_log = clock[0]
    assert not step(19.0) and step(2.0)
    assert step(0.1, logging_step=True), "logging steps log as before"
    assert recipe.timed_logging(RunArgs(log_interval_s=None), 1)
    assert not recipe.timed_logging(RunArgs(log_interval_s=0.0), 1), "an explicit log_every is kept"
    assert not recipe.timed_logging(RunArgs(log_interval_s=None), 2), "ranks log at the same steps"


def test_log_throttle_only_on_one_accelerator_process(fake_hpu):
    from workbench.training import recipe

    hpu, cpu = wb.device("hpu"), wb.device("cpu")
    auto = RunArgs(log_interval_s=None)
    assert recipe.log_interval(auto, hpu, 1) == hpu.backend.policy.log_interval_s > 0
    assert recipe.log_interval(auto, hpu, 2) == 0, "ranks must log at the same steps"
    assert recipe.log_interval(auto, cpu, 1) == 0, "on the CPU reading the loss waits for nothing"
    older = RunSpec.read({"model": {}, "data": {}, "args": {}}).args  # spec.json with no version
    assert recipe.log_interval(older, hpu, 1) == 0, "runs made before the throttle existed"


@pytest.mark.slow
def test_causal_sdpa_builds_no_mask_even_under_compile_and_keeps_the_loss():
    """Why packed runs switch the attention: under torch.compile transformers hands SDPA a
    mask tensor (no flash kernel); under the workbench's alias of SDPA it builds none."""
    from workbench.shapes.batching import BucketCollator, pack
    from workbench.training import attention

    tok = wb.model("gpt2").load_tokenizer()
    docs = [r["input_ids"] for r in wb.dataset("docstrings-lm", limit=80).prepare(tok, max_length=64)["train"]]
    blocks = BucketCollator(tok, [32], 4, task="causal_lm")(pack(docs, 32, tok.eos_token_id)[:3])
    unmasked = {k: v for k, v in blocks.items() if k != "attention_mask"}
    model = wb.model("gpt2").build()[0].eval()
    model.config.use_cache = False  # as under the Trainer

    def sdpa_kwargs(batch):
        seen = []

        def backend(gm, example_inputs):
            seen.extend(n.kwargs for n in gm.graph.nodes if "scaled_dot_product_attention" in str(n.target))
            return gm.forward

        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model, backend=backend)(**batch)
        return seen

    with torch.no_grad():
        reference = model(**blocks).loss.item()  # sdpa, mask of ones (dummy row: zeros)
    assert all(kw["attn_mask"] is not None for kw in sdpa_kwargs(unmasked))
    restore = attention.causal_sdpa(model)
    assert model.config._attn_implementation == attention.CAUSAL_SDPA
    compiled = sdpa_kwargs(unmasked)
    assert compiled and all(kw["attn_mask"] is None and kw["is_causal"] for kw in compiled)
    with torch.no_grad():
        assert model(**unmasked).loss.item() == pytest.approx(reference, abs=1e-5)
    assert attention.CAUSAL_SDPA not in model.config.to_json_string(), "checkpoints load without the workbench"
    restore()
    assert model.config._attn_implementation == "sdpa"
    torch._dynamo.reset()


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_masked_sdpa_reads_no_mask_value_and_keeps_the_loss(family):
    """Why static-shape runs switch the attention: under "sdpa" transformers reads the mask
    (``.all()``, a host sync) to decide whether to skip it; the workbench's alias always
    builds it, as under torch.compile, for the same loss with and without padding."""
    from torch.overrides import TorchFunctionMode

    from workbench.training import attention

    class Reads(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.names.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    model = wb.model(family).build(**({"num_labels": 3} if family == "bert" else {}))[0].eval()
    ids = torch.randint(5, 100, (2, 12))
    padded = torch.ones(2, 12, dtype=torch.long)
    padded[1, 7:] = 0
    labels = torch.tensor([0, 2]) if family == "bert" else torch.randint(5, 100, (2, 6))
    for mask in (padded, torch.ones_like(padded)):
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        with torch.no_grad(), Reads() as before:
            reference = model(**batch).loss
        restore = attention.masked_sdpa(model)
        assert model.config._attn_implementation == attention.MASKED_SDPA
        with torch.no_grad(), Reads() as after:
            loss = model(**batch).loss
        restore()
        assert model.config._attn_implementation == "sdpa"
        assert "all" in before.names and "all" not in after.names, "the read it saves"
        assert torch.allclose(loss, reference, atol=1e-6), (float(loss), float(reference))


def test_a_classifier_knows_its_problem_type_before_its_first_forward():
    """transformers' classifiers set config.problem_type in their first forward (a value
    torch.compile guards on: the second step compiled again); the workbench sets the same
    value when it builds the model."""
    from workbench.training.trainer import _name_the_problem

    model = wb.model("bert").build(num_labels=3)[0]
    assert model.config.problem_type is None
    model(input_ids=torch.tensor([[5, 6, 7]]), labels=torch.tensor([1]))
    chosen = model.config.problem_type
    model.config.problem_type = None
    _name_the_problem(model)
    assert model.config.problem_type == chosen == "single_label_classification"


@pytest.mark.slow
def test_classification_reports_accuracy_and_run_reopens():
    run = wb.train("bert-tiny", wb.dataset("docstrings-topic", limit=200), max_steps=6, live=False)
    assert 0 <= run.summary["eval"]["accuracy"] <= 1
    again = Run.open(run.path)
    assert again.status == "completed" and len(again.metrics) == len(run.events)
    model, tok = again.model, again.tokenizer
    assert type(model).__name__ == "BertForSequenceClassification" and tok is not None
    table = wb.runs()
    assert run.name in set(table["run"])
    side = wb.compare(run, again.path)
    assert list(side.table.columns) == [run.name, run.name + " #2"]
    assert side.table.loc["status"].tolist() == ["completed"] * 2
    bundle = side._repr_mimebundle_()
    assert bundle["image/png"] and "<table" in bundle["text/html"]


@pytest.mark.slow
def test_rerunning_never_overwrites_a_run():
    a = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), max_steps=2, name="same", live=False)
    b = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), max_steps=2, name="same", live=False)
    assert a.path != b.path and a.path.exists() and b.path.exists()


@pytest.mark.slow
def test_the_end_event_reaches_subscribers_after_the_run_has_ended():
    """What a subscriber of the end event (the train form, a dashboard) sees: a run that is
    no longer training and whose summary says how it ended; so a new run can start at once."""
    seen = []

    def watch(run):
        run.subscribe(lambda e: seen.append((run.is_training, bool(run.summary.get("ended")), run.status))
                      if e.get("phase") == "end" else None)

    wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), max_steps=2, live=watch)
    assert seen == [(False, True, "completed")]


def test_bad_arguments_fail_before_training():
    with pytest.raises(ValueError, match="gpt2-tiny does its task 'causal_lm' but 'docstrings-topic' is a 'classification' dataset"):
        wb.train("gpt2-tiny", "docstrings-topic", max_steps=2, live=False)
    with pytest.raises(ValueError, match="unknown precision 'fp8'; known: auto, fp32, bf16, fp16"):
        wb.train("gpt2-tiny", "docstrings-lm", max_steps=2, precision="fp8", live=False)
    with pytest.raises(RuntimeError, match="'cuda'.*not available"):
        wb.train("gpt2-tiny", "docstrings-lm", max_steps=2, device="cuda", live=False)


@pytest.mark.slow
def test_stop_from_another_thread_checkpoints_and_resume_matches_an_uninterrupted_run():
    kw = dict(max_steps=12, batch_size=8, log_every=1, max_length=32, live=False)
    data = wb.dataset("docstrings-lm", limit=200)
    straight = wb.train("gpt2-tiny", data, **kw)

    run = wb.train("gpt2-tiny", data, background=True, **kw)
    run.subscribe(lambda e: run.stop() if e.get("step") == 5 and e["phase"] == "train" else None)
    run.wait(120)
    assert run.status == "stopped" and run.summary["step"] == 6
    assert run.last_checkpoint.name == "checkpoint-6"

    run.resume()
    assert run.status == "completed" and run.summary["step"] == 12
    steps = [e["step"] for e in _train_events(run)]
    assert steps == list(range(1, 13)), "resumed log continues without gaps or repeats"
    a = {e["step"]: e["loss"] for e in _train_events(straight)}
    b = {e["step"]: e["loss"] for e in _train_events(run)}
    assert b[12] == pytest.approx(a[12], rel=1e-5), "optimizer, scheduler, RNG and data order restored"
    for p, q in zip(straight.model.parameters(), run.model.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_a_gpt2_resume_says_nothing_of_its_tied_head_but_other_missing_keys_still_warn(capfd):
    """safetensors keeps GPT-2's tied lm_head.weight once (as transformer.wte.weight), so every
    checkpoint lacks it and the Trainer warned of it on each resume: harmless, now silent; the
    head is tied again after the resume. A key missing for real still warns."""
    import logging

    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), max_steps=2, batch_size=4,
                   max_length=32, live=False)
    capfd.readouterr()
    Run.open(run.path).resume(max_steps=4, live=False)
    out, err = capfd.readouterr()
    assert "missing keys" not in out + err, (out + err)[-2000:]
    resumed = Run.open(run.path)
    assert resumed.status == "completed" and resumed.step == 4
    model = resumed.model
    assert model.lm_head.weight is model.transformer.wte.weight, "the head is tied to the embedding"

    from workbench.training.trainer import MISSING_KEYS, _TiedOnly

    def says(model, keys) -> bool:
        record = logging.LogRecord("transformers.trainer", logging.WARNING, __file__, 0,
                                   f"{MISSING_KEYS}{keys}.", None, None)
        return _TiedOnly(model).filter(record)

    assert not says(model, ["lm_head.weight"])
    assert says(model, ["transformer.h.0.attn.c_attn.weight"]), "a real missing weight still warns"
    untied, _ = wb.model("gpt2-tiny", tie_word_embeddings=False).build()
    assert says(untied, ["lm_head.weight"]), "an untied head missing is a real loss"


def test_nan_loss_stops_with_a_message_and_keeps_the_last_good_checkpoint(capsys):
    from transformers import TrainerCallback

    class Poison(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step == 7:
                with torch.no_grad():
                    next(model.parameters()).fill_(float("nan"))

    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=40, batch_size=4,
                   max_length=32, log_every=1, save_every=5, callbacks=[Poison()], live=False)
    assert run.status == "failed"
    assert "at step 8" in run.summary["error"] and "lower learning rate" in run.summary["error"]
    assert "at step 8" in capsys.readouterr().err
    assert run.last_checkpoint.name == "checkpoint-5"
    state = json.loads((run.last_checkpoint / "trainer_state.json").read_text())
    assert all(math.isfinite(h["loss"]) for h in state["log_history"] if "loss" in h)


def test_other_exceptions_mark_the_run_failed_and_reraise():
    from transformers import TrainerCallback

    class Boom(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 3:
                raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), max_steps=10, batch_size=4,
                 max_length=32, callbacks=[Boom()], live=False)
    run = Run.open(sorted((Path(os.environ["WORKBENCH_RUNS"])).iterdir())[-1])
    assert run.status == "failed" and "disk on fire" in run.summary["error"]
    assert "Traceback" in run.summary["traceback"]
    assert "plan_memory" not in run.summary["error"]


def test_out_of_memory_names_the_fix():
    from transformers import TrainerCallback

    class Oom(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate; out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), max_steps=3, batch_size=4,
                 max_length=32, callbacks=[Oom()], live=False)
    run = Run.open(sorted((Path(os.environ["WORKBENCH_RUNS"])).iterdir())[-1])
    assert "out of cpu memory" in run.summary["error"] and "smaller batch_size" in run.summary["error"]


SCRIPT = textwrap.dedent("""
    import sys, workbench as wb
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=400), max_steps=100000, batch_size=4,
                   max_length=32, log_every=1, save_every=5, name="victim", live=False)
    print("RETURNED", run.status, flush=True)
""")


def _start_victim(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = tmp_path / "runs"

    def checkpoint_10():
        assert proc.poll() is None, proc.communicate()
        return next(root.glob("*-victim/checkpoints/checkpoint-10/trainer_state.json"), None)

    try:
        found = wait_for(checkpoint_10, 120, "the training subprocess's checkpoint at step 10")
    except BaseException:
        proc.kill()
        raise
    return proc, Run.open(found.parents[2])


@pytest.mark.slow
def test_sigint_stops_gracefully_without_a_traceback(tmp_path):
    proc, run = _start_victim(tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "RETURNED stopped" in out and "Traceback" not in err
    assert run.status == "stopped"
    last = run.summary["step"]
    assert run.last_checkpoint.name == f"checkpoint-{last}", "a checkpoint at the step it stopped"


def test_the_first_interrupt_is_a_notice_on_stdout_the_second_aborts(capsys):
    """A notebook shows stderr as an error box: stopping on request is not an error."""
    import threading
    from types import SimpleNamespace

    from workbench.training.interrupts import Interrupts

    run = SimpleNamespace(name="victim", stop_flag=threading.Event())
    run.stop = run.stop_flag.set
    with Interrupts(run):
        signal.raise_signal(signal.SIGINT)  # the handler runs in this (the main) thread
        assert run.stop_flag.is_set()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    out, err = capsys.readouterr()
    assert "Stopping victim after this step (interrupt again to abort)." in out and err == ""


@pytest.mark.slow
def test_sigkill_then_resume_loses_at_most_save_every_steps(tmp_path):
    proc, run = _start_victim(tmp_path)
    # kill it between checkpoints: logged past step 10, at most save_every=5 steps unsaved
    wait_for(lambda: any(e.get("step", 0) >= 12 for e in run.events), 60, "steps logged past the checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    reopened = Run.open(run.path)
    assert reopened.status == "failed", "a killed process leaves a run that reads as failed"
    logged = max(e["step"] for e in reopened.events if "step" in e)
    ckpt = int(reopened.last_checkpoint.name.split("-")[-1])
    assert 0 <= logged - ckpt <= 5
    reopened.resume(max_steps=ckpt + 4, live=False)
    assert reopened.status == "completed" and reopened.summary["step"] == ckpt + 4
    steps = [e["step"] for e in _train_events(reopened)]
    assert steps == sorted(set(steps)) and steps[-1] == ckpt + 4


@pytest.mark.slow
def test_diffusion_run_samples_images():
    run = wb.train("unet-tiny", wb.dataset("digits", limit=64), max_steps=3, batch_size=8, live=False)
    images = run.sample(4, steps=5)
    assert len(images) == 4 and images[0].size == (32, 32) and images[0].mode == "L"
    again = Run.open(run.path).sample(4, steps=5)
    assert [a.tobytes() for a in images] == [b.tobytes() for b in again]
    with pytest.raises(ValueError, match="for diffusion runs"):
        wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=32), max_steps=1, live=False).sample(2)


def test_lora_trains_only_adapters_and_reloads():
    spec = wb.model("llama", lora={"r": 4})
    run = wb.train(spec, wb.dataset("docstrings-lm", limit=200), max_steps=30, batch_size=8,
                   max_length=32, lr=5e-3, log_every=3, live=False)
    assert run.status == "completed"
    model = run.trainer.model
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    assert 0 < trainable / total < 0.1
    losses = [e["loss"] for e in _train_events(run)]
    assert sum(losses[-3:]) < sum(losses[:3])
    assert (run.last_checkpoint / "adapter_model.safetensors").exists()
    again = Run.open(run.path).model
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert n1 == n2 and torch.allclose(p1, p2), n1


@pytest.fixture
def sdpa_calls(monkeypatch):
    """(mask given, is_causal) of every SDPA call from now on in this test."""
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, attn_mask=None, is_causal=False, **kw):
        calls.append((attn_mask is not None, is_causal))
        return sdpa(*args, attn_mask=attn_mask, is_causal=is_causal, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.slow
def test_default_batching_is_static_shaped_and_reported_in_events(sdpa_calls):
    topic = wb.train("bert-tiny", wb.dataset("docstrings-topic", limit=300), max_steps=12, batch_size=8,
                     max_length=128, log_every=4, live=False)
    assert topic.spec.args.padding == "bucketed"
    last = _train_events(topic)[-1]
    assert last["shapes_seen"] <= 8 and last["padding_waste_pct"] < 30
    assert all(s[0] == 8 for s in topic.trainer.data_collator.shapes), "batches padded to full size"
    sdpa_calls.clear()  # the packed run's calls only
    calls = sdpa_calls
    lm = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=300), max_steps=6, batch_size=4,
                  max_length=64, log_every=3, live=False)
    assert lm.spec.args.padding == "packed"
    last = _train_events(lm)[-1]
    assert last["shapes_seen"] == 1 and last["padding_waste_pct"] < 1 and last["tokens_per_step"] == 4 * 64
    # packed blocks go without their (all-ones) mask, so SDPA takes its causal kernel ...
    assert calls and set(calls) == {(False, True)}, set(calls)
    assert "position_ids" not in next(iter(lm.trainer.get_train_dataloader())), "concat: positions run on"
    # ... and the model leaves with the attention it came with (generation needs masks)
    assert lm.model.config._attn_implementation == "sdpa"
    # ... and transformers' advice to pass a mask is not printed for them
    import logging

    from transformers.modeling_utils import logger

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    try:
        logger.warning("We strongly recommend passing in an `attention_mask` since ...")
        logger.warning("another warning")
    finally:
        logger.removeHandler(handler)
    assert seen == ["another warning"]
    with pytest.raises(ValueError, match="padding='packed' is for causal language models"):
        wb.train("bert-tiny", "docstrings-topic", padding="packed", live=False)


def test_isolated_packing_keeps_attention_inside_documents(sdpa_calls):
    calls = sdpa_calls
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=100), max_steps=2, batch_size=4,
                   max_length=64, packing="isolated", live=False)
    assert run.status == "completed" and run.spec.args.packing == "isolated"
    batch = next(iter(run.trainer.get_train_dataloader()))
    assert "position_ids" in batch and "attention_mask" not in batch
    assert (batch["position_ids"] == 0).sum() > batch["position_ids"].shape[0], "positions restart per document"
    # transformers built a mask from the restarting positions: a block-diagonal one
    assert calls and all(masked for masked, _ in calls), set(calls)
    assert run.model.config.use_cache is True, "the model leaves with its KV cache back on"
    with pytest.raises(ValueError, match="unknown packing 'both'"):
        wb.train("gpt2-tiny", "docstrings-lm", packing="both", live=False)


def test_each_run_reports_its_own_peak_memory(monkeypatch):
    """An accelerator's peak counter outlives a run: a second run in one kernel must not
    report the first one's peak (the CPU's peak RSS cannot be reset, so the CPU record is
    given an accelerator's counter here)."""
    import dataclasses

    from workbench.backends.registry import BACKENDS

    counter = {"in_use": 2**20, "peak": 2**20}

    def memory(index):
        return {"allocated": counter["in_use"], "peak": counter["peak"], "total": 2**34}

    def reset(index):
        counter["peak"] = counter["in_use"]

    cpu = BACKENDS["cpu"]
    monkeypatch.setitem(BACKENDS, "cpu", dataclasses.replace(cpu, calls=dataclasses.replace(cpu.calls, memory=memory, reset_peak=reset)))
    counter["peak"] = 10 * 2**30  # what an earlier run in this kernel peaked at
    run = wb.train("bert-tiny", wb.dataset("docstrings-topic", limit=64), max_steps=2, batch_size=8, live=False)
    assert run.summary["mem_peak"] == 2**20, "the counter is reset when a run starts"
