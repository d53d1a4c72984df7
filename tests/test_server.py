"""The Jupyter server extension (workbench.server), served by a real Jupyter server.

pytest-jupyter's server fixtures are imported into this module rather than registered
with ``pytest_plugins``: registered, the plugin's autouse fixtures (an event loop and a
ServerApp clean-up) and its test-call hook would apply to every test of the suite. Its
async client is driven here with ``jp_asyncio_loop.run_until_complete``.
Run directories are written with the package's own writing side (``writer.create``,
``RunWriter``, ``EventLog``); one test trains a real tiny model and stops it over HTTP.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (the fixtures, for this module only)
from tornado.httpclient import HTTPClientError

import workbench as wb
from workbench.rundir.run import STOP_FILE, EventLog, RunDir
from workbench.rundir.writer import RunWriter, create
from workbench.server.tail import LOSS_POINTS, EventTail

from conftest import FAKES, ROOT, wait_for

GiB = 2**30
SPEC = {"model": {"family": "gpt2", "size": "tiny", "task": "causal_lm"}, "data": {"source": "docstrings-lm"},
        "args": {"max_steps": 100}}


@pytest.fixture
def jp_server_config():
    # terminals off: pytest-jupyter adds them otherwise, and their websocket has no auth decorator
    return {"ServerApp": {"jpserver_extensions": {"workbench.server": True, "jupyter_server_terminals": False},
                          "allow_unauthenticated_access": False}}


@pytest.fixture
def api(jp_fetch, jp_asyncio_loop):
    """``api(name, params=..., method=..., body=...)``: the parsed JSON reply of workbench/<name>."""
    def call(name: str, **kwargs):
        reply = jp_asyncio_loop.run_until_complete(jp_fetch("workbench", name, **kwargs))
        return json.loads(reply.body)
    return call


@pytest.fixture
def refused(jp_fetch, jp_asyncio_loop):
    """``refused(code, name, ...)``: the request fails with HTTP ``code``; returns the reply's message."""
    def call(code: int, name: str, **kwargs) -> str:
        with pytest.raises(HTTPClientError) as e:
            jp_asyncio_loop.run_until_complete(jp_fetch("workbench", name, **kwargs))
        assert e.value.code == code, e.value.response.body if e.value.response else e.value
        return json.loads(e.value.response.body)["message"] if e.value.response.body else ""
    return call


# ------------------------------------------------------------------ writing runs
def new_run(folder: Path, name: str, events=()) -> Path:
    path = folder / "runs" / name
    path.mkdir(parents=True)
    create(path, SPEC)
    log = EventLog(path / "events.jsonl")
    for e in events:
        log.emit(e)
    return path


def training(steps, max_steps=100, warmup=10, seconds_per_step=0.5):
    """A run's events as the callbacks write them: the start, then one per logged step."""
    yield {"phase": "start", "step": 0, "max_steps": max_steps, "device": "cpu", "mem_total": 64 * GiB,
           "batch_size": 4, "world_size": 1}
    for s in steps:
        yield {"step": s, "phase": "warmup" if s <= warmup else "train", "loss": round(5.0 - s / 1000, 4),
               "tokens_per_s": 1000.0 + s, "samples_per_s": 10.0 + s, "mem_alloc": 1000 + s,
               "time": s * seconds_per_step}


def ended(path: Path, status: str, step: int, error: str | None = None) -> None:
    writer = RunWriter(RunDir(path)).claim()
    writer.begin({"device": {"kind": "cpu"}, "max_steps": 100})
    if status != "died":  # a writer killed before its end leaves "running" and a free lock
        writer.end({"status": status, "step": step, "error": error})
    writer.release()


@pytest.fixture
def running(jp_root_dir):
    """A run in training: this process holds its write lock, as the training process would."""
    path = new_run(jp_root_dir, "20250105-090000-live", training(range(10, 51, 10)))
    writer = RunWriter(RunDir(path)).claim()
    writer.begin({"device": {"kind": "cpu"}, "max_steps": 100})
    yield path
    writer.release()


# ------------------------------------------------------------------ devices
def test_devices_reads_the_cpu_and_says_why_gaudi_and_nvidia_are_missing(api, monkeypatch):
    spec = importlib.util.spec_from_file_location(f"nvml_{uuid.uuid4().hex}", FAKES / "pynvml_double.py")
    nvml = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, nvml)
    spec.loader.exec_module(nvml)
    nvml.DRIVER_LOADED = False  # NVML's binding installed, no driver: as on this machine
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # not installed
    reply = api("devices")
    [cpu] = reply["devices"]
    assert cpu["kind"] == "cpu" and cpu["index"] == 0 and cpu["name"]
    assert 0 <= cpu["util_pct"] <= 100 and 0 < cpu["mem_used"] < cpu["mem_total"]
    assert reply["notes"] == [
        {"kind": "hpu", "title": "Intel Gaudi", "why": "habana-pyhlml not installed: pip install 'gaudi-workbench[gaudi]'"},
        {"kind": "cuda", "title": "NVIDIA GPU",
         "why": "NVML could not start: NVML Shared Library Not Found (no NVIDIA driver here?)"}]
    assert isinstance(reply["time"], float)


# ------------------------------------------------------------------ the runs list
def test_runs_lists_every_run_under_the_root_newest_first(api, jp_root_dir, running):
    done = new_run(jp_root_dir, "20250101-100000-done", training(range(1, 501)))
    ended(done, "completed", 500)
    died = new_run(jp_root_dir / "projects" / "a", "20250102-100000-died", training([10, 20]))
    ended(died, "died", 20)
    crashed = new_run(jp_root_dir / "x" / "y" / "z", "20250103-100000-crashed", training([10]))
    ended(crashed, "failed", 10, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    for hidden in (jp_root_dir / ".trash", jp_root_dir / "node_modules", jp_root_dir / "a" / "b" / "c" / "d"):
        new_run(hidden, "20250109-000000-unseen")  # hidden, skipped, or 4 levels deep

    rows = {r["name"]: r for r in api("runs")["runs"]}
    assert list(rows) == ["20250105-090000-live", "20250103-100000-crashed", "20250102-100000-died",
                          "20250101-100000-done"]

    live = rows["20250105-090000-live"]
    assert live == {**live, "path": "runs/20250105-090000-live", "status": "running", "step": 50,
                    "max_steps": 100, "loss": 4.95, "tokens_per_s": 1050.0, "samples_per_s": 60.0,
                    "device": "cpu", "mem_alloc": 1050, "mem_total": 64 * GiB, "error": None,
                    "model": "gpt2-tiny", "data": "docstrings-lm"}
    assert live["loss_series"] == [[s, round(5.0 - s / 1000, 4)] for s in (10, 20, 30, 40, 50)]
    assert live["eta_s"] == pytest.approx(25.0)  # 50 steps left at 0.5 s a step (after warm-up)
    assert live["updated"] == pytest.approx(os.stat(running / "events.jsonl").st_mtime)

    done_row = rows["20250101-100000-done"]
    assert done_row["status"] == "completed" and done_row["step"] == 500 and done_row["eta_s"] is None
    series = done_row["loss_series"]
    assert len(series) == LOSS_POINTS and series[0] == [1, 4.999] and series[-1] == [500, 4.5]
    assert [p[0] for p in series] == sorted(p[0] for p in series)

    assert rows["20250102-100000-died"]["status"] == "failed"  # said running; nobody holds its lock
    assert rows["20250102-100000-died"]["path"] == "projects/a/runs/20250102-100000-died"
    crash = rows["20250103-100000-crashed"]
    assert crash["status"] == "failed" and crash["error"].startswith("RuntimeError: CUDA out of memory")
    assert crash["path"] == "x/y/z/runs/20250103-100000-crashed"


def test_runs_in_a_folder_of_any_name_are_listed_as_wb_runs_lists_them(api, jp_root_dir, running):
    """run_dir= and WORKBENCH_RUNS name any folder: the panel finds a folder of runs by what it
    holds, not by its name (it looked for folders named runs only)."""
    elsewhere = new_run(jp_root_dir / "tmp", "20250107-000000-mine", training([5]))
    moved = jp_root_dir / "experiments" / "bert" / elsewhere.name
    moved.parent.mkdir(parents=True)
    elsewhere.rename(moved)  # experiments/bert/<run>, as wb.train(run_dir="experiments/bert")
    (jp_root_dir / "notes").mkdir()
    (jp_root_dir / "notes" / "draft").mkdir()  # a folder without runs stays unlisted
    rows = {r["name"]: r for r in api("runs")["runs"]}
    assert list(rows) == ["20250107-000000-mine", "20250105-090000-live"]
    assert rows["20250107-000000-mine"]["path"] == "experiments/bert/20250107-000000-mine"
    assert list(wb.runs(jp_root_dir / "experiments" / "bert")["run"]) == ["20250107-000000-mine"]


def test_a_new_run_appears_once_its_folder_is_known(api, jp_root_dir, running):
    assert [r["name"] for r in api("runs")["runs"]] == ["20250105-090000-live"]
    new_run(jp_root_dir, "20250106-000000-next", training([5]))  # in a runs folder already found
    assert [r["name"] for r in api("runs")["runs"]] == ["20250106-000000-next", "20250105-090000-live"]


# ------------------------------------------------------------------ reading the log incrementally
def test_the_log_is_read_as_it_grows_restarts_when_rewritten_and_waits_for_whole_lines(api, running):
    log = EventLog(running / "events.jsonl")

    def row():
        [r] = api("runs")["runs"]
        return r

    assert row()["step"] == 50
    log.emit({"step": 60, "phase": "train", "loss": 4.5, "tokens_per_s": 2000.0, "time": 30.0})
    assert (row()["step"], row()["loss"], row()["tokens_per_s"]) == (60, 4.5, 2000.0)

    log.truncate_after(20)  # what a resume from checkpoint-20 does: the file is replaced
    log.emit({"phase": "start", "step": 20, "max_steps": 200, "device": "cpu", "mem_total": GiB})
    log.emit({"step": 30, "phase": "train", "loss": 3.0, "time": 5.0})
    r = row()
    assert r["loss_series"] == [[10, 4.99], [20, 4.98], [30, 3.0]]  # nothing counted twice
    assert (r["step"], r["max_steps"], r["mem_total"]) == (30, 200, GiB)

    line = json.dumps({"step": 40, "phase": "train", "loss": 2.5, "time": 10.0})
    with open(running / "events.jsonl", "a") as f:
        f.write(line[:17])  # the writer is mid-line
    assert row()["step"] == 30 and row()["loss"] == 3.0
    with open(running / "events.jsonl", "a") as f:
        f.write(line[17:] + "\n")
    assert (row()["step"], row()["loss"]) == (40, 2.5)
    assert row()["eta_s"] == pytest.approx((200 - 40) * 0.5)


def test_an_unchanged_log_costs_one_stat_and_a_shortened_one_is_read_again(tmp_path, monkeypatch):
    from workbench.rundir import events as events_module  # the reader EventTail reads through

    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for e in training([10, 20]):
        log.emit(e)
    tail = EventTail(path)
    tail.poll()
    opened = []
    real_open = open
    monkeypatch.setattr(events_module, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k), raising=False)
    tail.poll()
    assert opened == [] and tail.step == 20
    path.write_text(json.dumps({"step": 5, "phase": "train", "loss": 1.0}) + "\n")  # shorter, same file
    tail.poll()
    assert opened == [path] and tail.step == 5 and tail.losses == [[5, 1.0]]
    with open(path, "a") as f:
        f.write('{"step": 6, "phase": "tra\n')  # a line a kill cut short, then a whole one
        f.write(json.dumps({"step": 7, "phase": "train", "loss": 0.5}) + "\n")
    tail.poll()
    assert tail.step == 7 and tail.losses == [[5, 1.0], [7, 0.5]]


# ------------------------------------------------------------------ one run
def test_run_detail_has_summary_spec_last_events_and_checkpoints(api, refused, jp_root_dir):
    done = new_run(jp_root_dir, "20250101-100000-done", training(range(1, 101)))
    ended(done, "completed", 100)
    detail = api("run", params={"path": "runs/20250101-100000-done"})
    assert detail["path"] == "runs/20250101-100000-done" and detail["name"] == "20250101-100000-done"
    assert detail["status"] == "completed" and detail["summary"]["step"] == 100
    assert detail["spec"] == SPEC
    assert [e["step"] for e in detail["events"]] == list(range(51, 101))
    assert detail["checkpoints"] == [] and detail["samples"] is None
    # a text-to-image run's sample grids: the latest one whole, the event list without pictures
    grids = [{"phase": "samples", "step": s, "time": s * 0.5, "prompts": ["a handwritten one"], "columns": 1,
              "image": f"iVBORw0KGgo-{s}"} for s in (10, 20)]
    new_run(jp_root_dir, "20250101-110000-sd", [*training(range(1, 21)), *grids])
    detail = api("run", params={"path": "runs/20250101-110000-sd"})
    assert detail["samples"] == grids[-1]
    assert [e["step"] for e in detail["events"] if e["phase"] == "samples"] == [10, 20]
    assert not any("image" in e for e in detail["events"])
    assert "workbench/runs lists" in refused(404, "run", params={"path": "runs/nothing-here"})
    outside = new_run(jp_root_dir.parent / "elsewhere", "20250101-100000-theirs")  # a real run, outside the root
    assert "outside the server's root" in refused(404, "run", params={"path": "../elsewhere/runs/" + outside.name})
    assert "absolute path" in refused(404, "run", params={"path": str(done)})
    (jp_root_dir / "runs" / "link").symlink_to(outside.parent, target_is_directory=True)
    assert "outside" in refused(404, "run", params={"path": f"runs/link/{outside.name}"})
    assert "?path=" in refused(400, "run")


# ------------------------------------------------------------------ stopping
def test_stop_writes_the_runs_stop_file_and_refuses_what_cannot_stop(api, refused, jp_root_dir, running):
    reply = api("stop", method="POST", body=json.dumps({"path": "runs/20250105-090000-live"}))
    assert reply == {"path": "runs/20250105-090000-live", "status": "running", "stopping": True}
    assert (running / STOP_FILE).exists()

    done = new_run(jp_root_dir, "20250101-100000-done", training([10]))
    ended(done, "completed", 10)
    message = refused(409, "stop", method="POST", body=json.dumps({"path": "runs/20250101-100000-done"}))
    assert "is completed, not running" in message and not (done / STOP_FILE).exists()
    assert "no run directory" in refused(404, "stop", method="POST", body=json.dumps({"path": "runs/gone"}))
    assert "outside" in refused(404, "stop", method="POST", body=json.dumps({"path": "../x/runs/y"}))
    for body in ("", "not json", json.dumps({"run": "runs/x"}), json.dumps(["runs/x"]), json.dumps({"path": 3})):
        assert "'path'" in refused(400, "stop", method="POST", body=body, allow_nonstandard_methods=True)


def test_every_endpoint_refuses_an_unauthenticated_request(refused, running):
    from workbench.server.handlers import handlers

    anonymous = {"Authorization": ""}
    asked = {"run": {"params": {"path": "runs/20250105-090000-live"}},
             "saved": {"params": {"path": str(running)}},
             "stop": {"method": "POST", "body": json.dumps({"path": "runs/20250105-090000-live"})}}
    names = [rule[0].rsplit("/", 1)[-1] for rule in handlers("/", None)]
    assert {"devices", "cards", "runs", "run", "saved", "stop"} <= set(names)
    for name in names:
        refused(403, name, headers=anonymous, **asked.get(name, {}))
    assert not (running / STOP_FILE).exists()


def test_subshell_requests_leave_the_kernels_state_alone(jp_serverapp):
    """A status message answering a subshell request (JupyterLab opens one per widget comm, mid-
    cell) no longer sets the kernel's state, in the server or in JupyterLab's page config;
    tests/test_browser.py shows the indicator busy while a cell trains."""
    from workbench.server.kernelstate import SUBSHELL_MESSAGES

    manager = jp_serverapp.kernel_manager
    for message in ("create_subshell_request", "delete_subshell_request", "list_subshell_request"):
        assert message in SUBSHELL_MESSAGES
        assert not manager.track_message_type(message), message
    assert manager.track_message_type("execute_request") and manager.track_message_type("comm_msg")
    page = jp_serverapp.web_app.settings["page_config_data"]["untracked_message_types"]
    assert page == list(manager.untracked_message_types)


def test_the_lab_panel_page_names_every_endpoint():
    """docs/lab-panel.md's REST API list: every handler, the saved-mid-run heal's
    workbench/saved too (it was missing)."""
    from workbench.server.handlers import handlers

    page = " ".join((Path(__file__).parents[1] / "docs" / "lab-panel.md").read_text().split())
    for rule in handlers("/", None):
        assert f"/workbench/{rule[0].rsplit('/', 1)[-1]}" in page, rule[0]


# ------------------------------------------------------------------ a real run
@pytest.mark.slow
def test_a_real_training_run_is_listed_live_and_stopped_over_http(api, jp_root_dir):
    run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=200), max_steps=100000, batch_size=2,
                   max_length=32, save_every=1000, log_every=2, name="real", live=False, background=True,
                   run_dir=jp_root_dir / "runs")
    try:
        row = wait_for(lambda: next((r for r in api("runs")["runs"] if r["status"] == "running" and r["step"] >= 6
                                     and r["eta_s"] is not None), None), 300, "the run listed, training")
        assert row["path"] == f"runs/{run.path.name}" and row["device"] == "cpu" and row["model"] == "gpt2-tiny"
        assert row["max_steps"] == 100000 and row["loss"] > 0 and row["tokens_per_s"] > 0 and row["mem_total"] > 0
        assert api("stop", method="POST", body=json.dumps({"path": row["path"]}))["stopping"] is True
        run.wait(300)
    finally:
        run.stop()
    row = next(r for r in api("runs")["runs"] if r["name"] == run.path.name)
    assert row["status"] == "stopped" and row["eta_s"] is None and row["step"] == run.summary["step"]
    detail = api("run", params={"path": row["path"]})
    assert detail["checkpoints"] == [f"checkpoint-{row['step']}"]  # the stop saves one


# ------------------------------------------------------------------ staying light
NO_TORCH = textwrap.dedent("""
    import json, sys
    import workbench.server
    from workbench.server import _jupyter_server_extension_points, _jupyter_labextension_paths
    from workbench.server import handlers
    from workbench.server.runs import RunTable
    from workbench.backends.registry import monitor_all
    table = RunTable(sys.argv[1])
    rows = table.rows()
    detail = table.detail(rows[0]["path"])
    readings = monitor_all()
    heavy = [m for m in ("torch", "transformers", "datasets", "diffusers", "habana_frameworks") if m in sys.modules]
    print(json.dumps({"heavy": heavy, "rows": len(rows), "checkpoints": detail["checkpoints"],
                      "points": _jupyter_server_extension_points(), "lab": _jupyter_labextension_paths(),
                      "kinds": [d["kind"] for d in readings["devices"]]}))
""")


def test_serving_imports_no_framework(tmp_path):
    done = new_run(tmp_path, "20250101-100000-done", training(range(1, 11)))
    ended(done, "completed", 10)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", NO_TORCH, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env=env, check=True).stdout
    found = json.loads(out.strip().splitlines()[-1])
    assert found["heavy"] == [], f"serving the panel imported {found['heavy']}"
    assert found["rows"] == 1 and "cpu" in found["kinds"]
    assert found["points"] == [{"module": "workbench.server"}]
    assert found["lab"] == [{"src": "labextension", "dest": "gaudi-workbench"}]
