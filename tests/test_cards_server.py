"""A shared Gaudi node seen from one Jupyter server (issue 29 items 3 and 4), on the emulated
cards of the bridge double, with real kernels: two notebooks each take a card (the second
a free one, never failing on the first's), ``workbench/cards`` names each holder's notebook,
a third notebook asking to launch on more cards than are free gets the refusal, and shutting
a kernel down frees its card.

pytest-jupyter's server fixtures are imported into this module only (see test_server.py).
"""

from __future__ import annotations

import json
import os
import re
import uuid

import pytest
from jupyter_client import BlockingKernelClient
from pytest_jupyter.jupyter_server import *  # noqa: F403  (the fixtures, for this module only)

from conftest import FAKES, ROOT, wait_for

TRAIN = ("import workbench as wb\n"
         "run = wb.train('gpt2-tiny', wb.dataset('docstrings-lm', limit=32), device='hpu', "
         "max_steps=2, batch_size=2, max_length=32, live=False)\n"
         "assert run.status == 'completed', run.summary.get('error')")


@pytest.fixture
def jp_server_config(request):
    """The server with the extension; with the classroom's kernel culler where a test asks
    for it (``indirect`` parameter ``"culler"``), its timers cut to seconds."""
    config = {"ServerApp": {"jpserver_extensions": {"workbench.server": True,
                                                    "jupyter_server_terminals": False},
                            "allow_unauthenticated_access": False}}
    if getattr(request, "param", None) == "culler":
        config["MappingKernelManager"] = _culler(cull_idle_timeout=4, cull_interval=1)
    return config


@pytest.fixture
def node(fake_hpu, monkeypatch):
    """The kernels this server starts see the emulated node (its cards' folder, the double)."""
    paths = [str(FAKES), str(ROOT), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("PT_HPU_LAZY_MODE", "0")
    monkeypatch.setenv("FAKE_HPU_COUNT", "3")
    monkeypatch.delenv("FAKE_HPU_DEVICE")  # the kernels run on the emulated device itself


@pytest.fixture
def http(jp_fetch, jp_asyncio_loop):
    def call(*parts, **kwargs):
        reply = jp_asyncio_loop.run_until_complete(jp_fetch(*parts, **kwargs))
        return json.loads(reply.body) if reply.body else None
    return call


@pytest.fixture
def notebook(http, jp_serverapp, jp_root_dir):
    """``notebook(path)``: a session (a real kernel) for notebook ``path``; returns
    ``(kernel_id, run)`` where ``run(code)`` executes in it and returns (stdout, error)."""
    clients = []

    def start(path: str):
        (jp_root_dir / path).parent.mkdir(parents=True, exist_ok=True)  # the kernel's cwd
        session = http("api", "sessions", method="POST", body=json.dumps(
            {"path": path, "type": "notebook", "name": path, "kernel": {"name": "python3"}}))
        kid = session["kernel"]["id"]
        client = BlockingKernelClient(
            connection_file=jp_serverapp.kernel_manager.get_kernel(kid).connection_file)
        client.load_connection_file()
        client.start_channels(hb=False)  # a loaded machine misses heartbeats; replies suffice
        client.wait_for_ready(timeout=120)
        clients.append(client)

        def run(code: str) -> tuple[str, str | None]:
            out, err = [], []

            def hook(msg):
                if msg["msg_type"] == "stream":
                    out.append(msg["content"]["text"])
                elif msg["msg_type"] == "error":
                    err.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

            client.execute_interactive(code, timeout=600, output_hook=hook)
            return "".join(out), "\n".join(err) or None

        def submit(code: str):
            """Start ``code`` without waiting; the returned call waits for its reply."""
            msg_id = client.execute(code)

            def reply() -> dict:
                while True:
                    msg = client.get_shell_msg(timeout=600)
                    if msg["parent_header"].get("msg_id") == msg_id:
                        return msg["content"]
            return reply

        run.submit = submit
        return kid, run

    yield start
    for c in clients:
        c.stop_channels()


@pytest.mark.slow
def test_two_notebooks_share_a_node_and_the_panel_names_their_cards(node, http, notebook,
                                                                    jp_asyncio_loop):
    kid_a, run_a = notebook("course/05_llama_lora.ipynb")
    kid_b, run_b = notebook("course/07_multi_device.ipynb")
    # both train at the same time, each on its own card (the second never fails on the first's)
    replies = [run_a.submit(TRAIN), run_b.submit(TRAIN)]
    for reply in replies:
        content = reply()
        assert content["status"] == "ok", content.get("evalue")
    out, err = run_a("print(wb.device('hpu').holding)")
    mine = re.match(r"this kernel holds Gaudi (\d) \(module \1\) since \d\d:\d\d; "
                    r"restart the kernel to free it", out or "")
    assert err is None and mine, out

    cards = http("workbench", "cards")["cards"]
    assert sorted(c["free"] for c in cards) == [False, False, True]
    held = {c["holders"][0]["kernel_id"]: (c["index"], c["holders"][0]) for c in cards
            if not c["free"]}
    assert set(held) == {kid_a, kid_b}, "each notebook's kernel holds its own card"
    assert held[kid_a][0] == int(mine.group(1))
    assert held[kid_a][1]["notebook"] == "course/05_llama_lora.ipynb"
    assert held[kid_b][1]["notebook"] == "course/07_multi_device.ipynb"
    assert all(h["this_server"] and "ipykernel" in h["command"] for _, h in held.values())

    _, run_c = notebook(f"third-{uuid.uuid4().hex[:6]}.ipynb")
    out, err = run_c("import workbench as wb\nwb.launch('gpt2-tiny', 'docstrings-lm', devices=2, device='hpu', max_steps=1)")
    assert err is not None and "needs 2 free Gaudi cards; 1 is free here" in err
    assert "kernel of 05_llama_lora.ipynb" in err and "kernel of 07_multi_device.ipynb" in err
    assert "wb.launch(devices=1)" in err

    http("api", "kernels", kid_a, method="DELETE")  # what the panel's button does
    index = held[kid_a][0]
    wait_for(lambda: http("workbench", "cards")["cards"][index]["free"], 60, "its card freed")


def _culler(**short) -> dict:
    """The kernel culler's settings of the classroom's config (its single-user servers'
    arguments, jupyter-config/classroom/jupyterhub_config.py), with ``short`` timers."""
    from traitlets.config.loader import PyFileConfigLoader

    config = ROOT / "jupyter-config" / "classroom" / "jupyterhub_config.py"
    args = PyFileConfigLoader(config.name, str(config.parent)).load_config().Spawner.args
    shipped = dict(a.removeprefix("--MappingKernelManager.").split("=", 1) for a in args
                   if a.startswith("--MappingKernelManager."))
    assert {"cull_idle_timeout", "cull_interval", "cull_connected"} <= set(shipped), args
    typed = {k: v == "True" if v in ("True", "False") else int(v) for k, v in shipped.items()}
    return {**typed, **short}


@pytest.mark.slow
@pytest.mark.parametrize("jp_server_config", ["culler"], indirect=True)
def test_an_idle_kernel_is_culled_and_its_card_freed(node, http, notebook):
    """The classroom's kernel culler, its timers cut to seconds: a kernel that trained and
    then idles is shut down by jupyter_server, and its card is free again."""
    kid, run = notebook("course/01_quickstart.ipynb")
    _, err = run(TRAIN)
    assert err is None, err
    held = [h["kernel_id"] for c in http("workbench", "cards")["cards"] for h in c["holders"]]
    assert held == [kid], "the kernel holds its card while it idles"
    wait_for(lambda: kid not in {k["id"] for k in http("api", "kernels")}, 120,
             "the culler to shut the idle kernel down")
    wait_for(lambda: all(c["free"] for c in http("workbench", "cards")["cards"]), 60,
             "its card freed")
