"""What the bridge changes in torch when it loads in lazy mode, and what a user meets of it.

``habana_frameworks.torch.core`` runs ``overwrite_torch_functions()`` at import; in lazy mode it
names every child module with hooks and wraps ``torch.save`` / ``torch.load``
(``core/torch_overwrites.py`` @ 5a56187 and @ ea38cef; tests/fakes/README.md).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_lazy_mode_names_every_child_module_with_hooks_that_a_pickled_model_keeps(
        fake_hpu, monkeypatch, mode):
    """Lazy mode's ``Module.__setattr__`` and ``add_module`` give each module handed to another a
    ``custom_name``, a forward pre-hook and an always-called forward hook (lines 164-183, 262-282
    @ 5a56187); output tensors that require grad get a hook and ``names_hook``. A whole model
    pickled then names the bridge's hooks. Eager mode changes nothing."""
    import torch

    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1" if mode == "lazy" else "0")
    import habana_frameworks.torch  # noqa: F401

    net = torch.nn.Sequential(torch.nn.Linear(2, 2))  # add_module
    net.extra = torch.nn.Tanh()  # __setattr__
    x = torch.ones(1, 2, requires_grad=True)
    y = net.extra(net[0](x))
    y.sum().backward()
    hooks = [(getattr(m, "custom_name", None), len(m._forward_pre_hooks), len(m._forward_hooks))
             for m in (net, net[0], net.extra)]
    lazy = mode == "lazy"
    assert hooks == ([(None, 0, 0), ("0", 1, 1), ("extra", 1, 1)] if lazy else [(None, 0, 0)] * 3)
    assert getattr(y, "names_hook", False) is lazy and x.grad is not None
    assert (b"habana_frameworks" in pickle.dumps(net)) is lazy
    from habana_frameworks.torch.core import torch_overwrites

    assert not torch_overwrites._names, "every forward's name was popped"

    torch_overwrites.undo()  # what the fake_hpu fixture does after each test
    assert (torch.save.__module__, torch.load.__module__) == ("torch.serialization",) * 2
    assert torch.nn.Module.__setattr__.__qualname__ == "Module.__setattr__"


def _load_without_the_bridge(folder, *extra) -> dict:
    """What a CPU-only machine (a Python without the double) loads of the files in ``folder``:
    with torch's default ``weights_only=True``, and trusting the file."""
    code = """
import json, sys, torch
def load(name, **kw):
    try:
        obj = torch.load(name, **kw)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    flat = obj["state"][0] if "optimizer" in name else obj
    seen = {"type": type(obj).__name__, "devices": sorted({str(v.device) for v in flat.values()
            if isinstance(v, torch.Tensor)})}
    if name == "tied.pt":
        seen.update(shared=obj["w"].data_ptr() == obj["again"].data_ptr(),
                    w=type(obj["w"]).__name__, size=type(obj["size"]).__name__)
    return seen
out = {name: [load(name), load(name, weights_only=False)] for name in
       ["state_dict.pt", "tied.pt", "optimizer.pt", *sys.argv[1:]]}
try:
    torch.load("module.pt", weights_only=False)
    out["module.pt"] = "loaded"
except Exception as e:
    out["module.pt"] = type(e).__name__
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-I", "-c", code, *extra], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_lazy_torch_save_writes_cpu_tensors_that_only_a_trusting_load_reads_off_gaudi(
        on_hpu, tmp_path, mode):
    """Lazy mode's ``torch.save`` saves every tensor in dicts, lists and tuples as a detached CPU
    copy in plain containers, pickle protocol 4 (lines 385-432 @ 5a56187): a state dict or an
    optimizer's saved on a Gaudi holds no HPU tensor, as plain dicts, tied tensors apart. Off a
    Gaudi torch's weights-only load refuses protocol 4 (pytorch/pytorch#118092), the Trainer's
    checkpoint files included; trusted, they load on the CPU. A whole module is pickled as it
    is: its HPU tensors and hooks name the bridge. On the Gaudi, ``torch.load`` defaults
    ``weights_only`` to False, reads protocol 4 weights-only with the bridge's unpickler and
    moves what it loaded to ``map_location`` (lines 434-560): a lazy run resumes. In eager mode
    torch's own save keeps the HPU device."""
    folder = tmp_path / "files"
    out = on_hpu(f"""
        import argparse, os, zipfile
        import torch
        import habana_frameworks.torch
        os.makedirs({str(folder)!r})
        run = train("gpt2-tiny", mode={mode!r})
        run.resume(max_steps=3, live=False)
        out["resumed"] = [run.status, run.summary["step"]]
        out["checkpoint"] = str(run.last_checkpoint)
        os.chdir({str(folder)!r})
        lin = torch.nn.Linear(2, 2).to("hpu")
        torch.save(lin.state_dict(), "state_dict.pt")
        torch.save({{"w": lin.weight, "again": lin.weight, "size": lin.weight.shape}}, "tied.pt")
        torch.save(lin, "module.pt")
        opt = torch.optim.AdamW(lin.parameters())
        lin(torch.ones(1, 2, device="hpu")).sum().backward()
        opt.step()
        torch.save(opt.state_dict(), "optimizer.pt")
        with zipfile.ZipFile("state_dict.pt") as z:
            out["protocol"] = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))[1]
        back = torch.load("state_dict.pt", map_location="hpu")
        out["back"] = [type(back).__name__, str(back["weight"].device)]
        torch.save(argparse.Namespace(a=1), "namespace.pt")
        try:
            out["namespace"] = type(torch.load("namespace.pt")).__name__
        except Exception as e:
            out["namespace"] = type(e).__name__
    """, PT_HPU_LAZY_MODE="1" if mode == "lazy" else "0")
    assert out["resumed"] == ["completed", 3]
    cpu = _load_without_the_bridge(folder, f"{out['checkpoint']}/scheduler.pt")
    if mode == "eager":
        assert out["protocol"] == 2 and out["back"] == ["OrderedDict", "hpu:0"]
        assert out["namespace"] == "UnpicklingError"  # torch 2.13: weights_only=True
        assert all("The HPU device module is not registered" in said
                   for said in cpu["state_dict.pt"])
        return
    assert out["protocol"] == 4 and out["back"] == ["dict", "hpu:0"]
    assert out["namespace"] == "Namespace", "the bridge's torch.load: weights_only=False"
    for name in ("state_dict.pt", "tied.pt", "optimizer.pt", f"{out['checkpoint']}/scheduler.pt"):
        assert "Unsupported operand 149" in cpu[name][0], (name, cpu[name][0])  # FRAME, protocol 4
    assert cpu["state_dict.pt"][1] == {"type": "dict", "devices": ["cpu"]}
    assert cpu["optimizer.pt"][1] == {"type": "dict", "devices": ["cpu"]}
    assert cpu["tied.pt"][1] == {"type": "dict", "devices": ["cpu"], "shared": False,
                                 "w": "Tensor", "size": "Size"}
    assert cpu["module.pt"] == "ModuleNotFoundError"  # No module named 'habana_frameworks'
