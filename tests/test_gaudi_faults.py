"""Faults a Gaudi user would hit, found reading the bridge's, optimum-habana's and Intel's
sources (issue 28, section 3); each test failed on the code before its fix."""

from __future__ import annotations

import subprocess

import pytest

import workbench as wb

pytestmark = pytest.mark.usefixtures("runs_in_tmp")


class _Spawned(Exception):
    """Raised by the recording Popen: the child's command and environment were seen."""


@pytest.fixture
def spawned(monkeypatch):
    """Every child process this test starts: its environment is recorded, and it is not run."""
    seen = []

    def popen(cmd, *args, env=None, **kw):
        seen.append(dict(env) if env is not None else None)
        raise _Spawned(cmd)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return seen


# ------------------------------------------------------------ 1. children's device environment
@pytest.fixture
def kernel_took_a_card(monkeypatch):
    """The kernel ran on the HPU: torch.hpu.set_device / the hccl import set these
    (gaudi-pytorch-bridge @ 5a56187 hpu/__init__.py, distributed/hccl/__init__.py)."""
    monkeypatch.setenv("HLS_MODULE_ID", "0")
    monkeypatch.setenv("ID", "0")
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "2,3")


@pytest.mark.slow
def test_launch_workers_do_not_inherit_the_kernels_card(kernel_took_a_card, spawned):
    with pytest.raises(_Spawned):
        wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), devices=2, max_steps=1,
                  live=False)
    (env,) = spawned
    assert env is not None, "torchrun must get an explicit environment"
    assert "HLS_MODULE_ID" not in env and "ID" not in env
    assert env["HABANA_VISIBLE_MODULES"] == "2,3"  # the caller's choice of cards passes


@pytest.mark.slow
def test_doctor_ranks_do_not_inherit_the_kernels_card(kernel_took_a_card, spawned, tmp_path):
    from workbench.backends.registry import device
    from workbench.checks import checkup

    visit = checkup._Visit(dev=device("cpu"), error=None, spec="cpu", out=tmp_path, multi=True,
                           versions={})
    with pytest.raises(_Spawned):
        checkup._all_reduce(visit)
    (env,) = spawned
    assert "HLS_MODULE_ID" not in env and "ID" not in env
    assert env["HABANA_VISIBLE_MODULES"] == "2,3" and env["LOCAL_RANK"] == "0"


# ------------------------------------------------------------ 2. the profiler under the 1.19 bridge
def test_hpu_profile_asks_for_cpu_and_hpu_in_the_bridges_enum(fake_hpu):
    import importlib

    import torch

    from workbench.backends._bridge import bridge
    from workbench.training.profiler import _activities

    assert bridge() is not None  # the double replaced torch.profiler's enum, as 1.19 does
    enum = torch.profiler.ProfilerActivity
    assert enum is not torch.autograd.ProfilerActivity
    activities = _activities("hpu")
    assert activities == [enum.CPU, enum.HPU]
    native = importlib.import_module("habana_frameworks.torch.utils._activity_profiler_C")
    with torch.profiler.profile(activities=activities) as prof:
        torch.ones(4).sum()
    assert ("start",) in native.calls and ("stop",) in native.calls  # HPU profiling ran
    assert any(e.key == "aten::sum" for e in prof.key_averages())  # and CPU time too


def test_cpu_profile_activities_are_torchs_own():
    import torch

    from workbench.training.profiler import _activities

    assert _activities("cpu") == [torch.profiler.ProfilerActivity.CPU]


# ------------------------------------------------------------ 5. a bridge that fails to import
@pytest.fixture
def broken_bridge(tmp_path, monkeypatch):
    """habana_frameworks as a pip-replaced torch leaves it: its import fails in the bridge's
    own version check (gaudi-pytorch-bridge @ 5a56187, habana_frameworks/torch/__init__.py)."""
    import sys

    from workbench.backends.registry import clear_cache

    root = tmp_path / "site"
    (root / "habana_frameworks" / "torch").mkdir(parents=True)
    (root / "habana_frameworks" / "__init__.py").write_text("")
    (root / "habana_frameworks" / "torch" / "__init__.py").write_text(
        "raise AssertionError('Error: Compile-time major/minor PyTorch version 2.5.1 differs from "
        "run-time 2.13.0.')\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("WORKBENCH_DEVICE", raising=False)
    clear_cache()
    yield
    for name in [m for m in sys.modules if m.split(".")[0] == "habana_frameworks"]:
        del sys.modules[name]
    clear_cache()


@pytest.fixture
def hlml_cards(monkeypatch):
    """HLML (the pyhlml double) lists ``n`` Gaudi cards."""
    import importlib.util
    import sys

    from conftest import FAKES

    path = FAKES / "pyhlml_double.py"
    spec = importlib.util.spec_from_file_location("pyhlml_double_faults", path)
    double = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pyhlml_double_faults", double)
    spec.loader.exec_module(double)
    monkeypatch.setitem(sys.modules, "pyhlml", double)

    def cards(n: int):
        double.CARDS[:] = [double.Card() for _ in range(n)]
        return double

    return cards


def test_a_bridge_that_fails_on_a_gaudi_machine_is_an_error_not_the_cpu(broken_bridge, hlml_cards):
    hlml_cards(8)
    with pytest.raises(RuntimeError) as caught:
        wb.device("auto")
    message = str(caught.value)
    assert "HLML lists 8 Gaudi cards" in message
    assert "Compile-time major/minor PyTorch version" in message  # the cause
    assert "never pip install torch over it" in message and "device='cpu'" in message  # the fix


def test_device_files_alone_show_the_cards(broken_bridge, hlml_cards, tmp_path, monkeypatch):

    hlml_cards(0)
    (tmp_path / "accel").mkdir()
    (tmp_path / "accel" / "accel0").write_text("")
    monkeypatch.setenv("WORKBENCH_HPU_DEVICE_FILES", str(tmp_path / "accel" / "accel[0-9]*"))
    with pytest.raises(RuntimeError, match="1 device file such as .*accel0"):
        wb.device("auto")


def test_a_broken_bridge_without_cards_still_means_no_hpu(broken_bridge, hlml_cards, monkeypatch):

    hlml_cards(0)
    monkeypatch.setenv("WORKBENCH_HPU_DEVICE_FILES", "/nonexistent/accel*")
    assert wb.device("auto").kind == "cpu"


# ------------------------------------------------------------ 4. the recipe cache in eager mode
def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    import sys

    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def eager_env(fake_env, tmp_path):
    """A fresh Python with the double installed, eager mode, no recipe cache chosen yet."""
    from conftest import ROOT

    env = {**fake_env, "WORKBENCH_CACHE": str(tmp_path / "cache"), "PT_HPU_LAZY_MODE": "0",
           "PYTHONPATH": f"{fake_env['PYTHONPATH']}:{ROOT}"}  # this checkout's workbench
    env.pop("PT_HPU_RECIPE_CACHE_CONFIG", None)
    return env


SEEN = ("import habana_frameworks.torch._recipe_cache_config as c; "
        "print('bridge saw', c.CONFIG)")


@pytest.mark.slow
def test_the_bridge_autoloaded_by_import_torch_sees_the_recipe_cache(eager_env, tmp_path):
    # the notebook's first cell: workbench, then torch (which loads the bridge in eager mode)
    done = _python("import sys, workbench as wb, torch\n"
                   "assert 'habana_frameworks.torch' in sys.modules  # autoloaded by torch\n"
                   "wb.device('hpu')\n" + SEEN, eager_env)
    assert done.returncode == 0, done.stderr
    assert f"bridge saw {tmp_path / 'cache' / 'hpu-recipes'},false,4096" in done.stdout


@pytest.mark.slow
def test_a_bridge_loaded_before_workbench_says_the_cache_is_off(eager_env):
    done = _python("import torch, warnings\n"
                   "with warnings.catch_warnings(record=True) as w:\n"
                   "    warnings.simplefilter('always')\n"
                   "    import workbench as wb\n"
                   "    wb.device('hpu')\n"
                   "print('warned:', *[str(x.message) for x in w])\n" + SEEN, eager_env)
    assert done.returncode == 0, done.stderr
    assert "bridge saw None" in done.stdout  # torch loaded it before anything set the variable
    assert "the HPU recipe cache is off in this process" in done.stdout
    assert "Import workbench before torch" in done.stdout


# ------------------------------------------------------------ 8. what the doctor and the docs say
def test_the_clipping_hint_names_what_computes_the_norm():
    from workbench.checks.diagnosis import clip_ran

    check = clip_ran("bert.clip", [{"step": 1}])
    assert check.status == "fail"
    assert "FusedClipNorm" not in check.fix  # not called since the Trainer clips alone
    assert "clip_grad_norm_" in check.fix


@pytest.mark.policy
def test_the_panel_doc_quotes_the_missing_library_message_as_it_is(monkeypatch):
    import sys

    from workbench.backends import monitor
    from workbench.backends.registry import monitor_all

    from conftest import ROOT

    monkeypatch.setitem(sys.modules, "pyhlml", None)  # not installed: import fails
    monitor.clear_cache()
    try:
        notes = {n["kind"]: f"{n['title']}: {n['why']}" for n in monitor_all()["notes"]}
    finally:
        monitor.clear_cache()
    assert "habana-pyhlml not installed" in notes["hpu"]  # the PyPI name, not the module's
    assert notes["hpu"] in (ROOT / "docs" / "lab-panel.md").read_text().replace("\n    ", " ")


# ------------------------------------------------------------ 3. sampling loops mark each step
@pytest.fixture
def steps_marked(monkeypatch):
    """Every mark_step the CPU backend record is asked for (the loops reach the device's
    mark_step through its record, so the CPU's record shows how often they would on a Gaudi)."""
    import dataclasses

    from workbench.backends.registry import BACKENDS

    marks = []
    cpu = BACKENDS["cpu"]
    record = dataclasses.replace(cpu, calls=dataclasses.replace(cpu.calls, mark_step=lambda: marks.append(1)))
    monkeypatch.setitem(BACKENDS, "cpu", record)
    return marks


def test_the_unet_sampler_marks_each_denoising_step(steps_marked):
    from diffusers import UNet2DModel

    from workbench.diffusion.denoising import DiffusionModel

    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1,
                       block_out_channels=(8, 8), norm_num_groups=4,
                       down_block_types=("DownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "UpBlock2D"))
    images = DiffusionModel(unet, num_train_timesteps=20).sample(n=1, steps=4)
    assert len(images) == 1 and len(steps_marked) == 4


def test_text_to_image_sampling_and_its_grid_mark_each_step(steps_marked):
    from workbench.diffusion.texttoimage import from_spec, sample_grid

    model = from_spec(wb.model("sd"))
    assert len(model.sample(["a seven"], steps=3, guidance=1.0)) == 1
    assert len(steps_marked) == 3
    png, columns = sample_grid(model, ["a one", "a two"], steps=2)
    assert png.startswith(b"\x89PNG") and columns == 2 and len(steps_marked) == 5


def test_generation_marks_each_new_token(steps_marked, make_run, runs_in_tmp):
    from workbench.rundir.run import RunDir

    run = RunDir(make_run(runs_in_tmp, "lm", model="gpt2-tiny", data="docstrings-lm"))
    run.hold(*wb.model("gpt2-tiny").build())  # the model as the training process holds it
    texts = run.generate(["Return the", "If the"], max_new_tokens=5, min_new_tokens=5)
    assert len(texts) == 2 and all(t.startswith(("Return the", "If the")) for t in texts)
    assert len(steps_marked) == 10  # 5 tokens for each of 2 prompts


def test_generation_is_for_language_models(make_run, runs_in_tmp):
    from workbench.rundir.run import RunDir

    run = RunDir(make_run(runs_in_tmp, "unet", model="unet", data="digits"))
    with pytest.raises(ValueError, match="language-model runs .* use run.sample"):
        run.generate("hello")


# ------------------------------------------------------------ 7. Kubernetes manifests for Gaudi
def _device_pods(cmd) -> dict:
    """Every pod template that drives devices, by role, from the printed manifests."""
    import yaml

    pytorchjob, mpijob = yaml.safe_load_all(cmd.kubernetes)
    replicas = pytorchjob["spec"]["pytorchReplicaSpecs"]
    pods = {f"PyTorchJob {k}": v["template"] for k, v in replicas.items()}
    pods["MPIJob Worker"] = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    return pods


def test_gaudi_pods_ask_for_what_intels_manifests_set():
    kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes client (dev extra)")
    cmd = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=2, devices_per_node=8,
                            format="kubernetes", accelerator="hpu", image="registry.example/wb:1")
    api = kubernetes.client.ApiClient()
    for role, pod in _device_pods(cmd).items():
        # Kubernetes' own core/v1 models read every field (a misspelt one would be dropped)
        typed = api.deserialize(_Response(pod), "V1PodTemplateSpec")
        assert api.sanitize_for_serialization(typed) == pod, role
        spec, (container,) = pod["spec"], pod["spec"]["containers"]
        assert spec.get("hostIPC") is True, role
        assert "SYS_NICE" in container["securityContext"]["capabilities"]["add"], role
        limits, requests = container["resources"]["limits"], container["resources"]["requests"]
        assert limits["habana.ai/gaudi"] == "8" and limits["hugepages-2Mi"] == "95000Mi", role
        assert requests["hugepages-2Mi"] == limits["hugepages-2Mi"] and "memory" in limits, role
        shm = [m["name"] for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        assert shm and {"name": shm[0], "emptyDir": {"medium": "Memory"}} in spec["volumes"], role


def test_mpijob_workers_make_ssh_host_keys_before_sshd():
    import yaml

    cmd = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=2, devices_per_node=8,
                            format="kubernetes", accelerator="hpu", image="registry.example/wb:1")
    mpijob = list(yaml.safe_load_all(cmd.kubernetes))[1]
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    line = " ".join(worker["command"] + worker["args"])
    assert "ssh-keygen -A" in line and line.index("ssh-keygen -A") < line.index("sshd -De")


def test_gpu_pods_get_none_of_gaudis_needs():
    cmd = wb.launch_command("gpt2-tiny", "docstrings-lm", nodes=1, devices_per_node=4,
                            format="kubernetes", accelerator="cuda", image="x")
    for role, pod in _device_pods(cmd).items():
        assert "hostIPC" not in pod["spec"], role
        assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "4"}}


class _Response:
    """What the kubernetes client's deserialize() reads: a body with ``.data``."""

    def __init__(self, body):
        import json

        self.data = json.dumps(body)


# ------------------------------------------------------------ 6. the Python and torch claimed
def _floor(spec: str) -> tuple[int, ...]:
    """The lower bound of a ``>=`` specifier, as a version tuple."""
    from packaging.specifiers import SpecifierSet

    (low,) = [s.version for s in SpecifierSet(spec) if s.operator == ">="]
    return tuple(int(p) for p in low.split(".")[:2])


def _pyproject() -> dict:
    import tomllib

    from conftest import ROOT

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_python_and_torch_declared_are_what_transformers_needs():
    import importlib.metadata

    from packaging.requirements import Requirement

    project = _pyproject()
    theirs = importlib.metadata.metadata("transformers")["Requires-Python"]
    assert _floor(project["project"]["requires-python"]) >= _floor(theirs) == (3, 11)
    assert project["tool"]["ruff"]["target-version"] == "py311"
    # transformers takes torch only from 2.6 (its "torch" extra; utils/import_utils.py
    # is_torch_available is False below 2.6): a lower floor here would be a false claim
    ours = [Requirement(r) for r in project["project"]["dependencies"]]
    (torch_req,) = [r for r in ours if r.name == "torch"]
    extra = [Requirement(r) for r in importlib.metadata.requires("transformers")
             if r.startswith("torch>=") and 'extra == "torch"' in r]
    assert _floor(str(torch_req.specifier)) >= _floor(str(extra[0].specifier)) == (2, 6)


@pytest.mark.parametrize("version,ok", [("3.10", False), ("3.12", True)])
def test_make_stops_at_once_on_an_unsupported_python(tmp_path, version, ok):
    import shutil

    from conftest import ROOT

    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    fake = tmp_path / "python"  # answers the Makefile's two questions as that Python would
    minor = int(version.split(".")[1])
    fake.write_text(f"#!/bin/sh\ncase \"$*\" in *'>= (3, 11)'*) echo {int(minor >= 11)} ;; "
                    f"*) echo {version} ;; esac\n")
    fake.chmod(0o755)
    # -n: nothing is run, and the check is made as the Makefile is read
    done = subprocess.run(["make", "-n", "-C", str(ROOT), f"PYTHON={fake}", "python"],
                          capture_output=True, text=True, timeout=60)
    if ok:
        assert done.returncode == 0, done.stderr
        assert f"Python {version}" in done.stdout
    else:
        assert done.returncode != 0
        assert f"is Python {version}; gaudi-workbench needs Python 3.11 or newer" in done.stderr
        assert "Ubuntu 24.04 (Python 3.12" in done.stderr and "1.24 torch 2.10" in done.stderr


# ------------------------------------------------------------ DeepSpeed on Gaudi is Intel's fork
def test_a_zero_launch_without_deepspeed_names_intels_fork_on_gaudi(fake_env, tmp_path):
    """Intel supports only its DeepSpeed fork on Gaudi (the Makefile's Gaudi branch installs no
    upstream DeepSpeed): a ZeRO launch where none is installed says how to get the fork, before
    any run directory is written."""
    code = ("import sys; sys.modules['deepspeed'] = None  # as where no DeepSpeed is installed\n"
            "import workbench as wb\n"
            "try:\n"
            "    wb.launch('gpt2-tiny', 'docstrings-lm', devices=2, strategy='deepspeed')\n"
            "except ImportError as e:\n"
            "    print('refused:', e)\n"
            "print('runs:', len(wb.runs()))\n")
    env = {**fake_env, "WORKBENCH_RUNS": str(tmp_path / "runs")}
    done = _python(code, env)
    assert done.returncode == 0, done.stderr
    assert "refused: strategy='deepspeed' needs DeepSpeed" in done.stdout
    assert "github.com/HabanaAI/DeepSpeed.git@" in done.stdout
    assert "runs: 0" in done.stdout


@pytest.mark.parametrize("release", ["current", "1.19"])
@pytest.mark.slow
def test_the_notebook_import_orders_with_the_mode_unset(eager_env, tmp_path, release):
    """A notebook that sets nothing (PT_HPU_LAZY_MODE unset): importing torch (or
    transformers) first loads a current bridge at once, before workbench can choose the
    recipe cache, and `import workbench` then says the cache is off and how to keep it; a
    1.19 bridge waits (unset means lazy, no autoload), so both orders keep it there."""
    env = {k: v for k, v in eager_env.items() if k != "PT_HPU_LAZY_MODE"}
    env["FAKE_HPU_RELEASE"] = release
    cache = f"{tmp_path / 'cache' / 'hpu-recipes'},false,4096"
    first = _python("import sys, workbench as wb, transformers\nwb.device('hpu')\n" + SEEN, env)
    assert first.returncode == 0, first.stderr
    assert f"bridge saw {cache}" in first.stdout
    later = _python("import torch, transformers, warnings\n"
                    "with warnings.catch_warnings(record=True) as w:\n"
                    "    warnings.simplefilter('always')\n"
                    "    import workbench as wb\n"
                    "    wb.device('hpu')\n"
                    "print('warned:', *[str(x.message) for x in w])\n" + SEEN, env)
    assert later.returncode == 0, later.stderr
    if release == "current":
        assert "bridge saw None" in later.stdout
        assert "the HPU recipe cache is off in this process" in later.stdout
        assert "Import workbench before torch" in later.stdout
    else:
        assert f"bridge saw {cache}" in later.stdout and "cache is off" not in later.stdout
