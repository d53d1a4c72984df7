"""Training through the public API on the emulated Gaudi (tests/fakes), nothing switched off.

Each test runs its checks in one fresh process (fixture ``on_hpu``, tests/emulated_hpu.py):
transformers and accelerate detect the double's HPU and take their HPU branches, the model's
parameters live on ``hpu:0`` and every op runs through torch's dispatcher on the emulated
device (tests/fakes/README.md says what it cannot show).
"""

import subprocess
import sys

import pytest
from emulated_hpu import FAKES, environment

DONE = ("import torch, habana_frameworks.torch; x = torch.ones(2, device='hpu'); "
        "print(x.device, (x * 2).sum().item())")


@pytest.mark.slow
def test_an_hpu_tensor_exists_with_the_double_and_not_without(tmp_path):
    env = environment(tmp_path)
    with_double = subprocess.run([sys.executable, "-c", DONE], env=env, capture_output=True,
                                 text=True, timeout=900)
    assert with_double.stdout.strip().splitlines()[-1] == "hpu:0 4.0", with_double.stderr
    env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(FAKES), "")
    without = subprocess.run([sys.executable, "-c", DONE], env=env, capture_output=True,
                             text=True, timeout=300)
    assert without.returncode and "No module named 'habana_frameworks'" in without.stderr


def test_eager_and_compile_train_bert_and_packed_gpt2_on_hpu(on_hpu):
    """Eager (BERT) and compile (GPT-2, packed) with gradient accumulation, evaluation and
    bf16: the Trainer's device is hpu:0, the parameters are there, the allocator counted
    them, hpu_backend compiled, and no mark_step ran."""
    out = on_hpu("""
        import torch, workbench as wb
        bert = train("bert-tiny", wb.dataset("docstrings-topic", limit=64), mode="eager",
                     gradient_accumulation_steps=2, eval_every=1, precision="bf16")
        out["bert"] = placed(bert)
        out["bert_bf16"] = bert.trainer.args.bf16
        gpt2 = train("gpt2-tiny", mode="compile", padding="packed", gradient_accumulation_steps=2,
                     eval_every=1, precision="bf16")
        out["gpt2"] = placed(gpt2)
        out["backend"] = gpt2.trainer.args.torch_compile_backend
        from habana_frameworks.torch.core import COMPILED
        out["compiled"] = len(COMPILED)
        out["peak"] = torch.hpu.max_memory_allocated()
        out["marks"] = marks("")
        out["evals"] = sum(1 for e in gpt2.events if "eval_loss" in e)
    """)
    for name in ("bert", "gpt2"):
        assert out[name]["args_device"] == "hpu:0" and out[name]["params"] == ["hpu:0"], out
    assert out["bert_bf16"] and out["backend"] == "hpu_backend" and out["compiled"] > 0
    assert out["peak"] > 0 and out["marks"] == 0 and out["evals"] >= 1


def test_lazy_mode_trains_on_hpu_with_a_mark_step_after_each_backward(on_hpu):
    out = on_hpu("""
        import workbench as wb
        run = train("gpt2-tiny", mode="lazy", max_steps=2, gradient_accumulation_steps=2,
                    eval_every=2, precision="bf16")
        out["gpt2"] = placed(run)
        out["gpt2_marks"] = marks()
        bert = train("bert-tiny", wb.dataset("docstrings-topic", limit=64), mode="lazy")
        out["bert"] = placed(bert)
        from habana_frameworks.torch.utils.internal import is_lazy
        out["lazy"] = is_lazy()
    """)
    assert out["lazy"] is True
    for name in ("bert", "gpt2"):
        assert out[name]["args_device"] == "hpu:0" and out[name]["params"] == ["hpu:0"], out
    assert out["gpt2_marks"] >= 2 * 2 + 2, "a mark_step after each backward and each step"


def test_t5_llama_lora_and_tiny_sd_train_on_hpu(on_hpu):
    """T5 (bf16, accumulation, evaluation), Llama with LoRA (the adapters on the device too)
    and tiny SD with cached latents and sample grids, each on hpu:0. SD's convolutions reach
    the device through ``convolution_overrideable`` (the double runs them on host copies)."""
    out = on_hpu("""
        import workbench as wb
        t5 = train(wb.model("t5"), wb.dataset("docstrings-summary", limit=32), mode="eager",
                   precision="bf16", eval_every=1, gradient_accumulation_steps=2)
        out["t5"] = placed(t5)
        lora = train(wb.model("llama", lora={"r": 4}), mode="eager", precision="bf16")
        out["lora"] = placed(lora)
        out["adapters"] = sorted({str(p.device) for p in lora.trainer.model.parameters()
                                  if p.requires_grad})
        sd = train(wb.model("sd"), wb.dataset("digits-captioned", limit=32), mode="eager",
                   batch_size=4, cache_latents=True, sample_prompts=["a handwritten seven"],
                   sample_every=1, sample_steps=2)
        out["sd"] = placed(sd)
        out["grids"] = [e["step"] for e in sd.events if e["phase"] == "samples"]
    """)
    for name in ("t5", "lora", "sd"):
        assert out[name]["args_device"] == "hpu:0" and out[name]["params"] == ["hpu:0"], out
    assert out["adapters"] == ["hpu:0"] and out["grids"] == [1, 2]


@pytest.mark.parametrize("release", ["current", "1.19"])
def test_a_lazy_launch_from_an_eager_kernel_trains_lazy_in_its_workers(on_hpu, release):
    """A kernel whose bridge loaded eager (on current bridges `import torch` loads it) cannot
    switch to lazy mode, and ``wb.train(mode="lazy")`` there names the fixes; but
    ``wb.launch(mode="lazy")`` trains: its workers are new processes, started with the mode
    in their environment before their bridge loads."""
    out = on_hpu("""
        import json, torch
        import workbench as wb
        out["kernel"] = wb.device("hpu").mode
        try:
            train(mode="lazy")
        except RuntimeError as e:
            out["train"] = str(e)
        run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), devices=1,
                        device="hpu", mode="lazy", max_steps=2, batch_size=2, max_length=32,
                        log_every=1, live=False)
        out["status"] = [run.status, run.summary.get("error")]
        out["ranks"] = [json.loads(p.read_text()) for p in sorted((run.path / "ranks").glob("*"))]
        out["after"] = wb.device("hpu").mode
    """, FAKE_HPU_RELEASE=release)
    assert out["kernel"] == "eager" and out["after"] == "eager"
    assert "wb.launch(model, data, devices=1, mode='lazy')" in out["train"]
    assert out["status"] == ["completed", None], out["status"]
    assert [r["hpu_mode"] for r in out["ranks"]] == ["lazy"]
    assert out["ranks"][0]["params_device"] == "hpu:0"


def test_fp16_on_gaudi_trains_and_says_what_its_scaler_costs(on_hpu):
    """fp16 runs on Gaudi 2 (the chip table allows it), with torch's GradScaler, whose two
    ops have no HPU kernel in the bridge's 1.19 op table (scripts/ops_list/ops_table.csv:
    `_amp_update_scale_`, `_amp_foreach_non_finite_check_and_unscale_`): the bridge runs
    them through its CPU fallback (hpu_ops/cpu_fallback.cpp), so the run trains and the
    workbench says so, naming bf16."""
    out = on_hpu("""
        import warnings
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            run = train(precision="fp16", max_steps=2)
        out["said"] = [str(w.message) for w in said if "GradScaler" in str(w.message)]
        out["placed"] = placed(run)
        out["precision"] = run.spec.args.precision
    """)
    assert out["precision"] == "fp16" and out["placed"]["params"] == ["hpu:0"]
    assert len(out["said"]) == 1 and "precision='bf16'" in out["said"][0]
