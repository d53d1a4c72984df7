"""Gaudi specifics, against the Habana bridge TEST DOUBLE in tests/fakes (no Gaudi here).

These prove the workbench calls the documented API as documented: execution modes,
FusedAdamW, FusedClipNorm, the recompile counter, the recipe cache and HPU graphs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import workbench as wb
from workbench import callbacks, recipe, trainer
from workbench.device import set_hpu_mode


def _args(**over):
    a = {"precision": "auto", "mode": None, "compile": None, "batch_size": 8, "lr": 1e-3, "max_steps": 10,
         "epochs": None, "log_every": 2, "eval_every": None, "save_every": 10, "seed": 0, "report_to": None,
         "trainer_overrides": {}}
    a.update(over)
    return a


def test_eager_mode_compiles_with_hpu_backend_in_bf16(fake_hpu, tmp_path):
    dev = wb.device("hpu")
    targs = recipe.training_arguments(_args(), dev, "causal_lm", tmp_path, "adamw_torch")
    assert targs["bf16"] and not targs["fp16"] and not targs["use_cpu"]
    assert targs["torch_compile"] and targs["torch_compile_backend"] == "hpu_backend"
    assert not recipe.training_arguments(_args(mode="eager"), dev, "causal_lm", tmp_path, "x")["torch_compile"]


def test_lazy_mode_is_chosen_before_the_bridge_loads_and_fixed_after(fake_hpu, monkeypatch):
    monkeypatch.delenv("PT_HPU_LAZY_MODE", raising=False)
    set_hpu_mode("lazy")
    assert os.environ["PT_HPU_LAZY_MODE"] == "1"
    dev = wb.device("hpu")  # loads the bridge
    assert dev.mode == "lazy"
    set_hpu_mode("lazy")  # same mode: fine
    with pytest.raises(RuntimeError, match="already loaded in lazy mode.*restart the kernel"):
        set_hpu_mode("eager")
    with pytest.raises(ValueError, match="unknown mode 'turbo'; known: eager, lazy, compile"):
        set_hpu_mode("turbo")


def test_lazy_mode_adds_mark_step_and_hpu_graphs(fake_hpu, monkeypatch):
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1")
    dev = wb.device("hpu")
    from habana_frameworks.torch.core import MARK_STEPS
    from habana_frameworks.torch.hpu.graphs import WRAPPED

    cb = callbacks.MarkStep(dev)
    before = MARK_STEPS[0]
    cb.on_pre_optimizer_step(None, None, None)
    cb.on_optimizer_step(None, None, None)
    assert MARK_STEPS[0] == before + 2, "after backward and after the optimizer step"
    net = torch.nn.Linear(2, 2)
    from workbench.device import inference_model

    # importing from the module `workbench.device` leaves `wb.device` the function
    assert isinstance(wb.device("hpu"), wb.DeviceInfo)
    assert inference_model(net, dev) is net and WRAPPED[-1] is net
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "0")
    other = torch.nn.Linear(2, 2)
    inference_model(other, wb.device("hpu"))
    assert WRAPPED[-1] is not other, "no HPU graphs in eager mode"


def test_fused_adamw_and_fused_clip_norm(fake_hpu):
    dev = wb.device("hpu")
    from habana_frameworks.torch.hpex.normalization import CALLS
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW

    net = torch.nn.Linear(4, 4)
    net.to = lambda *a, **k: net  # the test double has no "hpu" torch device to move to
    optim, opt = trainer._optimizer(dev, net, 1e-3, {})
    assert isinstance(opt, FusedAdamW) and opt.defaults["eps"] == 1e-8, "Trainer's eps, not the bridge's 1e-6"
    clip = callbacks.FusedClip(net, 1.0)
    net(torch.randn(3, 4)).pow(2).sum().mul(1e3).backward()
    clip.on_pre_optimizer_step(None, None, None)
    assert CALLS and CALLS[-1] > 1.0 and clip.norm is not None
    total = torch.sqrt(sum(p.grad.pow(2).sum() for p in net.parameters()))
    assert float(total) == pytest.approx(1.0, rel=1e-4), "gradients clipped to max_norm"


def test_recompile_counter_feeds_the_compiles_event(fake_hpu):
    dev = wb.device("hpu")
    from habana_frameworks.torch.hpu.metrics import fake_compile

    start = dev.compiles()
    fake_compile(3)
    assert dev.compiles() == start + 3
    assert wb.device("cpu").compiles() is None


def test_recipe_cache_is_configured_before_the_bridge_loads(fake_env, tmp_path):
    env = {**fake_env, "WORKBENCH_CACHE": str(tmp_path)}
    env.pop("PT_HPU_RECIPE_CACHE_CONFIG", None)
    code = "import os, workbench as wb; wb.device(); print(os.environ['PT_HPU_RECIPE_CACHE_CONFIG'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{tmp_path / 'hpu-recipes'},false,4096"


def test_lazy_mode_is_refused_off_gaudi(monkeypatch):
    monkeypatch.delenv("PT_HPU_LAZY_MODE", raising=False)
    with pytest.raises(ValueError, match="mode='lazy' is Gaudi's graph mode; this run is on cpu"):
        wb.train("gpt2-tiny", "docstrings-lm", max_steps=1, mode="lazy", live=False)
    assert "PT_HPU_LAZY_MODE" not in os.environ, "the failed request leaves the environment as it was"
