"""One card per process in the bridge's test double (tests/fakes/.../torch/_card.py).

Each check runs in fresh processes: a card is held for the life of the process that took it.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import FAKES

CARD = FAKES / "habana_frameworks" / "torch" / "_card.py"
HOLD = textwrap.dedent(f"""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("card", {str(CARD)!r})
    _card = importlib.util.module_from_spec(spec)  # without torch: the holder starts fast
    spec.loader.exec_module(_card)
    print(_card.acquire(), flush=True)
    sys.stdin.readline()  # hold the card until the test closes stdin
""")


def _env(fake_env, **extra):
    env = {k: v for k, v in fake_env.items()
           if k not in ("HLS_MODULE_ID", "HABANA_VISIBLE_MODULES", "WORLD_SIZE", "LOCAL_RANK",
                        "RANK", "PT_HPU_LAZY_MODE")}
    env.update({"PT_HPU_LAZY_MODE": "0", "FAKE_HPU_COUNT": "2", **extra})
    return env


@pytest.fixture
def holder(fake_env):
    """``holder(**env)``: a process that took a card; returns the module id it holds."""
    procs = []

    def start(**extra):
        proc = subprocess.Popen([sys.executable, "-c", HOLD], env=_env(fake_env, **extra),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()  # waits until the card is taken (or the process died)
        assert line.strip(), proc.communicate()
        return int(line)

    yield start
    for proc in procs:
        proc.communicate(input="\n", timeout=30)


def _probe(fake_env, code, **extra):
    """Run ``code`` (which sets ``out``) in a fresh process; its JSON ``out`` or its error."""
    script = "import json, torch, habana_frameworks.torch\nout = {}\n" + textwrap.dedent(code)
    script += "\nprint(json.dumps(out))"
    done = subprocess.run([sys.executable, "-c", script], env=_env(fake_env, **extra),
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
        return {"error": done.stderr}
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_cannot_take_a_held_card(fake_env, holder):
    assert holder(HLS_MODULE_ID="1") == 1
    out = _probe(fake_env, "out['name'] = torch.hpu.get_device_name()",
                 HLS_MODULE_ID="1", HABANA_VISIBLE_MODULES="0,1")
    assert "synStatus=20 [Device already acquired] Device acquire failed." in out["error"]


@pytest.mark.slow
def test_without_a_module_id_a_process_takes_the_first_free_card(fake_env, holder):
    assert holder() == 0
    assert holder() == 1
    out = _probe(fake_env, "out['stats'] = torch.hpu.memory_stats()")
    assert "Device already acquired" in out["error"]  # FAKE_HPU_COUNT=2: none left


@pytest.mark.slow
def test_visible_modules_limit_the_choice(fake_env, holder):
    assert holder(HABANA_VISIBLE_MODULES="1") == 1
    out = _probe(fake_env, "out['n'] = torch.hpu.memory_allocated()", HABANA_VISIBLE_MODULES="1")
    assert "Device already acquired" in out["error"]


@pytest.mark.slow
def test_a_taken_module_id_falls_back_to_a_free_card_as_the_bridge_does(fake_env, holder):
    # device.cpp:417-441 @ 5a56187: without HABANA_VISIBLE_MODULES, and with at least
    # WORLD_SIZE devices, a failed acquire by module id proceeds without the module id
    assert holder(HLS_MODULE_ID="0") == 0
    out = _probe(fake_env, "from habana_frameworks.torch import _card\n"
                 "torch.hpu.synchronize()\nout['held'] = _card.held()", HLS_MODULE_ID="0")
    assert out == {"held": 1}


@pytest.mark.slow
def test_counting_does_not_acquire_and_acquiring_is_once_per_process(fake_env, holder):
    holder(), holder()  # both cards taken
    out = _probe(fake_env, """
        from habana_frameworks.torch import _card
        out['available'] = torch.hpu.is_available()
        out['count'] = torch.hpu.device_count()
        out['bf16'] = torch.hpu.is_bf16_supported()
        torch.hpu.set_device(0)
        out['held'] = _card.held()
    """)
    assert out == {"available": True, "count": 2, "bf16": True, "held": None}
    out = _probe(fake_env, """
        from habana_frameworks.torch import _card
        out['ids'] = [_card.acquire(), _card.acquire()]
        out['name'] = torch.hpu.get_device_name()
        out['held'] = _card.held()
    """, FAKE_HPU_COUNT="3")
    assert out == {"ids": [2, 2], "name": "GAUDI2", "held": 2}
    out = _probe(fake_env, """
        from habana_frameworks.torch import _card
        out['before'] = _card.held()
        out['device'] = str(torch.ones(1, device='hpu').device)  # torch calls torch.hpu._lazy_init
        out['held'] = _card.held()
    """, FAKE_HPU_COUNT="3")
    assert out == {"before": None, "device": "hpu:0", "held": 2}, "the first tensor takes the card"


def test_a_build_killed_mid_way_does_not_hang_the_next_import(tmp_path, on_hpu):
    """A torch extension build killed mid-way leaves torch's ``lock`` file in the build
    folder, and torch's next build waits for it to vanish, forever and silently. The double
    takes its own flock before building (freed by the kernel when a process dies), so a
    ``lock`` found while holding it is stale: removed, with a word."""
    import os
    import shutil

    from emulated_hpu import ROOT, environment

    # the shared cache exists (built once, by this or an earlier process)
    built = on_hpu("import habana_frameworks.torch.hpu as hpu, habana_frameworks._device as d\n"
                   "out['folder'] = d.build_dir().name")["folder"]  # this torch's build
    builds = tmp_path / "build"
    shutil.copytree(Path(os.environ.get("FAKE_HPU_BUILD_DIR") or ROOT / ".fake_hpu_build") / built,
                    builds / built)
    (builds / built / "build.lock").unlink(missing_ok=True)
    (builds / built / "lock").write_text("")  # what torch's FileBaton leaves when killed
    env = environment(tmp_path, FAKE_HPU_BUILD_DIR=str(builds))
    done = subprocess.run(
        [sys.executable, "-c", "import torch, habana_frameworks.torch.hpu as hpu; "
                               "print('cards', hpu.device_count())"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "cards 8" in done.stdout, done.stderr[-3000:]
    assert "left by an extension build that was killed" in done.stderr
    assert not any(builds.glob("*/lock"))
