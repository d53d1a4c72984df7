"""The backend table: CPU for real, HPU against the test double in tests/fakes."""

from __future__ import annotations

import subprocess
import sys

import pytest

import workbench as wb
from workbench.backends import chips
from workbench.backends.chips import CHIPS
from workbench.backends.registry import BACKENDS, chip, devices


def test_cpu_record_for_real():
    d = wb.device("cpu")
    assert d.kind == "cpu" and d.available and d.count == 1
    assert d.dist_backend == "gloo" and d.precision == "fp32"
    mem = d.memory()
    assert set(mem) == {"allocated", "peak", "total"}
    assert 0 < mem["allocated"] <= mem["peak"] <= mem["total"]
    assert d.total_memory == mem["total"]
    d.synchronize()
    d.mark_step()  # no-op on CPU
    assert d.versions["torch"] and d.versions["transformers"]
    assert "cpu" in repr(d) and "<table" in d._repr_html_()


def test_auto_picks_best_available_and_env_overrides(monkeypatch):
    assert wb.device().kind == "cpu"  # no HPU or GPU on the test machine
    monkeypatch.setenv("WORKBENCH_DEVICE", "cpu")
    assert wb.device().kind == "cpu"
    monkeypatch.setenv("WORKBENCH_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match=r"'cuda' \(from \$WORKBENCH_DEVICE\) is not available.*available: cpu.*Unset WORKBENCH_DEVICE"):
        wb.device()


def test_unknown_device_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown device 'tpu'; known: hpu, cuda, cpu"):
        wb.device("tpu")
    with pytest.raises(ValueError, match="bad device index"):
        wb.device("cpu:x")


def test_devices_lists_all_in_priority_order():
    infos = devices()
    assert [d.kind for d in infos] == ["hpu", "cuda", "cpu"]
    assert [d.available for d in infos] == [False, False, True]
    assert [d.dist_backend for d in infos] == ["hccl", "nccl", "gloo"]


def test_backend_table_choices():
    assert BACKENDS["hpu"].policy.compile_backend == "hpu_backend"
    assert BACKENDS["hpu"].policy.optimizer == "hpex_fused_adamw"
    assert BACKENDS["cuda"].policy.optimizer == "adamw_torch_fused"
    assert BACKENDS["cpu"].policy.optimizer == "adamw_torch_fused"
    # policies: Gaudi wants static shapes, torch.compile in eager mode and DDP without the unused-parameter search
    assert [BACKENDS[k].policy.static_shapes for k in ("hpu", "cuda", "cpu")] == [True, False, False]
    assert [BACKENDS[k].policy.ddp_find_unused_parameters for k in ("hpu", "cuda", "cpu")] == [False, None, None]
    assert BACKENDS["hpu"].policy.compile_default("eager") and not BACKENDS["hpu"].policy.compile_default("lazy")
    assert not BACKENDS["cuda"].policy.compile_default(None) and not BACKENDS["cpu"].policy.compile_default(None)


def test_profiler_activities_come_from_the_backend_record(monkeypatch):
    from dataclasses import replace

    import torch.profiler as tp
    from torch.profiler import ProfilerActivity as A

    from workbench.training.profiler import _activities

    monkeypatch.setattr(tp, "supported_activities", lambda: {A.CPU, A.CUDA, A.HPU})
    assert _activities("cpu") == [A.CPU]
    assert _activities("cuda") == [A.CPU, A.CUDA]
    assert _activities("hpu") == [A.CPU, A.HPU]
    cpu = BACKENDS["cpu"]
    monkeypatch.setitem(BACKENDS, "cpu", replace(cpu, policy=replace(cpu.policy, profiler_activities=("cpu", "cuda"))))
    assert _activities("cpu") == [A.CPU, A.CUDA]
    # a torch build that cannot record an activity the record names: left out, and said
    monkeypatch.setattr(tp, "supported_activities", lambda: {A.CPU})
    with pytest.warns(UserWarning, match="cannot record CUDA activity"):
        assert _activities("cuda") == [A.CPU]


# ---------------------------------------------------------------- the chip table
@pytest.mark.parametrize("name,key", [
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"), ("NVIDIA A100 80GB PCIe", "A100 80GB"), ("a100", "A100 80GB"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("H100", "H100 SXM"), ("h100_sxm", "H100 SXM"),
    ("NVIDIA H200", "H200"), ("GAUDI", "Gaudi1"), ("GAUDI2", "Gaudi2"), ("Gaudi 3", "Gaudi3"),
    ("gaudi1", "Gaudi1"), ("cpu", "CPU"),
])
def test_chip_names_match_the_table(name, key):
    assert chip(name) is CHIPS[key]


@pytest.mark.parametrize("name", ["NVIDIA RTX A1000 6GB Laptop GPU", "NVIDIA RTX A1000", "H1000", "Gaudi 30",
                                  "Gaudi4", "A1000 80GB", "NVIDIA GH200 480GB"])
def test_a_model_number_followed_by_a_digit_is_another_device(name):
    """The table's patterns are searched inside the names drivers report ("NVIDIA H100 80GB
    HBM3"): a longer model number is not the shorter one's chip (an RTX A1000 was planned as
    an 80 GB A100, a typed "H1000" as an H100), nor is a GH200 (96 or 144 GB) an H200 (141)."""
    with pytest.raises(ValueError, match="unknown device"):
        chip(name)
    detected = wb.device("cpu")
    detected.kind, detected.name = "cuda", name
    assert chip(detected) is None


def test_unknown_chip_names_list_the_known_ones():
    with pytest.raises(ValueError, match="unknown device 'NVIDIA H100 PCIe'; known: Gaudi1, Gaudi2"):
        chip("NVIDIA H100 PCIe")  # slower clocks than the SXM board: not its row
    # detected hardware the table does not know is not an error: it has no figures
    other = wb.device("cpu")
    other.kind, other.name = "cuda", "NVIDIA GeForce RTX 4090"
    assert chip(other) is None and other.chip is None


def test_each_chip_carries_its_dense_peak(monkeypatch):
    from dataclasses import replace

    def peak(name, precision="bf16"):
        return chip(name).tflops[precision]

    assert peak("Gaudi2") == 432 and peak("Gaudi3") == 1835
    assert peak("H100") == peak("H200") == 989
    assert peak("A100", "fp32") == 19.5 and peak("NVIDIA A100-SXM4-40GB", "fp16") == 312
    assert peak("Gaudi1") is None, "uncertain figure: no MFU rather than a wrong one"
    assert peak("Gaudi1", "fp16") is None
    cpu = wb.device("cpu")
    assert cpu.chip is CHIPS["CPU"] and not any(CHIPS["CPU"].tflops.values())
    monkeypatch.setitem(CHIPS, "H200", replace(CHIPS["H200"], tflops={"bf16": 1.5}))
    assert peak("NVIDIA H200") == 1.5, "the table is the only source"


def test_chip_table_facts():
    assert not CHIPS["Gaudi1"].fp16 and all(c.bf16 for c in CHIPS.values())
    assert [c.instead("fp16") for c in CHIPS.values()] == ["bf16"] + [None] * (len(CHIPS) - 1)
    gib = {k: c.memory / 2**30 for k, c in CHIPS.items() if c.memory}
    assert gib == {"Gaudi1": 32, "Gaudi2": 96, "Gaudi3": 128, "A100 40GB": 40, "A100 80GB": 80,
                   "H100 SXM": 80, "H200": 141}
    assert CHIPS["CPU"].memory is None and set(CHIPS["CPU"].tflops.values()) == {None}


def test_resolve_precision_on_cpu():
    cpu = wb.device("cpu")
    assert cpu.resolve_precision() == "fp32" and cpu.resolve_precision("bf16") == "bf16"
    with pytest.raises(ValueError, match="unknown precision 'fp8'; known: auto, fp32, bf16, fp16"):
        cpu.resolve_precision("fp8")


# ---------------------------------------------------------------- HPU via the test double
def test_hpu_detected_through_test_double(fake_hpu):
    d = wb.device()
    assert d.kind == "hpu" and d.available and d.count == 8
    assert d.generation == "Gaudi2" and d.name == "HL-225"  # HLML's product name (no card taken)
    assert d.precision == "bf16" and d.dist_backend == "hccl"
    assert d.mode == "eager"  # the workbench's choice when PT_HPU_LAZY_MODE is unset (current Gaudi default)
    assert d.torch_device == "hpu:0"
    assert d.versions["habana_frameworks"] == "0.0.0-fake"


@pytest.mark.parametrize("gen,name", [("1", "Gaudi1"), ("3", "Gaudi3")])
def test_hpu_generation(fake_hpu, monkeypatch, gen, name):
    monkeypatch.setenv("FAKE_HPU_GENERATION", gen)
    assert wb.device("hpu").generation == name


def test_gaudi1_refuses_fp16_through_the_chip_table(fake_hpu, monkeypatch):
    monkeypatch.setenv("FAKE_HPU_GENERATION", "1")
    d = wb.device("hpu")
    assert d.chip is CHIPS["Gaudi1"]
    assert d.resolve_precision() == "bf16" and d.resolve_precision("fp32") == "fp32"
    with pytest.raises(ValueError, match="Gaudi1 has no fp16: use precision='bf16'"):
        d.resolve_precision("fp16")
    monkeypatch.setenv("FAKE_HPU_GENERATION", "2")
    sys.modules["pyhlml"].emulate()  # the emulated node's HLML lists the new cards
    d = wb.device("hpu")
    assert d.chip is CHIPS["Gaudi2"] and d.resolve_precision("fp16") == "fp16"
    assert d.chip.tflops["bf16"] == 432


def test_fused_ops_come_from_the_hpu_module(fake_hpu):
    import torch

    from workbench.backends import _bridge as _hpu

    wb.device("hpu")  # loads the bridge, in the mode the workbench chose
    from habana_frameworks.torch.hpex.optimizers import FusedAdamW

    net = torch.nn.Linear(3, 3)
    opt = _hpu.fused_adamw()(net.parameters(), lr=0.5, eps=1e-8)
    assert isinstance(opt, FusedAdamW) and opt.defaults["lr"] == 0.5 and opt.defaults["eps"] == 1e-8


def test_hpu_memory_stats_keys_map(fake_hpu):
    import habana_frameworks.torch.hpu as fake

    d = wb.device("hpu")
    fake.fake_allocate(3_000)
    fake.fake_allocate(5_000)
    stats = fake.memory_stats()
    assert d.memory() == {"allocated": stats["InUse"], "peak": stats["MaxInUse"], "total": stats["Limit"]}
    # total_memory: the allocator's pool of a Gaudi 2 (memory_stats()["Limit"]), not HLML's HBM
    assert d.memory()["allocated"] >= 8_000 and d.total_memory == chips.match("HL-225", "hpu").usable
    assert d.total_memory < 96 * 1024**3
    d.reset_peak_memory()
    assert d.memory()["peak"] == d.memory()["allocated"]


@pytest.mark.parametrize("lazy,mode,marks", [("0", "eager", 0), ("1", "lazy", 2)])
def test_mark_step_runs_only_in_lazy_mode(fake_hpu, monkeypatch, lazy, mode, marks):
    monkeypatch.setenv("PT_HPU_LAZY_MODE", lazy)  # before the bridge loads: it reads it once
    d = wb.device("hpu")
    from habana_frameworks.torch.core import MARKS

    assert d.mode == mode
    d.mark_step()
    d.mark_step()
    assert len(MARKS) == marks, "mark_step runs in lazy mode only"


def test_no_hpu_devices_falls_back(fake_hpu, monkeypatch):
    monkeypatch.setenv("FAKE_HPU_COUNT", "0")
    assert wb.device().kind == "cpu"
    with pytest.raises(RuntimeError, match="'hpu'.*not available"):
        wb.device("hpu")


# ---------------------------------------------------------------- import stays light
LIGHT = (
    "import sys, workbench, workbench.commands.cli; "
    "heavy = {'transformers', 'datasets', 'habana_frameworks', 'torch'} & set(sys.modules); "
    "assert not heavy, heavy"
)


def test_import_is_light():
    subprocess.run([sys.executable, "-c", LIGHT], check=True)


def test_import_never_loads_bridge_even_when_present(fake_env):
    subprocess.run([sys.executable, "-c", LIGHT], check=True, env=fake_env)


@pytest.mark.slow
def test_cli_devices_and_version(fake_env):
    from pathlib import Path

    exe = Path(sys.executable).with_name("workbench")
    out = subprocess.run([exe, "devices"], check=True, capture_output=True, text=True).stdout
    cpu = [line for line in out.splitlines() if line.startswith("cpu")]
    assert cpu and cpu[0].split()[1] == "yes"
    out = subprocess.run([exe, "devices"], check=True, capture_output=True, text=True, env=fake_env).stdout
    hpu = [line for line in out.splitlines() if line.startswith("hpu")][0]
    assert hpu.split()[1:3] == ["yes", "8"] and "Gaudi2" in hpu
    v = subprocess.run([exe, "--version"], check=True, capture_output=True, text=True).stdout
    assert v.strip() == f"gaudi-workbench {wb.__version__}"
    # python -m workbench is the same command line (used where the script is not on the PATH)
    out = subprocess.run([sys.executable, "-m", "workbench", "devices"], check=True, capture_output=True,
                         text=True, env=fake_env).stdout
    assert any(line.startswith("hpu") and "Gaudi2" in line for line in out.splitlines())


def test_public_names_stay_functions_after_submodules_are_imported():
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(wb.__path__):
        importlib.import_module(f"workbench.{mod.name}")
    for name in ("device", "devices", "model", "models", "dataset", "datasets", "train", "runs",
                 "compare", "record", "records"):
        assert callable(getattr(wb, name)) and not isinstance(getattr(wb, name), type(wb)), name


def test_dynamo_graphs_counts_what_torch_compile_traced_on_any_device():
    """The recompile count a CPU or GPU run reports (Gaudi adds the bridge's own counter)."""
    import torch

    dev = wb.device("cpu")
    before = dev.dynamo_graphs() or 0
    f = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
    f(torch.ones(3))
    assert dev.dynamo_graphs() == before + 1
    f(torch.ones(3))
    assert dev.dynamo_graphs() == before + 1, "the same shape reuses its graph"
    f(torch.ones(5))
    assert dev.dynamo_graphs() == before + 2, "a new shape is a recompile"
