"""Gaudi specifics, against the strict Habana bridge TEST DOUBLE in tests/fakes (no Gaudi here).

Every rule of the double cites the bridge's source (tests/fakes/README.md, docs/gaudi.md).
The tests go through ``wb.train``, ``wb.launch``, ``wb.profile``, ``wb.device``,
``wb.plan_memory`` and the modules' own functions. Runs that put tensors on the device go
to the double's emulated ``hpu`` in a fresh process (fixture ``on_hpu``,
tests/emulated_hpu.py): there transformers and accelerate take their HPU branches, the
Trainer's device is ``hpu:0`` and the parameters are on it. Tests that only ask the Python
API (fixture ``hpu``) run in this process without the device (tests/fakes/README.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import workbench as wb
from workbench.backends import _bridge as _hpu
from workbench.backends.chips import CHIPS, GiB
from workbench.backends.hpu import set_hpu_mode
from workbench.backends.registry import inference_model
from workbench.runargs import RunArgs
from workbench.training import recipe, trainer

BRIDGE_VARS = ("PT_HPU_LAZY_MODE", "PT_HPU_RECIPE_CACHE_CONFIG", "HLS_MODULE_ID", "ID")


@pytest.fixture
def hpu(fake_hpu, monkeypatch):
    """The double, with the variables the bridge and the workbench set restored afterwards."""
    for name in BRIDGE_VARS:
        monkeypatch.setenv(name, "-")  # recorded, so that teardown removes what a test set
        monkeypatch.delenv(name)
    return fake_hpu


# ----------------------------------------------------------------------------- (1) device index
def test_each_rank_drives_device_0_and_hpu_1_is_refused(on_hpu):
    """Under torchrun every rank uses index 0: the bridge picks the card from LOCAL_RANK
    (HLS_MODULE_ID) when it loads, and its device guard fails for any other index, here on
    real tensors of the emulated device."""
    out = on_hpu("""
        import os, torch, workbench as wb
        from types import SimpleNamespace
        from workbench.training import engine
        dev = engine._device_for(SimpleNamespace(args=SimpleNamespace(device="hpu")), 2)  # loads the bridge, as rank 1
        out["dev"] = [dev.kind, dev.index, dev.torch_device, os.environ["HLS_MODULE_ID"]]
        out["placed"] = str(next(torch.nn.Linear(2, 2).to(dev.torch_device).parameters()).device)
        try:
            torch.nn.Linear(2, 2).to("hpu:1")
        except RuntimeError as e:
            out["hpu1"] = str(e)
        try:
            wb.device("hpu:1")
        except ValueError as e:
            out["wb_hpu1"] = str(e)
    """, LOCAL_RANK="1", RANK="1", WORLD_SIZE="2")
    assert out["dev"] == ["hpu", 0, "hpu:0", "1"], "the bridge chose rank 1's card from LOCAL_RANK"
    assert out["placed"] == "hpu:0"
    assert "habana active device: 1 != 0" in out["hpu1"]
    assert "hpu:1: each process drives one Gaudi, index 0" in out["wb_hpu1"]


# ----------------------------------------------------------------------------- (2) mode
def test_unset_lazy_mode_is_set_before_the_bridge_loads(hpu):
    """An unset PT_HPU_LAZY_MODE means lazy to a 1.19 bridge and eager to current ones: the
    workbench sets it (eager) before the bridge loads, and reads the mode back from it."""
    from workbench.backends._bridge import bridge

    assert "PT_HPU_LAZY_MODE" not in os.environ and bridge.cache_info().currsize == 0
    dev = wb.device("hpu")
    from habana_frameworks.torch.utils.internal import is_lazy

    assert os.environ["PT_HPU_LAZY_MODE"] == "0"
    assert not is_lazy() and dev.mode == "eager"


@pytest.mark.parametrize("value", ["1", "true"])
def test_mode_is_read_back_from_the_bridge_never_from_the_variable(hpu, monkeypatch, value):
    """The bridge reads the variable once (anything but "0" is lazy) and keeps its answer;
    the workbench trusts ``is_lazy()``, and asking for another mode later says to restart
    before importing torch (current bridges load with torch)."""
    monkeypatch.setenv("PT_HPU_LAZY_MODE", value)
    import habana_frameworks.torch  # noqa: F401  (user code or another library loads the bridge)

    monkeypatch.setenv("PT_HPU_LAZY_MODE", "0")  # too late: the mode is fixed
    dev = wb.device("hpu")
    assert dev.mode == "lazy"
    set_hpu_mode("lazy")  # the mode it has: fine
    with pytest.raises(RuntimeError, match=r"already loaded in lazy mode.*restart the kernel.*before importing torch"):
        set_hpu_mode("eager")
    with pytest.raises(ValueError, match="unknown mode 'turbo'; known: eager, lazy, compile"):
        set_hpu_mode("turbo")


def test_the_mode_set_for_a_probe_stays_only_where_the_probe_loaded_the_bridge(hpu, monkeypatch):
    """``mode_for_probe``, the one place the mode is set for a device probe (wb.train's and
    GaudiTrainingArguments'): a probe that fails or loads no bridge leaves the variable as it
    found it, unset or the user's; one that loads the bridge keeps the mode it loaded in."""
    from workbench.backends.hpu import mode_for_probe

    with pytest.raises(ValueError, match="no device here"):
        with mode_for_probe("lazy"):
            assert os.environ["PT_HPU_LAZY_MODE"] == "1"
            raise ValueError("no device here")
    assert "PT_HPU_LAZY_MODE" not in os.environ
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1")
    with mode_for_probe("eager"):
        assert os.environ["PT_HPU_LAZY_MODE"] == "0"  # e.g. the probe found a GPU: no bridge
    assert os.environ["PT_HPU_LAZY_MODE"] == "1", "the user's value is back"
    with pytest.raises(ValueError, match="unknown mode 'turbo'"):
        with mode_for_probe("turbo"):
            pass
    assert os.environ["PT_HPU_LAZY_MODE"] == "1"
    with mode_for_probe("eager"):
        dev = wb.device("hpu")  # loads the bridge, which reads the variable as it loads
    assert dev.mode == "eager" and os.environ["PT_HPU_LAZY_MODE"] == "0", "kept: the bridge's mode"
    with mode_for_probe(None):
        pass
    with pytest.raises(RuntimeError, match="already loaded in eager mode"):
        with mode_for_probe("lazy"):
            pass
    assert os.environ["PT_HPU_LAZY_MODE"] == "0"


# What `import torch` does with PT_HPU_LAZY_MODE unset, "0" and "1": current bridges load
# unless lazy mode is asked for (autoload/__init__.py @ ea38cef, default "0"); 1.19 loads only
# when eager mode is asked for (@ 5a56187, default "1").
AUTOLOADS = {"current": {None: True, "0": True, "1": False},
             "1.19": {None: False, "0": True, "1": False}}


@pytest.mark.slow
@pytest.mark.parametrize("release", ["current", "1.19"])
def test_import_torch_autoloads_the_bridge_unless_lazy_mode_is_asked_for(fake_env, release):
    """Through the ``torch.backends`` entry point the bridge loads on ``import torch`` (the
    double is a dist-info on the path with the same entry point): the mode must be chosen
    before torch is imported, and asking for another one afterwards names the fixes."""
    code = ("import sys, torch; from workbench.backends.hpu import set_hpu_mode; "
            "print('loaded' if 'habana_frameworks.torch' in sys.modules else 'not loaded'); "
            "set_hpu_mode('lazy')")
    for value, loaded in AUTOLOADS[release].items():
        env = {k: v for k, v in fake_env.items() if k != "PT_HPU_LAZY_MODE"}
        env.update({"FAKE_HPU_RELEASE": release, **({} if value is None else {"PT_HPU_LAZY_MODE": value})})
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == ("loaded" if loaded else "not loaded"), (value, out.stderr[-2000:])
        assert (out.returncode != 0) == loaded, (value, out.stderr[-2000:])
        if loaded:
            assert "before importing torch" in out.stderr
            assert "wb.launch(model, data, devices=1, mode='lazy')" in out.stderr


@pytest.mark.slow
def test_lazy_mode_refuses_a_stock_torch_on_every_release(fake_env):
    """Both bridges load their lazy plugin only with Intel's torch build (a local version
    starting "git" or "hpu": torch/__init__.py @ ea38cef; "git": the same file's lines 41-48 @
    5a56187, the 1.19 release). The CPU torch here is stock: the fixtures mark it as Intel's
    (FAKE_HPU_INTEL_TORCH=1), as the container's is; without the mark the bridge refuses lazy
    mode, and the workbench says why."""
    code = ("import workbench as wb\ntry:\n    wb.device('hpu')\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)\nelse:\n    print('ok', wb.device('hpu').mode)")
    seen = {}
    for release in ("current", "1.19"):
        env = {k: v for k, v in fake_env.items() if k != "FAKE_HPU_INTEL_TORCH"}
        env.update(FAKE_HPU_RELEASE=release, PT_HPU_LAZY_MODE="1", FAKE_HPU_DEVICE="0")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        seen[release] = out.stdout.strip()
    for release in ("current", "1.19"):
        said = seen[release]
        assert said.startswith("RuntimeError") and "Stock PyTorch version" in said, (release, said)
        assert "the container's torch" in said or "Intel's container" in said, (release, said)


def test_hpu_graphs_import_in_every_mode_and_capture_only_in_lazy_mode(hpu, monkeypatch):
    """Current bridges import ``hpu.graphs`` in every mode and refuse ``HPUGraph()`` outside
    lazy mode (hpu/__init__.py and hpu/graphs.py @ ea38cef); 1.19 exports them only in lazy
    mode (test_no_hpu_graphs_in_eager_mode_on_1_19)."""
    dev = wb.device("hpu")
    assert dev.mode == "eager"
    from habana_frameworks.torch.hpu import HPUGraph, wrap_in_hpu_graph

    with pytest.raises(RuntimeError, match="HPUGraph class is available in lazy mode only"):
        HPUGraph()
    wrapped = wrap_in_hpu_graph(torch.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="lazy mode only"):
        wrapped(torch.ones(1, 2))
    net = torch.nn.Linear(2, 2)
    assert inference_model(net, dev) is net, "the workbench wraps nothing outside lazy mode"


@pytest.mark.parametrize("fields, current, old", [
    ("{path},false,4096", True, True),
    ("{path},false,4096,false", True, False),
    ("{path},false,4096,false,x", False, False),
])
@pytest.mark.slow
def test_the_recipe_cache_variable_takes_four_fields_on_current_bridges(fake_env, tmp_path, fields,
                                                                          current, old):
    """``PT_HPU_RECIPE_CACHE_CONFIG``: current bridges add <RECIPE_CACHE_ON_NFS> (four fields);
    1.19 asserts 1 to 3 (recipe_cache_config.cpp @ 5a56187). The workbench writes three, which
    both read."""
    value = fields.format(path=tmp_path / "cache")
    code = "import habana_frameworks.torch._recipe_cache_config as c; print(c.PATH)"
    for release, accepted in (("current", current), ("1.19", old)):
        env = {**fake_env, "FAKE_HPU_RELEASE": release, "FAKE_HPU_DEVICE": "0",
               "PT_HPU_LAZY_MODE": "0", "PT_HPU_RECIPE_CACHE_CONFIG": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert (out.returncode == 0) == accepted, (release, value, out.stderr[-1500:])
        if accepted:
            assert out.stdout.strip() == str(tmp_path / "cache")


def test_lazy_mode_is_refused_off_gaudi(monkeypatch):
    monkeypatch.delenv("PT_HPU_LAZY_MODE", raising=False)
    with pytest.raises(ValueError, match="mode='lazy' is Gaudi's graph mode; this run is on cpu"):
        wb.train("gpt2-tiny", "docstrings-lm", max_steps=1, mode="lazy", live=False)
    assert "PT_HPU_LAZY_MODE" not in os.environ, "the failed request leaves the environment as it was"


# ----------------------------------------------------------------------------- (3) mark_step
def test_lazy_mode_marks_every_backward_the_optimizer_step_and_each_eval_step(on_hpu):
    """Lazy mode, gradient accumulation and evaluation through ``wb.train`` on hpu:0: one
    mark_step after every backward (accumulation micro-steps too), one after the optimizer
    step and one after each evaluation step, as optimum-habana's trainer places them;
    FusedAdamW adds its own (before each parameter group and after the step). The spy imports
    transformers, so torch, first: on current bridges lazy mode is then asked for before Python
    starts (PT_HPU_LAZY_MODE=1), as a script that imports torch first must."""
    out = on_hpu("""
        spy = Spy()
        run = train(mode="lazy", max_steps=3, gradient_accumulation_steps=2, eval_every=2,
                    callbacks=[spy.callback])
        out.update(placed=placed(run), seen=spy.seen, workbench=marks(),
                   fused=marks("habana_frameworks.torch.hpex"))
        # HPU graphs (lazy mode only): an inference model goes to the device and is wrapped
        import torch, workbench as wb
        from habana_frameworks.torch.hpu.graphs import WRAPPED
        from workbench.backends import _bridge
        from workbench.backends.registry import inference_model
        net = torch.nn.Linear(2, 2).train()
        same = inference_model(net, wb.device("hpu")) is net
        module, where, kw = WRAPPED[-1]
        out["graphs"] = [same, net.training, module is net, str(where),
                         str(net.weight.device), kw["max_graphs"] == _bridge.MAX_HPU_GRAPHS]
    """, PT_HPU_LAZY_MODE="1")
    assert out["placed"]["args_device"] == "hpu:0" and out["placed"]["params"] == ["hpu:0"]
    events = [name for name, _ in out["seen"]]
    assert events.count("on_substep_end") == 3 and events.count("on_optimizer_step") == 3
    assert events.count("on_prediction_step") >= 2, "evaluation at step 2 and at the end"
    before = 0
    for name, count in out["seen"]:
        assert count == before + 1, f"exactly one mark_step before the callbacks of {name}"
        before = count
    assert out["workbench"] == len(out["seen"]), "and no other mark_step from the workbench"
    assert out["fused"] == 3 * (2 + 1), "FusedAdamW: 2 groups + 1, per step"
    same, training, wrapped, where, weights, bounded = out["graphs"]
    assert same and not training and wrapped and where.startswith("hpu") and bounded
    assert weights == "hpu:0", "the inference model is on the device"


def test_eager_and_compile_runs_on_hpu(on_hpu):
    """One eager-mode process, five runs on hpu:0 through ``wb.train`` and ``wb.profile``:

    - compile mode on bucketed batches: the compile backend is the bridge's, mark_step never
      runs, and dynamo may keep a graph for every training and evaluation shape (+2);
    - FusedAdamW gets the Trainer's decay / no-decay groups (biases and norm weights
      undecayed) and betas, eps and weight decay from the TrainingArguments (never the
      bridge's eps default, 1e-6);
    - one gradient norm per step: transformers 5.24 computes it at every optimizer step (with
      max_grad_norm 0 it still calls clip_grad_norm_(..., inf)); no FusedClipNorm on top;
    - the compile count (one per new input signature, as the bridge recompiles per shape)
      stays flat on static shapes (tiny SD: one resolution, captions padded to the encoder's
      length) and rises with per-batch padding;
    - ``wb.profile`` asks for CPU and HPU activity in the enum the bridge put in place of
      torch's (the 1.19 bridge replaces ``ProfilerActivity`` as it loads, and the double does
      too: ``activity_profiler.py``), and the trace is written in the run directory.
    """
    out = on_hpu("""
        import warnings
        import torch, torch._dynamo, workbench as wb
        from transformers import TrainerCallback
        during = []

        class Limit(TrainerCallback):  # dynamo's limit while the run trains
            def on_step_end(self, *a, **k):
                during.append(torch._dynamo.config.recompile_limit)

        with torch._dynamo.config.patch(recompile_limit=8):
            run = train("bert-tiny", wb.dataset("docstrings-topic", limit=120), mode="compile",
                        padding="bucketed", buckets=4, max_length=64, callbacks=[Limit()])
            out["limit"] = [min(during), torch._dynamo.config.recompile_limit]
        from habana_frameworks.torch.core import COMPILED
        out["compile"] = [run.trainer.args.torch_compile, run.trainer.args.torch_compile_backend,
                          len(COMPILED), marks(""), placed(run)]
        out["shapes"] = len(run.trainer.data_collator.inner.boundaries)

        norms = []
        real = torch.nn.utils.clip_grad_norm_
        torch.nn.utils.clip_grad_norm_ = lambda *a, **k: norms.append(1) or real(*a, **k)
        run = train(mode="eager", max_steps=3, weight_decay=0.1, adam_beta1=0.8,
                    adam_beta2=0.95, adam_epsilon=1e-7)
        torch.nn.utils.clip_grad_norm_ = real
        from habana_frameworks.torch.hpex.normalization import CALLS
        from habana_frameworks.torch.hpex.optimizers import CREATED, FusedAdamW
        opt = CREATED[-1]
        model = run.trainer.model
        names = {id(p): n for n, p in model.named_parameters()}  # tied: its first name
        decay = set(run.trainer.get_decay_parameter_names(model)) & set(names.values())
        groups = {g["weight_decay"]: sorted(names[id(p)] for p in g["params"])
                  for g in opt.param_groups}
        out["fused"] = {"type": type(opt) is FusedAdamW,
                        "wrapped": run.trainer.optimizer.optimizer is opt,
                        "groups": groups, "decay": sorted(decay), "all": sorted(names.values()),
                        "betas_eps": [[list(g["betas"]), g["eps"]] for g in opt.param_groups],
                        "placed": placed(run)}
        out["norms"] = [len(norms), len(CALLS), run.trainer.args.max_grad_norm,
                        all(e["grad_norm"] is not None for e in run.events
                            if e.get("phase") in ("warmup", "train"))]

        torch._dynamo.reset()
        sd = train("sd-tiny", wb.dataset("digits-captioned", limit=64), mode="compile",
                   max_steps=6, batch_size=4, warmup_steps=0)
        out["sd"] = [compiles(sd), placed(sd)]
        text = train("bert-tiny", wb.dataset("docstrings-topic", limit=120), mode="compile",
                     padding="longest", max_steps=8, max_length=64, warmup_steps=0)
        out["text"] = compiles(text)

        import torch.profiler as tp
        asked = []
        real_profile = tp.profile
        tp.profile = lambda *a, **k: asked.append([str(x) for x in k["activities"]]) or real_profile(*a, **k)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            prof = wb.profile("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), steps=2,
                              warmup=1, device="hpu", mode="eager", batch_size=2, max_length=32,
                              live=False)
        out["profile"] = {"asked": asked, "warned": [str(w.message) for w in caught],
                          "status": prof.run.status, "kind": prof.run.summary["device"]["kind"],
                          "trace": prof.trace.exists()
                          and prof.trace.parent == prof.run.path / "profile",
                          "rows": len(prof.table), "calls": bool((prof.table["calls"] > 0).all())}
    """)
    on, backend, compiled, all_marks, where = out["compile"]
    assert on and backend == "hpu_backend" and compiled > 0, "the double's hpu_backend compiled"
    assert all_marks == 0, "no mark_step outside lazy mode"
    assert where["args_device"] == "hpu:0" and where["params"] == ["hpu:0"]
    # raised for the run (a graph per static shape, training and eval), put back after it
    assert out["shapes"] >= 4 and out["limit"][0] >= 2 * out["shapes"] + 2 > 8
    assert out["limit"][1] == 8

    fused = out["fused"]
    assert fused["type"] and fused["wrapped"] and fused["placed"]["params"] == ["hpu:0"]
    assert fused["groups"] == {"0.1": fused["decay"],
                               "0.0": sorted(set(fused["all"]) - set(fused["decay"]))}
    assert any("bias" in n for n in fused["groups"]["0.0"])
    assert any("ln_" in n for n in fused["groups"]["0.0"])
    assert all(b == [0.8, 0.95] and e == 1e-7 for b, e in fused["betas_eps"])
    assert out["norms"] == [3, 0, 1.0, True]

    counts, where = out["sd"]
    assert where["params"] == ["hpu:0"]
    assert counts[0] >= 1, f"the first step compiles the graphs: {counts}"
    assert len(set(counts)) == 1 and len(counts) == 6, f"and nothing compiles after it: {counts}"
    text = out["text"]
    assert text[-1] > text[0] + 2, f"batches padded to their longest row recompile: {text}"

    prof = out["profile"]
    assert prof["asked"] == [["HabanaProfilerActivity.CPU", "HabanaProfilerActivity.HPU"]], prof
    assert not any("cannot record HPU activity" in w for w in prof["warned"]), prof["warned"]
    assert prof["status"] == "completed" and prof["kind"] == "hpu" and prof["trace"]
    assert prof["rows"] > 0 and prof["calls"]


def test_compile_is_refused_in_lazy_mode(hpu, monkeypatch):
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1")
    dev = wb.device("hpu")
    with pytest.raises(ValueError, match="torch.compile does not run in HPU lazy mode"):
        recipe.compile_on(RunArgs(mode=None, compile=True), dev)
    assert not recipe.compile_on(RunArgs(mode=None, compile=None), dev)


# ----------------------------------------------------------------------------- smaller items
def test_deepspeed_owns_the_optimizer_and_clipping(hpu, tmp_path):
    """Under DeepSpeed the workbench hands over no FusedAdamW (ZeRO wraps the Trainer's own
    optimizer) and leaves max_grad_norm to DeepSpeed's gradient_clipping ("auto")."""
    import transformers

    from workbench.scaleout.launcher import deepspeed_config

    dev = wb.device("hpu")
    args = transformers.TrainingArguments(output_dir=str(tmp_path), adam_beta1=0.8)
    cls, kw = trainer.fused_optimizer(dev, args)
    assert cls.__name__ == "FusedAdamW" and kw == {"lr": 5e-5, "betas": (0.8, 0.999), "eps": 1e-8}
    assert trainer.fused_optimizer(wb.device("cpu"), args) is None
    cfg = deepspeed_config(2)
    assert cfg["gradient_clipping"] == "auto" and "optimizer" not in cfg and args.max_grad_norm == 1.0
    args.deepspeed = cfg  # (set after construction: building it would start DeepSpeed)
    assert trainer.fused_optimizer(dev, args) is None


def test_ddp_on_hpu_does_not_search_for_unused_parameters(hpu, monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    a = RunArgs(precision="auto", mode=None, compile=False, batch_size=8, lr=1e-3, max_steps=10, epochs=None,
                log_every=2, eval_every=None, save_every=10, seed=0, report_to=None, trainer_overrides={})
    targs = recipe.training_arguments(a, wb.device("hpu"), "causal_lm", tmp_path, "adamw_torch")
    assert targs["ddp_backend"] == "hccl" and targs["ddp_find_unused_parameters"] is False
    assert "ddp_find_unused_parameters" not in recipe.training_arguments(a, wb.device("cpu"), "causal_lm",
                                                                         tmp_path, "adamw_torch")


def test_hccl_answers_the_tensor_collectives_under_torch_2_10_and_2_13_names(on_hpu):
    """The double's "hccl" group answers all_gather_into_tensor / reduce_scatter_tensor under
    the method names torch 2.13 calls (all_gather_single, reduce_scatter_single) and torch 2.10,
    Intel's 1.24 pairing, calls (_allgather_base, _reduce_scatter_base), on HPU tensors."""
    out = on_hpu("""
        import torch, torch.distributed as dist
        import habana_frameworks.torch.core  # noqa: F401 (the bridge registers "hccl")
        dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
        group = dist.distributed_c10d._get_default_group()
        for name in ("all_gather_single", "_allgather_base", "reduce_scatter_single",
                     "_reduce_scatter_base"):
            result = torch.zeros(3, device="hpu")
            getattr(group, name)(result, torch.arange(1.0, 4.0, device="hpu")).wait()
            out[name] = [str(result.device), result.tolist()]
        dist.destroy_process_group()
    """)
    assert out == {name: ["hpu:0", [1.0, 2.0, 3.0]] for name in (
        "all_gather_single", "_allgather_base", "reduce_scatter_single", "_reduce_scatter_base")}


def test_launch_trains_two_ranks_over_hccl_each_on_its_own_card(on_hpu):
    """``wb.launch(devices=2, device="hpu")``, DDP and DeepSpeed ZeRO-2: two torchrun workers
    each load the double, take the card LOCAL_RANK names (HLS_MODULE_ID, the bridge's hccl
    module), join the process group over "hccl" (host copies over gloo in the double), train
    on hpu:0 in eager mode, and both end with the same weights. ZeRO-2 builds its reduction
    stream with ``torch.hpu.Stream`` (DeepSpeed's hpu_accelerator)."""
    out = on_hpu("""
        import json, workbench as wb
        for strategy, extra in (("ddp", {}), ("deepspeed", {"zero_stage": 2})):
            run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), devices=2,
                            device="hpu", mode="eager", strategy=strategy, max_steps=2,
                            batch_size=2, max_length=32, log_every=1, live=False, **extra)
            out[strategy] = {"status": [run.status, run.summary.get("error"),
                                        run.summary.get("world_size")],
                             "ranks": [json.loads(p.read_text())
                                       for p in sorted((run.path / "ranks").glob("*"))]}
    """)
    for strategy in ("ddp", "deepspeed"):
        assert out[strategy]["status"] == ["completed", None, 2], out[strategy]
        ranks = out[strategy]["ranks"]
        for seen in ranks:
            assert seen["device"] == "hpu:0" and seen["params_device"] == "hpu:0", seen
            assert seen["dist_backend"] == "hccl"
        assert len(ranks) == 2 and len({seen["params_sha256"] for seen in ranks}) == 1


@pytest.mark.slow
def test_a_killed_rank_restarts_both_from_the_last_checkpoint_on_their_cards(on_hpu):
    """``wb.launch(devices=2, device="hpu", max_restarts=1)``: rank 1 is killed after the
    first checkpoint; torchrun restarts both workers, each takes its card again (a dead
    process's card is free, as the driver frees it on exit), both continue from the last
    checkpoint over hccl and end on the same weights."""
    out = on_hpu("""
        import json, signal, time
        import psutil
        import workbench as wb

        run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), devices=2,
                        device="hpu", mode="eager", max_steps=12, save_every=4, log_every=2,
                        batch_size=2, max_length=32, max_restarts=1, live=False,
                        background=True)

        def rank_1():
            if run.last_checkpoint is None:
                return None
            for p in psutil.Process(run.process.pid).children(recursive=True):
                try:
                    if ("workbench.scaleout.worker" in " ".join(p.cmdline())
                            and p.environ().get("RANK") == "1"):
                        return p
                except psutil.NoSuchProcess:
                    continue
            return None

        deadline = time.monotonic() + 300
        victim = rank_1()
        while victim is None and run.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # a poll interval: waiting for the first checkpoint
            victim = rank_1()
        out["killed_at"] = run.last_checkpoint.name if victim is not None else None
        victim.send_signal(signal.SIGKILL)
        run.wait(600)
        out["status"] = [run.status, run.summary.get("error")]
        out["restarts"] = [e for e in run.events if e.get("phase") == "restart"]
        out["ranks"] = [json.loads(p.read_text()) for p in sorted((run.path / "ranks").glob("*"))]
    """)
    assert out["killed_at"] is not None, out
    assert out["status"] == ["completed", None], out
    assert len(out["restarts"]) == 1 and out["restarts"][0]["from"].startswith("checkpoint-")
    ranks = out["ranks"]
    assert len(ranks) == 2 and {r["step"] for r in ranks} == {12}, ranks
    assert all(r["device"] == "hpu:0" and r["dist_backend"] == "hccl" for r in ranks), ranks
    assert len({r["params_sha256"] for r in ranks}) == 1


def test_compile_counter_and_unknown_metrics(hpu, monkeypatch):
    """graph_compilation counts non-eager graphs only; an unknown metric is None, not an error."""
    from habana_frameworks.torch.hpu import metrics

    dev = wb.device("hpu")
    start = dev.compiles()
    metrics.fake_compile(3)
    metrics.fake_compile(5, eager=True)
    assert dev.compiles() == start + 3
    assert wb.device("cpu").compiles() is None
    monkeypatch.delitem(metrics.COUNTERS, "graph_compilation")
    assert metrics.metric_global("graph_compilation") is None and dev.compiles() is None


def test_memory_plans_use_the_allocators_limit():
    """A Gaudi2 hands out about 94.6 GiB of its 96 GiB HBM (the allocator's Limit)."""
    assert CHIPS["Gaudi2"].memory == 96 * GiB and CHIPS["Gaudi2"].usable < CHIPS["Gaudi2"].memory
    df = wb.plan_memory("gpt2-small", batch_size=8, seq_len=512).table().set_index("device")
    assert df.loc["Gaudi2", "memory_gib"] == 94.6 and df.loc["H100 SXM", "memory_gib"] == 80


def test_no_hpu_graphs_in_eager_mode_on_1_19(hpu, monkeypatch):
    monkeypatch.setenv("FAKE_HPU_RELEASE", "1.19")
    dev = wb.device("hpu")
    with pytest.raises(ImportError):
        from habana_frameworks.torch.hpu import wrap_in_hpu_graph  # noqa: F401  (lazy mode only)
    net = torch.nn.Linear(2, 2)
    assert inference_model(net, dev) is net


@pytest.mark.slow
def test_recipe_cache_is_configured_before_the_bridge_loads(fake_env, tmp_path):
    env = {**fake_env, "WORKBENCH_CACHE": str(tmp_path)}
    env.pop("PT_HPU_RECIPE_CACHE_CONFIG", None)
    code = "import os, workbench as wb; wb.device(); print(os.environ['PT_HPU_RECIPE_CACHE_CONFIG'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"{tmp_path / 'hpu-recipes'},false,4096"


def test_recipe_cache_on_nfs_warns(hpu, monkeypatch, tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(f"server:/export {tmp_path} nfs4 rw 0 0\n/dev/sda1 / ext4 rw 0 0\n")
    assert _hpu.filesystem(tmp_path / "cache", mounts) == "nfs4"
    assert _hpu.filesystem("/usr", mounts) == "ext4"
    monkeypatch.setattr(_hpu, "filesystem", lambda path, mounts=None: "nfs4")
    with pytest.warns(UserWarning, match="recipe cache .* is on NFS"):
        wb.device("hpu")


# ----------------------------------------------------------------------------- the double itself
def test_the_double_is_as_strict_as_the_bridge(hpu, monkeypatch):
    """The rules the tests above rely on (each one's source is in its docstring in tests/fakes)."""
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "0")
    import habana_frameworks.torch  # noqa: F401
    from habana_frameworks.torch.hpex.normalization import FusedClipNorm
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW
    from habana_frameworks.torch.utils.internal import is_lazy

    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1")
    assert not is_lazy(), "read once, then cached"
    net = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError):
        FusedAdamW(net.parameters(), lr=1e-3, amsgrad=True)
    assert FusedAdamW(net.parameters()).defaults["eps"] == 1e-6
    assert float(FusedClipNorm(net.parameters(), 1.0).clip_norm(net.parameters())) == 0.0  # no gradients yet
    with pytest.raises(AssertionError, match="Invalid device id"):
        torch.hpu.memory_stats(8)
    with pytest.raises(RuntimeError, match="supports only device 0"):
        torch.hpu.get_rng_state(1)
    compiled = torch.compile(net, backend="hpu_backend")
    assert compiled(torch.ones(1, 2)).shape == (1, 2)


def test_no_test_switches_the_hpu_off():
    """The HPU tests run with nothing switched off underneath: no Trainer told to use the CPU,
    no patched device string, no forced-off detection in transformers, accelerate or DeepSpeed
    (issue 28; the patterns are assembled so that this file does not match itself)."""
    patterns = ["use" + "_cpu=True", "\"use" + "_cpu\": True", "torch_device" + "\", property",
                "torch_device" + "\", lambda", "torch_device" + " = property",
                "is_torch_hpu_available" + ".cache_clear",
                "is_hpu_available" + ".cache_clear"]
    for var, value in (("ACCELERATE_TORCH_DEVICE", "cpu"), ("ACCELERATE_BYPASS_DEVICE_MAP", "true"),
                       ("DS_ACCELERATOR", "cpu")):
        patterns += [f'setenv("{var}", "{value}")', f'["{var}"] = "{value}"', f'{var}="{value}"']
    tests = Path(__file__).parent
    found = [f"{path.relative_to(tests)}: {pattern}" for path in sorted(tests.rglob("*.py"))
             for pattern in patterns if pattern in path.read_text()]
    found += [str(p.relative_to(tests)) for p in tests.glob("fakes_workers/*")]
    assert not found, found
