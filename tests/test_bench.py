"""The benchmarks run end to end (tiny settings: this checks the harness, not speed)."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("runs_in_tmp")


@pytest.mark.slow
def test_engine_bench_measures_three_ways_side_by_side(tmp_path):
    out = tmp_path / "engine.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "engine", "--json", str(out),
                           "--steps", "2", "--repeats", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert set(result["results"]) == {"raw", "trainer", "workbench"}
    assert all(r["steps_per_s"] > 0 for r in result["results"].values())
    assert set(result["ratios"]) == {"wb_vs_raw", "wb_vs_trainer"}
    assert result["ratios"]["wb_vs_raw"] == pytest.approx(
        result["results"]["workbench"]["steps_per_s"] / result["results"]["raw"]["steps_per_s"])
    assert "wb_vs_raw" in proc.stdout
    # a result brought back from another machine becomes that device's baseline, under a key
    # (the command line's main, in-process: `python -m benchmarks` ran just above)
    from benchmarks.cli import main

    assert main(["engine", "--from-json", str(out), "--save-baseline", "engine-bert-mini"]) == 0
    (saved,) = (tmp_path / "benchmarks" / "baselines").glob("cpu-*.json")
    baseline = json.loads(saved.read_text())["engine-bert-mini"]
    assert baseline["ratios"] == result["ratios"] and "all" not in baseline["results"]["raw"]
    with pytest.raises(SystemExit, match="not 'mfu'"):
        main(["mfu", "--from-json", str(out)])


@pytest.mark.slow
def test_attachment_bench_times_the_same_trainer_with_and_without_wb_attach(tmp_path):
    out = tmp_path / "attachment.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "attachment", "--json", str(out),
                           "--steps", "2", "--repeats", "2", "--warmup", "1", "--model", "gpt2-mini",
                           "--seq-len", "32", "--batch-size", "4"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert set(result["results"]) == {"trainer", "attached"}
    assert all(len(r["all"]) == 2 and r["tokens_per_s"] > 0 for r in result["results"].values())
    assert result["ratios"]["attached_vs_trainer"] == pytest.approx(
        result["results"]["attached"]["tokens_per_s"] / result["results"]["trainer"]["tokens_per_s"])
    assert set(result["figures"]) == {"noise_band", "within_noise"}


@pytest.fixture
def training_args(monkeypatch):
    """Every TrainingArguments the benchmarks build from now on, in order."""
    import transformers

    built = []
    init = transformers.TrainingArguments.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(transformers.TrainingArguments, "__init__", spy)
    return built


@pytest.mark.slow
def test_log_every_zero_leaves_each_engine_its_own_cadence(training_args):
    import transformers

    from benchmarks import engine
    from workbench.training import recipe

    trainer_default = transformers.TrainingArguments(output_dir="x").logging_steps
    training_args.clear()
    result = engine.run(steps=2, warmup=1, repeats=1, log_every=0)
    seen = [a.logging_steps for a in training_args]
    assert result["config"]["log_every"] == 0 and result["ratios"]["wb_vs_trainer"] > 0
    # the plain Trainer at its default, wb.train at its own for a 3-step run
    assert sorted(seen) == sorted([trainer_default, recipe.auto_steps(3)[0]]), seen
    training_args.clear()
    engine.run(steps=2, warmup=1, repeats=1, log_every=2)
    assert [a.logging_steps for a in training_args] == [2, 2]


@pytest.mark.parametrize("bench,args,ratio", [
    ("dashboard", ["--steps", "40", "--repeats", "1"], "overhead_pct"),
    ("scaling", ["--steps", "10", "--repeats", "1"], "2_vs_1"),
])
@pytest.mark.slow
def test_dashboard_and_scaling_benches_run(tmp_path, bench, args, ratio):
    out = tmp_path / f"{bench}.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", bench, "--json", str(out), *args],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert ratio in result["ratios"] and all(
        v.get("steps_per_s", v.get("tokens_per_s", 0)) > 0 for v in result["results"].values())
    if bench == "dashboard":
        assert result["messages"]["per_run"] >= 1 and result["messages"]["max_bytes"] < 2048


@pytest.mark.slow
def test_sdcache_bench_times_images_and_cache_side_by_side_and_counts_sd15_flops():
    pytest.importorskip("diffusers")
    from benchmarks import sdcache

    result = sdcache.run(steps=2, warmup=1, repeats=1, batch_size=8, limit=64)
    assert set(result["results"]) == {"images", "cache"} and all(
        r["steps_per_s"] > 0 and len(r["all"]) == 1 for r in result["results"].values())
    assert result["ratios"]["cache_vs_images"] > 0
    f = result["figures"]
    assert f["build_s"] > 0 and f["load_s"] > 0 and f["cache_mb"] > 0
    # SD 1.5 at 512x512, counted on the meta device: the VAE encoder runs at full pixel size
    assert f["sd15_vae_encoder_gflops"] == pytest.approx(1116.66, rel=1e-3)
    assert f["sd15_unet_forward_gflops"] == pytest.approx(803.27, rel=1e-3)
    assert 0 < f["sd15_frozen_share_full_unet"] < f["sd15_frozen_share_lora"] < 1


@pytest.mark.slow
def test_mfu_bench_times_trainer_and_workbench_on_the_same_blocks(tmp_path):
    out = tmp_path / "mfu.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "mfu", "--model", "gpt2-mini", "--json", str(out),
                           "--seq-len", "64", "--batch-size", "2", "--steps", "2", "--repeats", "1",
                           "--log-every", "1", "--config", "n_layer=2", "--config", "resid_pdrop=0",
                           "--train-arg", "max_grad_norm=0.5"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["results"]) == {"trainer", "workbench"}
    # the overrides reach the model: two of gpt2-mini's four layers, no residual dropout
    assert result["config"]["config_overrides"] == {"n_layer": 2, "resid_pdrop": 0}
    assert result["config"]["train_args"] == {"max_grad_norm": 0.5}
    from benchmarks.contenders import engine_setup

    assert result["config"]["params"] < engine_setup("gpt2-mini")[0].num_params
    assert result["config"]["log_every"] == 1 and result["config"]["seq_len"] == 64
    fpt = result["figures"]["flops_per_token"]
    for r in result["results"].values():
        assert r["tokens_per_s"] > 0 and r["achieved_tflops"] == pytest.approx(fpt * r["tokens_per_s"] / 1e12)
    assert result["ratios"]["workbench_vs_trainer"] == pytest.approx(
        result["results"]["workbench"]["tokens_per_s"] / result["results"]["trainer"]["tokens_per_s"])
    assert "mfu" not in result["ratios"]  # a CPU has no bf16 peak in the table: no made-up MFU


@pytest.mark.slow
def test_mfu_bench_times_the_compiled_trainer_beside_compiled_wb_train(training_args):
    """What compile=True brings beyond torch.compile itself (on a GPU: the mask-free causal
    attention of packed runs), measured against Trainer(torch_compile=True)."""
    from benchmarks import mfu

    result = mfu.run(model="gpt2-mini", device="cpu", steps=1, warmup=1, repeats=1, seq_len=64, batch_size=2,
                 compile=True, contenders=["trainer_compiled", "workbench_compiled"])
    assert [a.torch_compile for a in training_args] == [True, True]
    assert set(result["ratios"]) == {"workbench_compiled_vs_trainer_compiled"}
    assert result["ratios"]["workbench_compiled_vs_trainer_compiled"] == pytest.approx(
        result["results"]["workbench_compiled"]["tokens_per_s"] / result["results"]["trainer_compiled"]["tokens_per_s"])
    assert result["config"]["best"] == "workbench_compiled", "figures are wb.train's, never the Trainer's"


@pytest.mark.slow
def test_mfu_bench_refuses_a_model_that_cannot_be_packed(capsys):
    from benchmarks import mfu
    from benchmarks.cli import main  # `python -m benchmarks` is sys.exit(main()): in-process here

    with pytest.raises(ValueError, match="gpt2-124m"):
        mfu.run(model="bert-mini", device="cpu")
    with pytest.raises(ValueError, match="compiled ways need compile=True"):
        mfu.run(model="gpt2-mini", device="cpu", contenders=["workbench_compiled"])
    for argv, said in ((["engine", "--config", "n_layer=2"], "mfu benchmark only"),
                       (["engine", "--size", "base"], "shapes benchmark only"),
                       (["mfu", "--train-arg", "max_grad_norm"], "--train-arg takes KEY=VALUE")):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2 and said in capsys.readouterr().err, argv


def test_gpu_check_script_stages_are_valid_bench_command_lines():
    """benchmarks/gpu_check.sh runs where no test can (a GPU): at least its syntax and every
    stage's arguments must be right, or the one device run it gets is wasted."""
    import shlex
    from pathlib import Path

    from benchmarks.cli import parser

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text().replace("\\\n", " ")  # join continued lines
    stages = [shlex.split(line)[1:] for line in text.splitlines() if line.startswith("stage ")]
    names = {s[0] for s in stages}
    assert {"mfu", "engine-gpt2-124m", "engine-bert-base", "shapes"} <= names
    default = next(line for line in script.read_text().splitlines() if line.startswith("STAGES="))
    by_default = set(default.split(":-")[1].split("}")[0].split())
    assert by_default <= names, "a misspelt default stage would be skipped without a word"
    opt_in = {"engine-bert-base-defaults", "mfu-recipe", "mfu-compiled", "shapes-base"}
    assert names - by_default == opt_in, "opt-in stages, said so in the script"
    for name, limit, *args in stages:
        ns = parser().parse_args([*args, "--json", f"{name}.json"])
        assert int(limit) > 0 and ns.bench in ("engine", "mfu", "shapes")
        if ns.bench != "shapes":
            assert ns.precision == "bf16" and ns.model in ("gpt2-124m", "bert-base")


def test_shapes_bench_base_size_uses_bert_base_and_gpt2_124m_shapes():
    from benchmarks import shapes

    base = shapes.bench_models("base")
    assert base["gpt2"].num_params == 124_439_808  # GPT-2-124M, as in the mfu benchmark
    assert base["bert"].config().hidden_size == 768 and base["bert"].config().num_hidden_layers == 12
    assert shapes.bench_models("tiny")["bert"].num_params < 5_000_000
    with pytest.raises(ValueError, match="size must be 'tiny' or 'base'"):
        shapes.run(size="huge")


@pytest.mark.slow
def test_shapes_bench_smoke_run_has_the_documented_keys():
    from benchmarks import shapes

    result = shapes.run(steps=2, repeats=1, warmup=0, device="cpu")
    assert result["bench"] == "shapes" and result["device"]["kind"] == "cpu" and result["config"]["size"] == "tiny"
    assert {"config", "results", "ratios", "figures", "tradeoff"} <= set(result)
    assert {"bucketed_vs_max_length", "bucketed_vs_longest", "packed_vs_max_length"} <= set(result["ratios"])
    assert {"bucketed_waste_pct", "bucketed_shapes", "packed_waste_pct"} <= set(result["figures"])
    assert {"bert/max_length", "bert/longest", "bert/bucketed", "gpt2/packed"} <= set(result["results"])
    for r in result["results"].values():
        assert r["useful_tokens_per_s"] > 0 and 0 <= r["waste_pct"] < 100 and r["shapes"] >= 1
    assert result["figures"]["bucketed_shapes"] <= 8 and result["figures"]["packed_waste_pct"] < 1
    assert result["ratios"]["bucketed_vs_max_length"] == pytest.approx(
        result["results"]["bert/bucketed"]["useful_tokens_per_s"]
        / result["results"]["bert/max_length"]["useful_tokens_per_s"])
    assert [row["k"] for row in result["tradeoff"]] == [4, 8, 16, 32]


def test_raw_loop_counts_non_pad_tokens_and_starts_a_new_epoch_when_one_ends():
    """The one raw loop every benchmark times: forward, backward, AdamW, over an endless
    loader; a batch sampler hears of each new epoch (so it reshuffles)."""
    import torch

    from benchmarks.contenders import RawLoop
    from workbench.backends.registry import device

    class Sampler:
        def __init__(self):
            self.epochs = []

        def set_epoch(self, epoch):
            self.epochs.append(epoch)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, input_ids, attention_mask):
            return type("Out", (), {"loss": (self.w * input_ids.float()).mean()})()

    masks = [torch.tensor([[1, 1, 0], [1, 0, 0]]), torch.tensor([[1, 1, 1], [1, 1, 0]])]
    loader = [{"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": m} for m in masks]
    model, sampler = Model(), Sampler()
    loop = RawLoop(model, loader, device("cpu"), "fp32", sampler=sampler)
    assert [loop.step() for _ in range(3)] == [3, 5, 3]
    assert loop.epoch == 1 and sampler.epochs == [1]
    assert model.w.item() < 1, "the optimizer stepped"
    useful, seconds = loop.timed(2)
    assert useful == 8 and seconds > 0


def test_interleaved_chunks_rotate_the_order_and_time_every_step():
    from benchmarks.contenders import interleaved_chunks

    calls = []

    class Loop:
        def __init__(self, name):
            self.name = name

        def timed(self, steps):
            calls.append((self.name, steps))
            return 10 * steps, 0.5

    acc = interleaved_chunks({"a": Loop("a"), "b": Loop("b"), "c": Loop("c")}, steps=12, chunk=5)
    assert calls == [("a", 5), ("b", 5), ("c", 5), ("b", 5), ("c", 5), ("a", 5), ("c", 2), ("a", 2), ("b", 2)]
    assert acc == {k: (120, 1.5) for k in "abc"}


@pytest.mark.slow
def test_the_package_keeps_its_names_and_command_line():
    import benchmarks
    from benchmarks import cli
    from benchmarks.contenders import SHAPES

    assert set(cli.BENCHES) == {"attachment", "engine", "dashboard", "scaling", "shapes", "mfu", "plan", "prompts", "sdcache",
                                "gaudi-counts"}
    # each benchmark is its module's `run`: the package's names stay modules (STYLE rule 1)
    for name, bench in cli.BENCHES.items():
        module = importlib.import_module(f"benchmarks.{name.replace('-', '')}")
        assert bench is module.run and inspect.ismodule(getattr(benchmarks, name.replace("-", "")))
    assert "gpt2-124m" in SHAPES
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "engine --json out.json" in proc.stdout


@pytest.mark.slow
def test_prompts_bench_scores_a_trained_run_from_its_directory(tmp_path):
    """``prompts --run RUN_DIR``: prompt_accuracy of a run already trained, as a bench result
    (notebook 06 scores its run so); one tiny step of SD, one sample per digit, one DDIM step."""
    pytest.importorskip("diffusers")
    pytest.importorskip("sklearn")
    import workbench as wb
    from benchmarks.prompts import prompt_accuracy

    run = wb.train(wb.model("sd"), wb.dataset("digits-captioned", limit=32), max_steps=1, batch_size=8,
                   live=False)
    assert run.status == "completed", run.summary.get("error")
    out = tmp_path / "prompts.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "prompts", "--run", str(run.path),
                           "--per-digit", "1", "--sample-steps", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["bench"] == "prompts" and result["device"]["kind"] == "cpu"
    assert result["config"] | {"run": None} == {"run": None, "steps": 1, "per_digit": 1, "sample_steps": 1,
                                                 "guidance": 7.5, "seed": 0}
    score = result["results"][run.name]
    assert score == {**prompt_accuracy(wb.Run.open(run.path), per_digit=1, steps=1), "run": str(run.path)}
    assert 0 <= score["accuracy"] <= 1 and len(score["per_digit"]) == 10 and score["reader_accuracy"] > 0.9
    assert result["figures"]["accuracy"] == score["accuracy"]
    assert "accuracy_vs_chance" in proc.stdout


def test_bench_options_that_apply_to_other_benchmarks_are_refused(monkeypatch, capsys):
    from benchmarks import cli

    for argv, message in [(["engine", "--run", "runs/x"], "prompts benchmark only"),
                          (["prompts", "--run", "runs/x", "--steps", "3"], "--run scores a trained run"),
                          (["plan", "--warmup", "1"], "--warmup applies to attachment, engine, gaudi-counts, dashboard, shapes")]:
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err, argv
    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        return {"bench": "engine", "device": {"kind": "cpu", "name": "cpu"}, "results": {}, "ratios": {}}

    monkeypatch.setitem(cli.BENCHES, "engine", fake)
    assert cli.main(["engine", "--warmup", "0", "--steps", "3"]) == 0
    assert seen == {"device": "auto", "warmup": 0, "steps": 3}, "--warmup 0 is no warm-up, not the default"
    # an option the benchmark has no argument for: named, before anything runs (it was a
    # TypeError after the imports); --seq-len is the shapes benchmark's max_length
    with pytest.raises(SystemExit) as exit_:
        cli.main(["prompts", "--seq-len", "64"])
    assert exit_.value.code == 2 and "--seq-len does not apply to the prompts benchmark" in capsys.readouterr().err

    def shapes(steps=30, device="auto", max_length=128):
        seen.clear()
        seen.update(steps=steps, device=device, max_length=max_length)
        return {"bench": "shapes", "device": {"kind": "cpu", "name": "cpu"}, "results": {}, "ratios": {}}

    monkeypatch.setitem(cli.BENCHES, "shapes", shapes)
    assert cli.main(["shapes", "--seq-len", "64", "--steps", "3"]) == 0
    assert seen == {"device": "auto", "max_length": 64, "steps": 3}
