"""The backend table: CPU for real, HPU against the test double in tests/fakes."""

from __future__ import annotations

import subprocess
import sys

import pytest

import workbench as wb
from workbench.device import BACKENDS, devices


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
    assert BACKENDS["hpu"].compile_backend == "hpu_backend"
    assert BACKENDS["hpu"].optimizer == "hpex_fused_adamw"
    assert BACKENDS["cuda"].optimizer == "adamw_torch_fused"
    assert BACKENDS["cpu"].optimizer == "adamw_torch_fused"


# ---------------------------------------------------------------- HPU via the test double
def test_hpu_detected_through_test_double(fake_hpu):
    d = wb.device()
    assert d.kind == "hpu" and d.available and d.count == 8
    assert d.generation == "Gaudi2" and d.name == "GAUDI2"
    assert d.precision == "bf16" and d.dist_backend == "hccl"
    assert d.mode == "eager"  # current Gaudi default
    assert d.torch_device == "hpu:0"
    assert d.versions["habana_frameworks"] == "0.0.0-fake"


@pytest.mark.parametrize("gen,name", [("1", "Gaudi1"), ("3", "Gaudi3")])
def test_hpu_generation(fake_hpu, monkeypatch, gen, name):
    monkeypatch.setenv("FAKE_HPU_GENERATION", gen)
    assert wb.device("hpu").generation == name


def test_hpu_memory_stats_keys_map(fake_hpu):
    import habana_frameworks.torch.hpu as fake

    d = wb.device("hpu")
    fake.fake_allocate(3_000)
    fake.fake_allocate(5_000)
    stats = fake.memory_stats()
    assert d.memory() == {"allocated": stats["InUse"], "peak": stats["MaxInUse"], "total": stats["Limit"]}
    assert d.memory()["allocated"] >= 8_000 and d.total_memory == 96 * 1024**3
    d.reset_peak_memory()
    assert d.memory()["peak"] == d.memory()["allocated"]


def test_mark_step_runs_only_in_lazy_mode(fake_hpu, monkeypatch):
    from habana_frameworks.torch.core import MARK_STEPS

    d = wb.device("hpu")
    before = MARK_STEPS[0]
    d.mark_step()
    assert MARK_STEPS[0] == before, "eager mode must not call mark_step"
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "1")
    d = wb.device("hpu")
    assert d.mode == "lazy"
    d.mark_step()
    d.mark_step()
    assert MARK_STEPS[0] == before + 2


def test_no_hpu_devices_falls_back(fake_hpu, monkeypatch):
    monkeypatch.setenv("FAKE_HPU_COUNT", "0")
    assert wb.device().kind == "cpu"
    with pytest.raises(RuntimeError, match="'hpu'.*not available"):
        wb.device("hpu")


# ---------------------------------------------------------------- import stays light
LIGHT = (
    "import sys, workbench, workbench.cli; "
    "heavy = {'transformers', 'datasets', 'habana_frameworks', 'torch'} & set(sys.modules); "
    "assert not heavy, heavy"
)


def test_import_is_light():
    subprocess.run([sys.executable, "-c", LIGHT], check=True)


def test_import_never_loads_bridge_even_when_present(fake_env):
    subprocess.run([sys.executable, "-c", LIGHT], check=True, env=fake_env)


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
