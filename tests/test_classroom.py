"""The classroom (docs/classroom.md): JupyterHub started from the shipped config
(jupyter-config/classroom/jupyterhub_config.py), three students on the emulated 8-card node
(``FAKE_HPU_LAYOUT=hls2``), each a real system user with a real single-user server and a real
kernel that runs notebook 01's cells (its parameters cell at smoke size). Checked: each
kernel took its own card, each student's run is in their own home, the teacher's
``workbench devices`` (root) names user, notebook, run and step of every card, a kernel shut
down frees its card, and the ninth student on a full node gets the workbench's message.

Needs root (it creates the students' Unix users, and the hub runs their servers as them) and
configurable-http-proxy (`npm ci`); both are there on CI. Every wait is on a condition.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

import unix_users
from conftest import FAKES, ROOT

ARTIFACTS = ROOT / "test-artifacts"
CONFIG = ROOT / "jupyter-config" / "classroom" / "jupyterhub_config.py"
PROXY = ROOT / "node_modules" / ".bin" / "configurable-http-proxy"
BIN = Path(sys.executable).parent
NOTEBOOK = ROOT / "notebooks" / "01_quickstart.ipynb"
# the double's card acquisition alone (no torch): a cheap holder
CARD = FAKES / "habana_frameworks" / "torch" / "_card.py"
SMOKE = {"MAX_STEPS": 6, "BATCH_SIZE": 8}  # notebook 01's parameters, smaller still
START_S, CELL_S = 240, 420  # deadlines on a loaded two-core machine
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython's colours in a traceback

# the first run on a machine builds the emulated device for the students' Python (minutes)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _need(ok: bool, why: str) -> None:
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(what: str, check, deadline_s: float, log: Path | None = None):
    """Poll ``check()`` until it returns something truthy; fail after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.5)  # polling interval, not a wait for state
    tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
    pytest.fail(f"{what}: not within {deadline_s}s\n{tail}")


class Hub:
    """The hub's REST API with the test's service token, and each student's server through
    the proxy."""

    def __init__(self, port: int, token: str, log: Path):
        self.url, self.token, self.log = f"http://127.0.0.1:{port}", token, log

    def call(self, method: str, path: str, body=None, timeout: float = 60):
        req = urllib.request.Request(
            self.url + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def answers(self) -> bool:
        try:
            return self.call("GET", "/hub/api/", timeout=5) is not None
        except (OSError, urllib.error.HTTPError):
            return False

    def ready(self, name: str) -> bool:
        server = self.call("GET", f"/hub/api/users/{name}")["servers"].get("", {})
        return bool(server.get("ready"))

    def session(self, name: str, notebook: str) -> str:
        """A session (a kernel) for ``notebook`` in ``name``'s server: the kernel id."""
        made = self.call("POST", f"/user/{name}/api/sessions", {
            "path": notebook, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}})
        return made["kernel"]["id"]

    async def execute(self, name: str, kernel: str, code: str) -> str:
        """Run ``code`` in the kernel over its websocket; its printed output. Fails on an error
        with the error's text."""
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        ws = await websocket_connect(HTTPRequest(
            f"ws{self.url[4:]}/user/{name}/api/kernels/{kernel}/channels",
            headers={"Authorization": f"token {self.token}"}))
        msg_id = uuid.uuid4().hex
        await ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": name,
                       "session": uuid.uuid4().hex, "date": "", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        out, error, replied, idle = [], None, False, False
        end = time.monotonic() + CELL_S
        try:
            while not (replied and idle):
                raw = await asyncio.wait_for(ws.read_message(), max(1.0, end - time.monotonic()))
                assert raw is not None, f"{name}'s kernel channel closed"
                if isinstance(raw, bytes):  # a message with binary buffers (widgets): not ours
                    continue
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    out.append(content["text"])
                elif kind == "error":
                    error = "\n".join(content.get("traceback", [])) or content.get("evalue")
                elif kind == "execute_reply":
                    replied = True
                elif kind == "status":
                    idle = content["execution_state"] == "idle"
        finally:
            ws.close()
        if error:
            plain = ANSI.sub("", error)
            raise AssertionError(f"{name}'s cell failed:\n{plain[-4000:]}")
        return "".join(out)


def _notebook_01() -> str:
    """Notebook 01's code up to its records (the device, the model and data, the training
    cell, the results), its parameters cell first with the smoke values above."""
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    params = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    body = []
    for c in cells[cells.index(params) + 1:]:
        src = "".join(c["source"])
        body.append(src)
        if "wb.record(" in src:
            break
    assert any("wb.train(" in b for b in body), "notebook 01 has no training cell any more"
    smoke = "".join(f"{k} = {v!r}\n" for k, v in SMOKE.items())
    return "".join(params["source"]) + "\n" + smoke + "\n\n".join(body)


REPORT = """
import json as _json
_dev = wb.device("hpu")
print("@@" + _json.dumps({"module": _dev.held.module if _dev.held else None, "run": str(run.path),
                          "status": run.status, "device": run.summary["device"]["kind"]}))
"""


def _built_device(python: Path, env: dict, shared: Path) -> Path:
    """The emulated device for the students' Python, in ``shared`` (the test's folder, where
    every student may load it: torch's build lock is a file in its folder): the suite's own
    build copied (the same sources, torch and Python ABI), built with that Python where the
    suite has none."""
    shared.mkdir(mode=0o777)
    suite_build = os.environ.get("FAKE_HPU_BUILD_DIR") or ROOT / ".fake_hpu_build"
    code = ("import shutil, torch\nfrom pathlib import Path\n"
            "from habana_frameworks._device import load, build_dir\n"
            f"suite = Path({str(suite_build)!r}) / build_dir().name / 'fake_hpu_device.so'\n"
            "if suite.exists():\n"
            "    build_dir().mkdir(exist_ok=True)\n    shutil.copy(suite, build_dir())\n"
            "load()\nprint(build_dir())")
    done = subprocess.run([str(python), "-c", code],
                          # torch's autoload would load (build) it before the copy
                          env={**env, "FAKE_HPU_BUILD_DIR": str(shared),
                               "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for p in [shared, *shared.rglob("*")]:
        p.chmod(0o777 if p.is_dir() or p.stat().st_mode & 0o100 else 0o666)
    return shared


@pytest.fixture
def room():
    """A hub on loopback with the shipped config, and a folder every student can read."""
    _need(os.geteuid() == 0, "the classroom test needs root (it creates the students' users)")
    _need(PROXY.exists(), "configurable-http-proxy is missing: run `npm ci` (package.json)")
    _need(shutil.which("useradd") is not None, "useradd is missing")
    top = Path(tempfile.mkdtemp(prefix="wb-classroom-"))
    top.chmod(0o755)
    (top / "homes").mkdir(mode=0o755)
    accel = top / "accel"
    accel.mkdir()
    emulated = {
        "PYTHONPATH": os.pathsep.join([str(FAKES), str(ROOT)]),
        "FAKE_HPU_GENERATION": "2", "FAKE_HPU_COUNT": "8", "FAKE_HPU_LAYOUT": "hls2",
        "FAKE_HPU_DEV_DIR": str(accel), "FAKE_HPU_INTEL_TORCH": "1",
        "WORKBENCH_HPU_DEVICE_FILES": str(accel / "accel*"),
        "WORKBENCH_HPU_SYSFS": str(accel / "sys" / "class" / "accel"),
        "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_HPU", "WORKBENCH_"))}
    root_env = {**base, **emulated}
    subprocess.run([sys.executable, "-c", "from habana_frameworks._layout import make_node\n"
                    "make_node()"], env=root_env, check=True, timeout=60)
    for p in [accel, *accel.rglob("*")]:  # the driver's device files are open to every user
        p.chmod(0o777 if p.is_dir() else 0o666)
    python, python_env = unix_users.python()
    emulated.update(python_env)
    root_env.update(python_env)
    emulated["FAKE_HPU_BUILD_DIR"] = str(_built_device(python, root_env, top / "build"))
    student_env = {**root_env, **emulated}

    port, token = _port(), secrets.token_hex(16)
    overlay = top / "hub" / "jupyterhub_config.py"
    overlay.parent.mkdir()
    overlay.write_text(f"""c = get_config()
load_subconfig({str(CONFIG)!r})  # the teacher's config, as shipped; then only the test's parts
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {_port()}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{_port()}"
c.JupyterHub.services = c.JupyterHub.services + [{{"name": "classroom-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = c.JupyterHub.load_roles + [{{
    "name": "classroom-test", "services": ["classroom-test"],
    "scopes": ["admin:users", "admin:servers", "servers", "access:servers", "list:users",
               "read:users"]}}]
c.Spawner.environment = {{**c.Spawner.environment, **{emulated!r}}}
c.Spawner.cmd = [{str(python)!r}] + c.Spawner.cmd[1:]  # the same venv, readable by students
c.Spawner.http_timeout = {START_S}
c.Spawner.start_timeout = {START_S}
""")
    log = top / "hub.log"
    with open(log, "w") as f:
        hub_proc = subprocess.Popen([str(BIN / "jupyterhub"), "-f", str(overlay)], cwd=overlay.parent,
                                    env=base, stdout=f, stderr=subprocess.STDOUT)
    hub = Hub(port, token, log)
    names: list[str] = []
    try:
        _until("the hub answers", lambda: hub_proc.poll() is not None or hub.answers(), START_S, log)
        assert hub_proc.poll() is None, log.read_text()[-4000:]
        yield hub, top, root_env, names, (python, student_env)
    finally:
        hub_proc.terminate()  # the hub stops the servers it spawned (cleanup_servers)
        try:
            hub_proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            hub_proc.kill()
        unix_users.remove(names)
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(log, ARTIFACTS / "classroom-hub.log")  # what the hub and servers said
        shutil.rmtree(top, ignore_errors=True)


def _teacher(env: dict) -> str:
    """``workbench devices`` as root: the teacher's view of the room."""
    done = subprocess.run([sys.executable, "-m", "workbench", "devices"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _holds(env: dict) -> dict[int, str]:
    """pid -> user of every card's holder, as root sees them."""
    return {int(p): u for p, u in re.findall(r"held by pid (\d+) \((\w+)\)", _teacher(env))}


def test_three_students_each_train_on_their_own_card(room):
    hub, top, root_env, names, (python, student_env) = room
    names += unix_users.users(9, top / "homes")
    students, fillers, ninth = names[:3], names[3:8], names[8]
    t0 = time.monotonic()

    hub.call("POST", "/hub/api/users", {"usernames": students + [ninth]})
    for name in students:
        hub.call("POST", f"/hub/api/users/{name}/server", {})
    for name in students:
        _until(f"{name}'s server is ready", lambda n=name: hub.ready(n), START_S, hub.log)
    kernels = {n: hub.session(n, "01_quickstart.ipynb") for n in students}

    async def everyone():
        return await asyncio.gather(*(
            hub.execute(n, kernels[n], _notebook_01() + REPORT) for n in students))

    outputs = asyncio.run(everyone())
    said = {n: json.loads(o.rsplit("@@", 1)[1].splitlines()[0]) for n, o in zip(students, outputs)}
    trained_s = time.monotonic() - t0

    # one card each, never the same one; each on the HPU, completed
    assert all(s["status"] == "completed" and s["device"] == "hpu" for s in said.values()), said
    modules = [s["module"] for s in said.values()]
    assert None not in modules and len(set(modules)) == 3, said
    # each student's runs in their own home (the config's WORKBENCH_RUNS), owned by them
    for n in students:
        home = Path(pwd.getpwnam(n).pw_dir)
        run = Path(said[n]["run"])
        assert run.parent == home / "runs", (n, run)
        assert run.stat().st_uid == pwd.getpwnam(n).pw_uid
        assert [p.name for p in (home / "runs").iterdir() if p.is_dir()] == [run.name]
    # the teacher's view: every held card with its user, notebook, run and step
    teacher = _teacher(root_env)
    print("\nthe teacher's view:\n" + teacher)  # docs/classroom.md shows it
    for n in students:
        row = next((ln for ln in teacher.splitlines() if f" {n} " in ln and "/" in ln), "")
        assert "01_quickstart.ipynb" in row and said[n]["run"] in row, teacher
        assert f"{SMOKE['MAX_STEPS']}/{SMOKE['MAX_STEPS']} completed" in row, teacher
    assert sorted(set(_holds(root_env).values())) == sorted(students), teacher
    # a student's panel (the server extension's workbench/cards, through the hub) names the
    # other students' cards by their users: /proc hides them, their kernels' hold records do not
    seen = hub.call("GET", f"/user/{students[0]}/workbench/cards")["cards"]
    held = {h["user"]: c["module"] for c in seen for h in c["holders"]}
    assert held == {n: said[n]["module"] for n in students}, seen

    # five more holders fill the node (cheap: each takes a card as the bridge double does)
    take = (f"import importlib.util, sys\nsys.path.insert(0, {str(FAKES)!r})\n"
            f"spec = importlib.util.spec_from_file_location('card', {str(CARD)!r})\n"
            "card = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(card)\n"
            "card.acquire()\nprint('held', flush=True)\nsys.stdin.readline()\n")
    fills = [subprocess.Popen([str(python), "-c", take], env=student_env, user=n, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE) for n in fillers]
    try:
        for f in fills:
            assert f.stdout.readline().strip() == "held"
        assert len(_holds(root_env)) == 8, _teacher(root_env)

        # the ninth student: the workbench's message, naming who runs kernels and what to do
        hub.call("POST", f"/hub/api/users/{ninth}/server", {})
        _until(f"{ninth}'s server is ready", lambda: hub.ready(ninth), START_S, hub.log)
        kernel = hub.session(ninth, "01_quickstart.ipynb")
        with pytest.raises(AssertionError) as refused:
            asyncio.run(hub.execute(ninth, kernel, _notebook_01()))
        message = str(refused.value)
        assert "no free Gaudi card for this process: all 8 are held" in message, message
        assert "5 are held by other users' processes" in message, "the 5 without a record"
        assert all(f"({n}), kernel " in message for n in students), "the students' cards by name"
        assert "device='cpu'" in message and "sudo workbench devices" in message, message
        assert "Device acquire failed" in message, "and the bridge's own words"
    finally:
        for f in fills:
            f.communicate(input="\n", timeout=60)

    # a kernel shut down frees its card; a stopped server frees its kernels' cards
    first = students[0]
    hub.call("DELETE", f"/user/{first}/api/kernels/{kernels[first]}")
    _until("the first student's card is free",
           lambda: first not in _holds(root_env).values(), 120)
    hub.call("DELETE", f"/hub/api/users/{students[1]}/server")
    _until("the second student's card is free once their server stopped",
           lambda: sorted(_holds(root_env).values()) == [students[2]], 180)
    print(f"\nclassroom: three students trained in {trained_s:.0f}s, "
          f"the whole test {time.monotonic() - t0:.0f}s")
