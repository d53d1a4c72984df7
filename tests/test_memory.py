"""wb.plan_memory: estimates against measured peaks, the device table, suggestions, errors."""

from __future__ import annotations

import re

import pytest

import workbench as wb
from workbench.backends.chips import CHIPS
from workbench.planning.memory import MemoryPlan, plan_memory

GPT2_124M = 124_439_808
FAMILIES = ("bert", "gpt2", "t5", "llama", "unet", "sd")


# --------------------------------------------------------------------------- measuring
def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (tied weights count once)."""
    seen = {}
    for t in tensors:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _profiled_peak(fn) -> int:
    """Peak bytes of CPU tensors allocated by ``fn()`` above what was live when it started.

    ``torch.profiler`` with ``profile_memory=True`` records every allocation and free of
    the CPU allocator (c10's profiled memory reporter) as an ``Allocation`` event with a
    signed size, including temporaries inside kernels and autograd's buffers. Summing the
    sizes in time order gives the live bytes; its maximum is the peak. Process RSS cannot
    be used instead: it counts the allocator's cached pages and libraries and its peak
    cannot be reset. (``prof.events()`` attributes allocations to operators, losing when
    they happened, hence the event tree.)
    """
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()

    def walk(nodes):
        for node in nodes:
            yield node
            yield from walk(node.children)

    events = sorted((n.start_time_ns, n.extra_fields.alloc_size)
                    for n in walk(prof.profiler.kineto_results.experimental_event_tree())
                    if n.tag == _EventType.Allocation)
    live = peak = 0
    for _, size in events:
        live += size
        peak = max(peak, live)
    assert live == 0, "the step should free what it allocated"
    return peak


def _batch(spec, model, batch_size: int, seq_len: int, device="cpu"):
    import torch

    g = torch.Generator().manual_seed(0)
    if spec.family == "sd":  # images at the VAE's input size, captions of the fixed length
        side = model.captions.resolution
        return {"pixel_values": (torch.rand(batch_size, 3, side, side, generator=g) * 2 - 1).to(device),
                "input_ids": torch.randint(5, 1000, (batch_size, model.captions.caption_length), generator=g).to(device)}
    if spec.family == "unet":
        cfg = model.unet.config
        return {"pixel_values": torch.randn(batch_size, cfg.in_channels, cfg.sample_size, cfg.sample_size,
                                            generator=g).to(device)}
    vocab = model.config.vocab_size
    out = {"input_ids": torch.randint(5, vocab, (batch_size, seq_len), generator=g),
           "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long)}
    if spec.task == "classification":
        out["labels"] = torch.randint(0, 2, (batch_size,), generator=g)
    else:
        out["labels"] = torch.randint(5, vocab, (batch_size, seq_len), generator=g)
    return {k: v.to(device) for k, v in out.items()}


def _train_step(model, optimizer, batch, autocast=None):
    """One step as the Trainer takes it: forward (loss inside), backward, AdamW, zero_grad."""
    import torch

    ctx = torch.autocast(*autocast) if autocast else torch.autocast("cpu", enabled=False)
    with ctx:
        loss = model(**batch)["loss"]
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measured_cpu_peak(spec, batch_size: int, seq_len: int) -> int:
    """Peak tensor bytes of one fp32 training step on CPU, resident tensors included."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # fast and steady on a busy 2-core machine; sizes do not change
    try:
        return _measure(spec, batch_size, seq_len)
    finally:
        torch.set_num_threads(threads)


def _measure(spec, batch_size: int, seq_len: int) -> int:
    """The body of ``measured_cpu_peak``."""
    import torch

    torch.manual_seed(0)
    if spec.family == "sd":
        from workbench.diffusion.texttoimage import from_spec

        model = from_spec(spec)
    else:
        model, _ = spec.build()
    if spec.family == "unet":
        from workbench.diffusion.denoising import DiffusionModel

        model = DiffusionModel(model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # the engine's CPU choice
    _train_step(model, optimizer, _batch(spec, model, batch_size, seq_len))  # creates AdamW's state
    batch = _batch(spec, model, batch_size, seq_len)
    # the second step is the steady state: weights and AdamW state are live before it starts
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    resident = _storage_bytes([*model.parameters(), *model.buffers(), *state, *batch.values()])
    return resident + _profiled_peak(lambda: _train_step(model, optimizer, batch))


# --------------------------------------------------------------------------- accuracy
@pytest.mark.parametrize("family", FAMILIES)
def test_estimate_is_within_35_percent_of_measured_cpu_peak(family):
    spec = wb.model(family)
    seq = {"unet": 32, "sd": 16}.get(family, 128)  # a UNet's seq_len is its image (sd: latent) side
    measured = measured_cpu_peak(spec, 8, seq)
    plan = plan_memory(spec, 8, seq, precision="fp32")  # accelerator kernels (the default)
    assert abs(plan.peak_allocated / measured - 1) <= 0.35, (plan, measured)
    # with PyTorch's CPU kernels modelled (math attention under dropout, float dropout
    # masks) the same per-tensor inventory lands much closer
    cpu = plan_memory(spec, 8, seq, precision="fp32", kernels="cpu")
    assert abs(cpu.peak_allocated / measured - 1) <= 0.10, (cpu, measured)


def test_sd_with_lora_trains_only_the_adapters_and_the_estimate_holds_on_cpu():
    """LoRA on the UNet's attention: gradients and AdamW state for the adapters alone, the
    UNet's own weights frozen in fp32, activations as for the whole UNet (gradients still
    flow back through it to the first adapters); measured against a real step on CPU."""
    spec, full = wb.model("sd", lora={"r": 4}), wb.model("sd")
    plan, whole = plan_memory(spec, 8, 16, precision="fp32"), plan_memory(full, 8, 16, precision="fp32")
    from workbench.diffusion.texttoimage import from_spec

    adapters = sum(p.numel() for p in from_spec(spec).parameters() if p.requires_grad)
    assert 0 < adapters < 0.2 * spec.num_params
    assert plan.gradients == 4 * adapters and plan.optimizer_state == 8 * adapters
    assert plan.weights == whole.weights + 4 * adapters  # the same weights, plus the adapters
    assert plan.activations >= whole.activations
    measured = measured_cpu_peak(spec, 8, 16)
    cpu = plan_memory(spec, 8, 16, precision="fp32", kernels="cpu")
    assert abs(cpu.peak_allocated / measured - 1) <= 0.10, (cpu, measured)
    assert abs(plan.peak_allocated / measured - 1) <= 0.35, (plan, measured)
    # in bf16 the frozen UNet stays fp32 (only the VAE and text encoder are cast)
    half = plan_memory(spec, 8, 16, precision="bf16")
    assert half.weights - plan_memory(full, 8, 16, precision="bf16").weights == 4 * adapters


@pytest.mark.requires_cuda
def test_estimate_is_within_15_percent_of_cuda_max_memory_allocated():
    import torch
    import transformers

    spec = wb.model("gpt2", size="small")  # GPT-2 124M shaped, random weights, no hub
    dev = wb.device("cuda")
    dtype = torch.bfloat16 if dev.precision == "bf16" else torch.float16
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(spec.config()).to(dev.torch_device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batch = _batch(spec, model, 8, 512, device=dev.torch_device)
    _train_step(model, optimizer, batch, autocast=("cuda", dtype))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    _train_step(model, optimizer, batch, autocast=("cuda", dtype))
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated()
    plan = plan_memory(spec, 8, 512, precision=dev.precision)
    assert abs(plan.peak_allocated / measured - 1) <= 0.15, (plan, measured)


# --------------------------------------------------------------------------- components
def test_gpt2_124m_bf16_adamw_components():
    plan = plan_memory(wb.model("gpt2", size="small"), 8, 1024, precision="bf16")
    assert plan.num_params == GPT2_124M
    assert plan.weights == 4 * GPT2_124M  # the Trainer's fp32 master weights under autocast
    assert plan.gradients == 4 * GPT2_124M
    assert plan.optimizer_state == 8 * GPT2_124M  # two fp32 moments
    logits = 12 * 8 * 1024 * 50257  # log-softmax and two gradients, fp32
    assert plan.activations > logits
    assert plan.per_device == plan.peak_allocated + plan.margin > plan.peak_allocated
    assert plan.total == plan.per_device  # one device
    fp32 = plan_memory("gpt2-small", 8, 1024, precision="fp32")
    assert fp32.weights == plan.weights and fp32.activations > plan.activations


def test_catalog_name_and_auto_precision():
    plan = plan_memory("gpt2-small", 4, 256)
    assert plan.precision == "bf16" and plan.requested_precision == "auto"
    assert plan.per_device == plan_memory(wb.model("gpt2", size="small"), 4, 256, precision="bf16").per_device


def test_zero3_per_device_shrinks_with_devices():
    plans = [plan_memory("llama-7b", 1, 2048, zero_stage=3, devices=n) for n in (2, 4, 8, 16)]
    sizes = [p.per_device for p in plans]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    assert plans[-1].weights < plans[0].weights
    assert plans[-1].total > plans[-1].per_device
    by_stage = [plan_memory("llama-7b", 1, 512, zero_stage=z, devices=8) for z in (1, 2, 3)]
    assert by_stage[0].optimizer_state == by_stage[1].optimizer_state
    assert by_stage[1].gradients < by_stage[0].gradients
    assert by_stage[2].weights < by_stage[1].weights


@pytest.mark.parametrize("name", ["gpt2-small", "bert-base", "t5-small", "llama-1b", "unet-ddpm-cifar10"])
def test_gradient_checkpointing_shrinks_activations(name):
    seq = None if name.startswith("unet") else 512
    full = plan_memory(name, 16, seq)
    ckpt = plan_memory(name, 16, seq, grad_checkpointing=True)
    assert ckpt.activations < full.activations
    assert ckpt.weights == full.weights and ckpt.per_device < full.per_device


# --------------------------------------------------------------------------- devices
def test_device_table_has_known_devices_and_detected():
    plan = plan_memory("gpt2-small", 8, 512)
    df = plan.table()
    assert list(df["device"]) == [*(c.name for c in CHIPS.values() if c.memory), "detected"]
    assert {"device", "kind", "memory_gib", "needs_gib", "fits", "suggestion"} <= set(df.columns)
    detected = df.set_index("device").loc["detected"]
    assert detected["kind"] == wb.device().kind
    assert detected["precision"] == wb.device().precision  # auto follows the detected device
    assert all((s == "") == bool(f) for s, f in zip(df["suggestion"], df["fits"]))
    assert df.set_index("device").loc["H100 SXM", "fits"]


def test_device_memory_comes_from_the_chip_table(monkeypatch):
    from dataclasses import replace

    plan = plan_memory("gpt2-small", 8, 512)
    assert plan.fits("H200") and plan.fits(CHIPS["H200"].memory) and not plan.fits(plan.per_device - 1)
    monkeypatch.setitem(CHIPS, "H200", replace(CHIPS["H200"], memory=plan.per_device - 1))
    assert not plan.fits("H200") and plan.suggestion("H200").startswith("batch_size=")
    row = plan.table().set_index("device").loc["H200"]
    assert row["memory_gib"] == round((plan.per_device - 1) / 2**30, 1) and not row["fits"]
    with pytest.raises(ValueError, match="unknown device 'cpu'; known: Gaudi1.*'detected'"):
        plan.fits("cpu")  # a CPU's memory is the host's: no figure in the table


def test_table_says_gaudi1_has_no_fp16():
    df = plan_memory("gpt2-small", 8, 512, precision="fp16").table().set_index("device")
    assert df.loc["Gaudi1", "suggestion"] == "Gaudi1 has no fp16: use bf16 (same memory)."
    assert df.loc["Gaudi2", "suggestion"] == "" and df.loc["Gaudi2", "fits"]


def test_fits_by_name_bytes_and_detected():
    plan = plan_memory("gpt2-small", 8, 512)
    assert plan.fits(plan.per_device) and not plan.fits(plan.per_device - 1)
    assert plan.fits("H200") and plan.fits("h200")
    assert plan.fits("detected") == plan.fits(wb.device())
    with pytest.raises(ValueError, match="Gaudi2"):
        plan.fits("TPU")


def test_llama_70b_does_not_fit_one_h200_but_zero3_over_enough_devices_does():
    plan = plan_memory("llama-70b", 1, 2048)
    assert not plan.fits("H200")
    hint = plan.suggestion("H200")
    m = re.fullmatch(r"ZeRO-3 over (\d+) devices", hint)
    assert m, hint
    n = int(m.group(1))
    assert plan_memory("llama-70b", 1, 2048, zero_stage=3, devices=n).fits("H200")
    assert not plan_memory("llama-70b", 1, 2048, zero_stage=3, devices=n // 2).fits("H200")
    assert plan.suggestion(10**9).startswith("does not fit even with")


def test_suggestion_order_batch_then_checkpointing_then_bf16():
    plan = plan_memory("gpt2-xl", 32, 1024)
    hint = plan.suggestion("H100")
    b = int(re.match(r"batch_size=(\d+) \(gradient_accumulation_steps=\d+", hint).group(1))
    assert plan_memory("gpt2-xl", b, 1024).fits("H100") and not plan_memory("gpt2-xl", b + 1, 1024).fits("H100")
    one = plan_memory("gpt2-xl", 1, 1024, precision="fp32")  # batch 1 cannot shrink
    need = one._with(grad_checkpointing=True).per_device
    assert one.suggestion(need) == "gradient checkpointing"
    assert plan.suggestion("H200") == "" or plan.suggestion("H200").startswith("batch_size=")


# --------------------------------------------------------------------------- display, errors
def test_repr_and_html():
    plan = plan_memory("t5-small", 8, 512)
    text = repr(plan)
    assert text.startswith("MemoryPlan: t5-small") and "optimizer state" in text and "per device" in text
    page = plan._repr_html_()
    assert page.count("<table") == 2 and "detected" in page and "H200" in page
    assert isinstance(plan, MemoryPlan)


@pytest.mark.parametrize("kwargs, match", [
    ({"precision": "fp8"}, "known: auto, fp32, bf16, fp16"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"seq_len": -1}, "seq_len must be a positive integer"),
    ({"seq_len": 2048}, "seq_len <= 1024"),
    ({"zero_stage": 4}, "zero_stage must be 0, 1, 2 or 3"),
    ({"zero_stage": 2}, "pass devices=N with N > 1"),
    ({"optimizer": "lion"}, "known: adamw"),
    ({"kernels": "triton"}, "known: auto, fused, cpu"),
    ({"devices": ["Gaudi3"]}, "plan_memory plans every chip at once; to plan named chips, wb.plan(..., devices=[...])"),
    ({"devices": 0}, "devices must be a positive integer"),
])
def test_validation_names_the_fix(kwargs, match):
    args = {"model": "gpt2-small", "batch_size": 8, "seq_len": 128, **kwargs}
    with pytest.raises(ValueError, match=re.escape(match)):
        plan_memory(**args)


def test_model_errors():
    with pytest.raises(TypeError, match="ModelSpec or a catalog name"):
        plan_memory(42, 8, 128)
    with pytest.raises(ValueError, match="seq_len is required"):
        plan_memory("llama-7b", 8)
    with pytest.raises(ValueError, match="unknown"):
        plan_memory("gpt5-huge", 8, 128)
