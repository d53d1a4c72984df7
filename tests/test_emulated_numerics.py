"""The emulated Gaudi's numerics follow the bridge's: bf16 autocast by its op lists
(``hpu_ops/autocast_helpers.h``) and FusedAdamW as its wrapper computes. Each check runs in a
fresh process (fixture ``on_hpu``), as every test on the emulated device does."""

from __future__ import annotations


def test_bf16_autocast_follows_the_bridges_op_lists(on_hpu, tmp_path):
    """Under ``torch.autocast("hpu")`` the lower-precision list (matmuls, norms, softmax, SDPA,
    convolutions, mul) runs in bf16, the fp32 list (embedding, cross-entropy, exp, ...) in fp32
    even on bf16 inputs, the promote list in the widest dtype; a list file named by
    PT_HPU_AUTOCAST_FP32_OPS_LIST when the bridge loads replaces the default fp32 list."""
    body = """
        import torch, habana_frameworks.torch  # noqa: F401
        F = torch.nn.functional
        x = torch.randn(2, 4, 8, device="hpu")
        w = torch.randn(8, 8, device="hpu")
        low = x.to(torch.bfloat16)
        with torch.autocast("hpu", dtype=torch.bfloat16):
            got = {
                "linear": F.linear(x, w), "layer_norm": F.layer_norm(x, (8,)),
                "softmax": torch.softmax(x, -1), "log_softmax": F.log_softmax(x, -1),
                "sdpa": F.scaled_dot_product_attention(x, x, x),
                "conv1d": F.conv1d(x, torch.randn(3, 4, 2, device="hpu")),
                "mul": x * x, "mean": x.mean(-1),
                "embedding": F.embedding(torch.tensor([1, 2], device="hpu"), low[0]),
                "cross_entropy": F.cross_entropy(low[0], torch.tensor([1, 2, 3, 0], device="hpu")),
                "exp": torch.exp(low), "add": low + x, "relu": torch.relu(x),
            }
        out["dtypes"] = {k: str(v.dtype).split(".")[1] for k, v in got.items()}
    """
    out = on_hpu(body)
    assert out["dtypes"] == {
        "linear": "bfloat16", "layer_norm": "bfloat16", "softmax": "bfloat16",
        "log_softmax": "bfloat16", "sdpa": "bfloat16", "conv1d": "bfloat16",
        "mul": "bfloat16", "mean": "bfloat16",  # lowered: the bridge's lower list
        "embedding": "float32", "cross_entropy": "float32", "exp": "float32",  # its fp32 list
        "add": "float32",  # promote: the widest input
        "relu": "float32",  # in no list: runs in its input's dtype
    }
    lists = tmp_path / "fp32_list.txt"
    lists.write_text("softmax\n")  # the user's fp32 list replaces the default one
    lower = tmp_path / "lower_list.txt"
    lower.write_text("linear\n")
    out = on_hpu(body, PT_HPU_AUTOCAST_FP32_OPS_LIST=str(lists),
                 PT_HPU_AUTOCAST_LOWER_PRECISION_OPS_LIST=str(lower))
    assert out["dtypes"]["linear"] == "bfloat16" and out["dtypes"]["softmax"] == "float32"
    assert out["dtypes"]["layer_norm"] == "float32" and out["dtypes"]["embedding"] == "bfloat16"


def test_the_bf16_path_trains_with_finite_losses_under_the_bridges_lists(on_hpu):
    """wb.train(precision="bf16") on the emulated Gaudi, now that softmax, the norms, mul and
    mean run in bf16 and the loss, exp, pow and rsqrt in fp32: GPT-2 (LayerNorm, softmax
    attention) and Llama (RMSNorm: pow, mean, rsqrt, mul) train with finite losses."""
    out = on_hpu("""
        import math, workbench as wb
        for name, model in (("gpt2", "gpt2-tiny"), ("llama", wb.model("llama"))):
            run = train(model, mode="eager", precision="bf16", max_steps=3)
            out[name] = [e["loss"] for e in run.events if "loss" in e]
            out[name + "_finite"] = all(math.isfinite(x) for x in out[name])
    """)
    for name in ("gpt2", "llama"):
        assert len(out[name]) >= 3 and out[name + "_finite"], out


def test_fused_adamw_folds_bias_correction_into_the_step_size(fake_hpu):
    """One step of the double's FusedAdamW is the bridge's update, ``w - lr * sqrt(1 - b2) /
    (1 - b1) * m / (sqrt(v) + eps)``, which with a large eps differs from torch's AdamW (it
    corrects sqrt(v) before adding eps); the step count is the group's."""
    import torch
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW

    lr, (b1, b2), eps, grad = 0.1, (0.9, 0.99), 0.1, torch.tensor([0.5, -2.0])
    results = {}
    for name, cls in (("fused", FusedAdamW), ("torch", torch.optim.AdamW)):
        w = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
        opt = cls([w], lr=lr, betas=(b1, b2), eps=eps, weight_decay=0.0)
        w.grad = grad.clone()
        opt.step()
        results[name] = (w.detach().clone(), opt)
    m, v = (1 - b1) * grad, (1 - b2) * grad * grad
    bridge = 1.0 - lr * (1 - b2) ** 0.5 / (1 - b1) * m / (v.sqrt() + eps)
    assert torch.allclose(results["fused"][0], bridge, rtol=0, atol=1e-6)
    assert not torch.allclose(results["fused"][0], results["torch"][0], atol=1e-3)
    assert results["fused"][1].param_groups[0]["step"] == 1


def test_wb_train_with_the_fused_adamw_matches_torch_adamw(on_hpu):
    """wb.train on the emulated Gaudi picks the bridge's FusedAdamW; the same run with torch's
    AdamW in its place ends with the same losses and weights within tolerance (they differ
    only in where eps meets the bias correction)."""
    out = on_hpu("""
        import torch, workbench as wb
        import habana_frameworks.torch.hpex.optimizers as hpex
        start, runs = {}, {}

        def noting_start(cls):  # the class, noting the weights it starts from
            def init(self, params, **kw):
                groups = list(params)
                start[cls.__name__] = [p.detach().clone() for g in groups for p in g["params"]]
                cls.__init__(self, groups, **kw)
            return type(cls.__name__, (cls,), {"__init__": init})

        fused = hpex.FusedAdamW
        for eps in (1e-8, 1e-12):  # the Trainer's default adam_epsilon, and a tiny one
            for name, cls in (("fused", fused), ("torch", torch.optim.AdamW)):
                hpex.FusedAdamW = noting_start(cls)  # what wb.train's Trainer builds on HPU
                run = train("gpt2-tiny", mode="eager", max_steps=4, lr=1e-3, weight_decay=0.1,
                            adam_epsilon=eps)
                opt = run.trainer.optimizer.optimizer
                runs[name] = [p.detach() for g in opt.param_groups for p in g["params"]]
                out[f"{name}{eps}"] = {"type": type(opt).__name__, "eps": opt.defaults["eps"],
                                       "losses": [e["loss"] for e in run.events if "loss" in e]}
            same = all(torch.equal(a, b) for a, b in zip(start["FusedAdamW"], start["AdamW"]))
            norm = lambda ts: sum(float((t.float() ** 2).sum()) for t in ts) ** 0.5
            moved = norm([w - w0 for w, w0 in zip(runs["fused"], start["FusedAdamW"])])
            apart = norm([a - b for a, b in zip(runs["fused"], runs["torch"])])
            out[f"weights{eps}"] = {"same_start": same, "moved": moved, "apart": apart}
    """)
    for eps, within in ((1e-8, 0.15), (1e-12, 0.01)):
        fused, plain = out[f"fused{eps}"], out[f"torch{eps}"]
        assert fused["type"] == "FusedAdamW" and plain["type"] == "AdamW" and fused["eps"] == eps
        assert len(fused["losses"]) >= 4 and len(set(fused["losses"])) > 1
        for a, b in zip(fused["losses"], plain["losses"]):
            assert abs(a - b) <= 1e-3 * abs(b), out
        # eps is added to sqrt(v) before the bias correction (torch: after), which the
        # tiny gradients of rarely seen embedding rows show at the Trainer's default eps
        weights = out[f"weights{eps}"]
        assert weights["same_start"] and weights["apart"] < within * weights["moved"], out


def test_bf16_matrix_products_and_convolutions_match_the_cpu_kernels(on_hpu):
    """The double computes bf16 matrix products on fp32 host copies, rounded to bf16 once (its
    speed on a CPU without bf16 units): the values are torch's CPU bf16 kernels' up to
    summation order (``mm`` exactly the fp32 product rounded), the output bf16 on hpu; a
    product with an fp32 input takes the CPU fallback as before. Convolutions, forward and
    backward, the same."""
    body = """
        import torch, habana_frameworks.torch  # noqa: F401
        torch.manual_seed(0)
        a, b = torch.randn(64, 96).bfloat16(), torch.randn(96, 48).bfloat16()
        bias = torch.randn(48).bfloat16()
        x, y = torch.randn(3, 16, 32).bfloat16(), torch.randn(3, 32, 8).bfloat16()
        c = torch.randn(3, 16, 8).bfloat16()
        cpu = {"mm": a @ b, "addmm": torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
               "bmm": torch.bmm(x, y), "baddbmm": torch.baddbmm(c, x, y, alpha=0.5)}
        h = {k: v.to("hpu") for k, v in dict(a=a, b=b, bias=bias, x=x, y=y, c=c).items()}
        hpu = {"mm": h["a"] @ h["b"], "addmm": torch.addmm(h["bias"], h["a"], h["b"], beta=0.5, alpha=2.0),
               "bmm": torch.bmm(h["x"], h["y"]), "baddbmm": torch.baddbmm(h["c"], h["x"], h["y"], alpha=0.5)}
        out["devices"] = sorted({str(v.device) for v in hpu.values()})
        out["dtypes"] = sorted({str(v.dtype) for v in hpu.values()})
        # one bf16 step apart at most (2**-8 of the magnitude): rounding the same fp32 sums
        out["close"] = {k: bool(torch.allclose(hpu[k].cpu().float(), cpu[k].float(), rtol=2**-7, atol=1e-2))
                        for k in cpu}
        wide = (a.float() @ b.float()).bfloat16()
        out["mm_is_the_rounded_fp32_product"] = bool(torch.equal(hpu["mm"].cpu(), wide))
        mixed = h["a"].float() @ h["b"].float()  # not every input bf16: the CPU fallback, fp32
        out["mixed_dtype"] = str(mixed.dtype)
        # convolutions too, forward and backward: bf16 results and gradients, the CPU's values
        img, k = torch.randn(2, 4, 8, 8).bfloat16(), torch.randn(6, 4, 3, 3).bfloat16()
        grads = {}
        for where in ("cpu", "hpu", "exact"):
            dt = torch.float64 if where == "exact" else torch.bfloat16
            dev = "cpu" if where == "exact" else where
            i = img.detach().to(dev, dt).requires_grad_()
            w = k.detach().to(dev, dt).requires_grad_()
            y = torch.nn.functional.conv2d(i, w, padding=1)
            y.double().square().sum().backward()
            grads[where] = [y.detach().cpu(), i.grad.cpu(), w.grad.cpu()]
        out["conv_dtypes"] = sorted({str(t.dtype) for t in grads["hpu"]})
        # each result's largest error against fp64, relative to its largest value: the
        # emulation's no worse than the CPU kernels' own (bf16 keeps 8 bits: 2**-8 = 0.0039)
        def err(got, exact):
            return float((got.double() - exact).abs().max() / exact.abs().max())
        out["conv_errors"] = [[err(h, e), err(c, e)] for h, c, e in zip(grads["hpu"], grads["cpu"], grads["exact"])]
    """
    out = on_hpu(body)
    assert out["devices"] == ["hpu:0"] and out["dtypes"] == ["torch.bfloat16"], out
    assert out["close"] == {"mm": True, "addmm": True, "bmm": True, "baddbmm": True}, out
    assert out["mm_is_the_rounded_fp32_product"], out
    assert out["mixed_dtype"] == "torch.float32", out
    assert out["conv_dtypes"] == ["torch.bfloat16"], out
    # output, input gradient, weight gradient: within bf16's rounding, and no less exact than
    # the CPU's bf16 kernels
    assert all(hpu <= 2**-8 and hpu <= cpu + 2**-9 for hpu, cpu in out["conv_errors"]), out["conv_errors"]
