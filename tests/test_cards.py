"""One Gaudi card per process, made visible (issue 29), on the emulated node of the bridge
double: a card is a device file under ``FAKE_HPU_DEV_DIR`` that the process taking it keeps
open and locked for its life (tests/fakes/habana_frameworks/torch/_card.py).

Each check that takes a card does it in a fresh process: a card is held until its process
exits, so the pytest process itself never takes one.
"""

import json
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import workbench as wb

from conftest import FAKES

pytestmark = pytest.mark.usefixtures("runs_in_tmp")

ROOT = str(Path(wb.__file__).parents[1])  # this checkout's package, wherever a test's cwd is
TAKE = "import torch, habana_frameworks.torch\ntorch.hpu.memory_stats()  # the bridge acquires\n"


def _env(**extra) -> dict:
    """This test's environment (the ``fake_hpu`` fixture's cards) for a fresh process."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HLS_MODULE_ID", "HABANA_VISIBLE_MODULES", "WORLD_SIZE", "LOCAL_RANK",
                        "RANK")}
    paths = [str(FAKES), os.environ.get("PYTHONPATH", "")]
    env.update({"PYTHONPATH": os.pathsep.join(p for p in paths if p), "PT_HPU_LAZY_MODE": "0"})
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], ROOT])
    return env


@pytest.fixture
def process(fake_hpu):
    """``process(code, **env)``: a Python process that runs ``code``, prints "ready" and then
    waits (holding whatever it took) until the test ends; returns its pid."""
    procs = []

    def start(code: str, **extra) -> int:
        script = code + "\nprint('ready', flush=True)\nimport sys; sys.stdin.readline()\n"
        proc = subprocess.Popen([sys.executable, "-c", script], env=_env(**extra), text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        procs.append(proc)
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.communicate(timeout=60)
        return proc.pid

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.communicate(input="\n", timeout=60)


def _run(code: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=_env(**extra), capture_output=True,
                          text=True, timeout=300)


# ------------------------------------------------------------------ 1. probing never acquires
PROBES = {
    "device": "wb.device()",
    "devices": "wb.devices()",
    "device-hpu": "d = wb.device('hpu'); d.name, d.total_memory, d.generation, d.count",
    "launch_command": ("wb.launch_command('gpt2-tiny', wb.dataset('docstrings-lm', limit=16), "
                       "nodes=2, devices_per_node=1, hosts=['node-0', 'node-1'], max_steps=1)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("probe", list(PROBES))
def test_after_a_probe_another_process_takes_that_card(process, probe):
    """On a one-card node, a process that asked what devices exist (and is still alive) has
    left the card free: another process takes it. (Before issue 29 the probe went through
    ``torch.hpu.get_device_name`` / ``memory_stats`` and the second process failed with
    "Device acquire failed".)"""
    process("import workbench as wb\n" + PROBES[probe], FAKE_HPU_COUNT="1")
    done = _run(TAKE + "print('took it')", FAKE_HPU_COUNT="1")
    assert done.returncode == 0 and "took it" in done.stdout, done.stderr[-2000:]


def test_the_probe_reads_hlml_for_count_name_memory_and_generation(fake_hpu, monkeypatch):
    monkeypatch.setenv("FAKE_HPU_GENERATION", "3")
    monkeypatch.setenv("FAKE_HPU_COUNT", "4")
    dev = wb.device("hpu")
    assert (dev.count, dev.name, dev.generation) == (4, "HL-325L", "Gaudi3")
    # Gaudi 3's allocator pool is not in the chip table (no published figure): HLML's HBM total
    assert dev.total_memory == 128 * 2**30 and len(dev.cards) == 4
    assert all(c.free for c in dev.cards) and dev.held is None and dev.holding is None
    assert "torch.hpu" not in sys.modules or not sys.modules["torch.hpu"].is_initialized()


def test_device_files_come_from_one_documented_place(fake_hpu, monkeypatch, tmp_path):
    from workbench.backends import devicefiles as hpu  # the one place (hpu and _bridge read it)

    for name in ("accel0", "accel1", "accel_controlD0", "hl2"):
        (tmp_path / name).touch()
    monkeypatch.setenv(hpu.DEVICE_FILES_ENV, f"{tmp_path}/accel*{os.pathsep}{tmp_path}/hl[0-9]*")
    assert hpu.device_files() == {0: f"{tmp_path}/accel0", 1: f"{tmp_path}/accel1",
                                  2: f"{tmp_path}/hl2"}
    monkeypatch.delenv(hpu.DEVICE_FILES_ENV)
    assert hpu.DEVICE_FILES == ("/dev/accel/accel*", "/dev/hl[0-9]*")


# ------------------------------------------------------------------ 2. what this process holds
@pytest.mark.slow
def test_a_process_that_trained_knows_its_card_and_says_so(fake_hpu):
    code = textwrap.dedent("""
        import json, workbench as wb
        from workbench.views.dashboard import holding
        dev = wb.device("hpu")
        before = dev.held
        dev.memory()  # what training reads first: the bridge takes a card
        dev = wb.device("hpu")
        print(json.dumps({"before": before, "held": dev.held.title, "says": dev.holding,
                          "repr": repr(dev), "html": dev._repr_html_(),
                          "header": holding("hpu"), "cpu": holding("cpu")}))
    """)
    done = _run(code)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before"] is None and out["held"] == "Gaudi 0 (module 0)"
    assert out["says"].startswith("this process holds Gaudi 0 (module 0) since ")
    assert out["says"].endswith("; it frees it when it exits")
    assert out["says"] in out["repr"] and out["says"] in out["html"]
    assert out["header"] == out["says"] and out["cpu"] == "", "the dashboard's header says it"


@pytest.mark.slow
def test_devices_and_the_cli_name_the_holder_and_its_notebook(process):
    pid = process(TAKE, JPY_SESSION_NAME="notebooks/05_llama_lora.ipynb")
    other = process(TAKE)
    cards = wb.device("hpu").cards
    me = pwd.getpwuid(os.getuid()).pw_name  # each holder's user, from the OS
    assert cards[0].describe() == (f"Gaudi 0 (module 0): held by pid {pid} ({me}), "
                                   "kernel of 05_llama_lora.ipynb")
    assert cards[1].describe().startswith(f"Gaudi 1 (module 1): held by pid {other} ({me}): ")
    assert cards[0].holders[0].user == me
    assert [c.free for c in cards] == [False, False] + [True] * 6
    assert "held by pid" in repr(wb.devices()[0])
    done = _run("from workbench.commands.cli import main; main(['devices'])")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"Gaudi 0 (module 0): held by pid {pid} ({me}), kernel of 05_llama_lora.ipynb" in done.stdout
    assert "Gaudi 2 (module 2): free" in done.stdout


LAUNCH = """
import os
import workbench as wb
kw = dict(device="hpu", max_steps=2, batch_size=2, max_length=32, live=False)
train()  # in this process, on hpu:0: it keeps its card, as a kernel that trained
out["holding"] = wb.device("hpu").holding
runs_before = sorted(os.listdir(os.environ["WORKBENCH_RUNS"]))
try:
    wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), devices=2, **kw)
except RuntimeError as e:
    out["refused"] = str(e)
out["written_by_refusal"] = sorted(set(os.listdir(os.environ["WORKBENCH_RUNS"])) - set(runs_before))
run = wb.launch("gpt2-tiny", wb.dataset("docstrings-lm", limit=64), devices=1, **kw)
out["status"], out["error"] = run.status, run.summary.get("error")
out["env"] = run.spec.launch.env
out["cards_after"] = [c.describe() for c in wb.device("hpu").cards]
"""


def test_after_in_kernel_training_a_launch_uses_the_free_cards_or_refuses(on_hpu):
    """A process that trained on one of two emulated cards keeps it; ``wb.launch(devices=2)``
    refuses before any worker starts or anything is written, naming the card, its holder and
    the fixes; ``wb.launch(devices=1)`` trains in a worker on the other card
    (HABANA_VISIBLE_MODULES), which is free again when the run ends."""
    out = on_hpu(LAUNCH, FAKE_HPU_COUNT="2")
    assert out["holding"].startswith("this process holds Gaudi 0 (module 0) since ")
    refused = out["refused"]
    assert "wb.launch(devices=2) needs 2 free Gaudi cards; 1 is free here." in refused
    assert "Gaudi 0 (module 0): held by pid" in refused and "this process" in refused
    assert "devices=1" in refused and "wb.launch(devices=1), which trains in a worker" in refused
    assert out["written_by_refusal"] == [], "nothing written before the refusal"
    assert out["status"] == "completed", out["error"]
    assert out["env"] == {"HABANA_VISIBLE_MODULES": "1"}
    assert out["cards_after"][1] == "Gaudi 1 (module 1): free", "the worker freed its card"
    assert out["cards_after"][0].startswith("Gaudi 0 (module 0): held by pid")


def test_placement_without_holders_leaves_the_environment_alone(fake_hpu):
    from workbench.backends.registry import launch_env

    assert launch_env(wb.device("hpu"), 8) == {}
    assert launch_env(wb.device("cpu"), 2) == {}


@pytest.mark.slow
def test_placement_honours_the_callers_visible_modules(process, monkeypatch):
    from workbench.backends.registry import launch_env

    process(TAKE)  # card 0
    dev = wb.device("hpu")
    monkeypatch.setenv("HABANA_VISIBLE_MODULES", "0,3,5")
    assert launch_env(dev, 2) == {"HABANA_VISIBLE_MODULES": "3,5"}
    with pytest.raises(RuntimeError, match=r"needs 3 free Gaudi cards; 2 are free here"):
        launch_env(dev, 3)


@pytest.mark.slow
def test_the_doctor_says_what_this_process_holds(fake_hpu, tmp_path):
    code = textwrap.dedent(f"""
        import json, workbench as wb
        wb.device("hpu").memory()  # as a kernel that trained
        d = wb.doctor({str(tmp_path / "doctor")!r}, device="hpu", only="device", echo=False)
        print(json.dumps({{"detail": d.check("device").detail, "status": d.check("device").status}}))
    """)
    done = _run(code)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "pass" and "7 of 8 cards free" in out["detail"]
    assert "this process holds Gaudi 0 (module 0) since " in out["detail"], out["detail"]
    assert "Gaudi 0 (module 0): held by pid" in out["detail"]


def test_a_holder_names_its_user_from_the_os():
    from workbench.backends.cards import holder, owner

    me = pwd.getpwuid(os.getuid()).pw_name
    assert holder(os.getpid()).user == me == owner(os.getpid())
    assert owner(2**22 + 12345) is None, "a process that is gone has no user"


def test_no_card_names_the_holders_it_sees_and_what_to_do():
    """The bridge's refusal (every card held) becomes the workbench's message: the cards, the
    holders this process can see, the ones it cannot, the fixes, then the bridge's words."""
    from workbench.backends.cards import Card, Holder, no_card

    bridge = RuntimeError("synStatus=20 [Device already acquired] Device acquire failed.")
    seen = Holder(4242, "python -m ipykernel_launcher", None, "/home/alice/01_quickstart.ipynb",
                  "alice")
    cards = [Card("hpu", 0, "Gaudi2", "Gaudi", 2, holders=[seen]), Card("hpu", 1, "Gaudi2", "Gaudi", 0)]
    said = str(no_card(cards, bridge))
    assert said.startswith("no free Gaudi card for this process: all 2 are held. "
                           "Gaudi 0 (module 2): held by pid 4242 (alice), kernel of "
                           "01_quickstart.ipynb. 1 is held by other users' processes"), said
    assert "device='cpu'" in said and "sudo workbench devices" in said
    assert said.endswith(f"({bridge})")
    assert no_card(cards, RuntimeError("CUDA out of memory")) is None, "other errors pass"


def test_the_room_names_each_holders_run_and_step(tmp_path, make_run):
    """``workbench devices``' teacher's view: a holder's run is found under its own runs folder
    (its ``WORKBENCH_RUNS``, read from /proc), by the lock file naming its pid."""
    import socket

    from workbench.backends.cards import Card, Holder
    from workbench.server.holders import room

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"],
                             stdin=subprocess.PIPE, env={**os.environ,
                                                         "WORKBENCH_RUNS": str(tmp_path / "runs")})
    try:
        run = make_run(tmp_path / "runs", "20261206-1000-bert-tiny", args={"max_steps": 6},
                       summary={"step": 6, "ended": True, "max_steps": 6})
        (run / ".lock").write_text(f"pid {child.pid} on {socket.gethostname()}")
        other = make_run(tmp_path / "runs", "20261206-0900-bert-tiny")  # someone else's
        (other / ".lock").write_text(f"pid {child.pid + 1} on {socket.gethostname()}")
        card = Card("hpu", 0, "Gaudi2", "Gaudi", 2, holders=[
            Holder(child.pid, "python", None, "01_quickstart.ipynb", "alice")])
        [row] = room([card, Card("hpu", 1, "Gaudi2", "Gaudi", 0)])
        assert row == {"card": "Gaudi 0 (module 2)", "pid": child.pid, "user": "alice",
                       "notebook": "01_quickstart.ipynb", "run": str(run), "step": 6,
                       "status": "completed", "max_steps": 6}
    finally:
        child.communicate(b"\n", timeout=60)


# ------------------------------------------------------------------ 3. other users' holds
def test_this_users_holds_are_recorded_for_others_and_dropped_when_gone(process):
    """Listing the cards records this user's holds (``WORKBENCH_HOLDS``, one file per holding
    process, readable by all, in a folder made with /tmp's mode) and removes the record once
    that process holds nothing."""
    from workbench.backends import holds

    folder = holds.folder()
    pid = process(TAKE)
    assert not wb.device("hpu").cards[0].free
    assert folder.stat().st_mode & 0o7777 == 0o1777
    record = json.loads((folder / f"{pid}.json").read_text())
    assert record == {"pid": pid, "start": holds.started(pid, Path("/proc")),
                      "cards": [os.path.realpath(wb.device("hpu").cards[0].path)]}
    assert (folder / f"{pid}.json").stat().st_mode & 0o444 == 0o444
    os.kill(pid, 9)
    os.waitpid(pid, 0)  # gone, its card freed
    assert wb.device("hpu").cards[0].free
    assert not (folder / f"{pid}.json").exists(), "its user's next listing removed it"


@pytest.mark.slow
def test_a_user_sees_who_holds_the_cards_of_others_and_no_forged_record():
    """Two real Unix users: Linux hides alice's open files from bob, so her card reaches him
    through her hold record, named by the record's owner. Records that name another user's
    process, or a process under a start time not its own, or a process gone, show nothing."""
    import tempfile

    import unix_users

    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd (it makes two users)")
    top = Path(tempfile.mkdtemp(prefix="wb-holds-"))
    top.chmod(0o755)
    (top / "accel").mkdir(mode=0o755)
    (top / "holds").mkdir()
    (top / "holds").chmod(0o1777)  # as /tmp, or as the teacher makes it (docs/classroom.md)
    for i in range(2):
        (top / "accel" / f"accel{i}").touch()
        (top / "accel" / f"accel{i}").chmod(0o666)
    python, extra = unix_users.python()
    names = unix_users.users(2, top / "homes")
    alice, bob = names
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join([str(FAKES), ROOT]),
           "FAKE_HPU_DEV_DIR": str(top / "accel"), "FAKE_HPU_COUNT": "2",
           "WORKBENCH_HOLDS": str(top / "holds"), **extra}
    listing = ("import json\nfrom workbench.backends.cards import Card, with_holders\n"
               f"cards = with_holders([Card('hpu', i, 'Gaudi2', 'Gaudi', path={str(top)!r} + "
               "f'/accel/accel{i}') for i in range(2)])\n"
               "print(json.dumps([[[h.pid, h.user] for h in c.holders] for c in cards]), flush=True)\n")
    take = ("import importlib.util\nspec = importlib.util.spec_from_file_location('card', "
            f"{str(FAKES / 'habana_frameworks' / 'torch' / '_card.py')!r})\n"
            "card = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(card)\n"
            "card.acquire()\n" + listing
            + "import sys; sys.stdin.readline()\n")

    def seen_by(user: str) -> list:
        done = subprocess.run([str(python), "-c", listing], env=env, user=user, cwd=top,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    holder = subprocess.Popen([str(python), "-c", take], env=env, user=alice, cwd=top,
                              text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        assert json.loads(holder.stdout.readline()) == [[[holder.pid, alice]], []]
        me = os.getpid()
        forged = {me: (pwd.getpwnam(bob).pw_uid, holds_started(me)),  # root's process, by bob
                  os.getppid(): (0, holds_started(os.getppid()) + 1)}  # pid reused since
        for pid, (uid, start) in forged.items():
            path = top / "holds" / f"{pid}.json"
            path.write_text(json.dumps({"pid": pid, "start": start,
                                        "cards": [str(top / "accel" / "accel1")]}))
            os.chown(path, uid, -1)
        assert seen_by(bob) == [[[holder.pid, alice]], []], "alice's card, by her name; no forgery"
        holder.communicate("\n", timeout=60)
        assert (top / "holds" / f"{holder.pid}.json").exists(), "her record stays behind"
        assert seen_by(bob) == [[], []], "and shows nothing once its process is gone"
    finally:
        if holder.poll() is None:
            holder.kill()
        unix_users.remove(names)
        shutil.rmtree(top, ignore_errors=True)


def holds_started(pid: int) -> int:
    from workbench.backends.holds import started

    return started(pid, Path("/proc"))
