"""JupyterLab and headless Chromium for tests/test_browser.py: a server, a page, waits on UI state.

The server gets its own config, data, runtime and settings directories under the test's
tmp_path, a `python3` kernel spec that runs this interpreter, and a session started through
the REST API before the page opens the notebook, so JupyterLab connects to a running kernel
and never asks which kernel to start. Every wait is on a condition with a deadline; a
JupyterLab dialog that opens during a wait fails the test at once with its text and a
screenshot in test-artifacts/.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest

from conftest import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
KERNEL = "python3"

# Settings the test server starts with (overrides.json in its app settings dir). Source:
# JupyterLab 4's schema for the notebook tracker, share/jupyter/lab/schemas/@jupyterlab/
# notebook-extension/tracker.json, "autoStartDefaultKernel" ("Automatically Start Preferred
# Kernel"), which sets the documents' IKernelPreference.autoStartDefault
# (jupyterlab.readthedocs.io/en/latest/api/interfaces/apputils.ISessionContext.IKernelPreference.html):
# a notebook whose kernel is not found starts the server's default kernel instead of opening
# "Select Kernel". And apputils-extension/notification.json "fetchNews": no "Jupyter news?"
# toast over the page.
# "windowingMode" "none" (same schema): every cell is rendered, not only those in view, so
# every dashboard of a notebook draws, and the page's checks (PageProblems) see them all.
OVERRIDES = {
    "@jupyterlab/notebook-extension:tracker": {"autoStartDefaultKernel": True, "windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"},
}

# Generous deadlines: the suite runs on a loaded 2-core machine.
SERVER_START_S = 180
PAGE_READY_MS = 240_000


def require_chromium() -> None:
    """Skip where Debian's chromium is missing, fail on CI."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing on CI: .ci/run installs Debian's chromium (apt-get install chromium)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _link_this_build(data_dir: Path) -> None:
    """This checkout's built extension at the head of JUPYTER_PATH (the venv's
    share/jupyter/labextensions links one checkout's build; a test runs its own)."""
    built = ROOT / "workbench" / "server" / "labextension"
    link = data_dir / "labextensions" / "gaudi-workbench"
    if built.is_dir() and not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(built, target_is_directory=True)


def _write_kernel_spec(data_dir: Path) -> None:
    """A `python3` kernel spec running this interpreter, for the head of JUPYTER_PATH."""
    spec = data_dir / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}))


def api(lab: dict, path: str, body: dict | None = None, timeout: float = 30) -> dict:
    """GET (or POST ``body`` to) the server's REST API; the JSON reply."""
    req = urllib.request.Request(f"{lab['url']}{path}", method="GET" if body is None else "POST",
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"token {lab['token']}"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def _wait_for_server(lab: dict, proc: subprocess.Popen, log: Path) -> None:
    """Poll /api/status until the server answers; fail with its log if it exits or hangs."""
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with {proc.returncode}: " + log.read_text()[-3000:])
        try:
            api(lab, "/api/status", timeout=5)
            return
        except (OSError, urllib.error.HTTPError):
            time.sleep(0.5)  # polling interval, not a wait for state
    pytest.fail(f"JupyterLab did not answer in {SERVER_START_S}s: " + log.read_text()[-3000:])


def _check_server(lab: dict) -> None:
    """The server sees our kernel spec as its default, has loaded the settings overrides and
    runs the workbench's server extension."""
    specs = api(lab, "/api/kernelspecs")
    argv = specs["kernelspecs"].get(KERNEL, {}).get("spec", {}).get("argv", [])
    assert specs["default"] == KERNEL and argv[:1] == [sys.executable], \
        f"the server's kernel specs are not this venv's {KERNEL}: {json.dumps(specs)[:1500]}"
    for plugin, values in OVERRIDES.items():
        # overrides.json replaces the schema's defaults, which the page's settings start from
        schema = api(lab, f"/lab/api/settings/{plugin}")["schema"]["properties"]
        defaults = {k: schema[k].get("default") for k in values}
        assert defaults == values, f"settings overrides for {plugin} not loaded: {defaults}"
    try:
        api(lab, "/workbench/runs")
    except urllib.error.HTTPError as e:
        pytest.fail(f"the workbench server extension does not answer ({e}): `make venv` enables it "
                    "(jupyter server extension enable --sys-prefix workbench.server)")


@contextlib.contextmanager
def jupyterlab(workdir: Path):
    """A JupyterLab server on 127.0.0.1 rooted at ``workdir``: {url, token, dir}.

    Its config, data (the notebook-signing secret included), runtime and settings live under
    ``workdir``: a second server on the same ``workdir`` is the first one restarted."""
    port, token = _free_port(), secrets.token_hex(16)
    settings = workdir / ".lab-settings"
    settings.mkdir(exist_ok=True)  # a second server on the same directory: a restart
    (settings / "overrides.json").write_text(json.dumps(OVERRIDES))
    _write_kernel_spec(workdir / ".jupyter-data")
    _link_this_build(workdir / ".jupyter-data")
    cmd = [str(Path(sys.executable).with_name("jupyter")), "lab", "--no-browser",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={workdir}",
           f"--LabApp.app_settings_dir={settings}", "--LabApp.news_url=",
           # window.jupyterapp: the waits below read the shell's current widget and its kernel
           "--LabApp.expose_app_in_browser=True", "--LabServerApp.open_browser=False"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    # JUPYTER_PATH is searched before every other data dir (in a venv jupyter_core puts the
    # venv's share/jupyter before JUPYTER_DATA_DIR), so our kernel spec wins.
    # the server extension and the kernels import this checkout's package, wherever the
    # venv's editable install points
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "JUPYTER_CONFIG_DIR": str(workdir / ".jupyter-config"),
           "JUPYTER_PATH": str(workdir / ".jupyter-data"), "JUPYTER_DATA_DIR": str(workdir / ".jupyter-data"),
           "JUPYTER_RUNTIME_DIR": str(workdir / ".jupyter-runtime")}
    log_path = workdir / "lab.log"
    with open(log_path, "a") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
        lab = {"url": f"http://127.0.0.1:{port}", "token": token, "dir": workdir, "pid": proc.pid}
        try:
            _wait_for_server(lab, proc, log_path)
            _check_server(lab)
            yield lab
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def long_quickstart(workdir: Path) -> str:
    """The quickstart up to its training cell, with parameters for a run long enough to stop
    (papermill's injection): the one run of the notebook is the one stopped."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(ROOT / "notebooks" / "01_quickstart.ipynb"))
    nb = parameterize_notebook(nb, {"MAX_STEPS": 100000, "BATCH_SIZE": 4})
    last = max(i for i, c in enumerate(nb.cells) if "wb.train(" in c.source)
    nb.cells = nb.cells[:last + 1]
    write_notebook(nb, workdir / "01_quickstart.ipynb")
    return "01_quickstart.ipynb"


def write_notebook(nb, path: Path) -> Path:
    """Write ``nb`` with its kernelspec naming the server's kernel."""
    import nbformat

    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, path)
    return path


# The longest the page's main thread may be busy in one task while a dashboard is on the
# page (issue 40: an empty log-scale panel froze the tab for 6-8 s). Long tasks are the
# Performance API's measure of it (w3c.github.io/longtasks: every task over 50 ms, with its
# duration), read through a PerformanceObserver registered before the page's own scripts.
# STALL_MS holds on a machine with a core free for the browser; on a busier one every task
# of the page takes longer, a stall too, by the share of the cores the browser gets: the
# limit grows with the load (os.getloadavg over the cores, the most seen while the page was
# open), so that a neighbour's work fails nothing (at load 10+ on two cores an ordinary
# redraw passed 1 s), up to STALL_CAP_MS, under the stall this is for at any load: the
# uPlot freeze took 6-8 s on an idle machine (6.4 s at load 4.8 here, limit 2.4 s), and
# more on a busier one.
STALL_MS = 1000
STALL_CAP_MS = 4000


def stall_limit_ms(load: float, cores: int) -> float:
    """The longest task allowed at this 1-minute load average on ``cores`` CPUs."""
    return min(STALL_CAP_MS, STALL_MS * max(1.0, load / max(1, cores)))

_WATCH_LONG_TASKS = """(() => {
    window.__wbLongTasks = [];
    new PerformanceObserver((list) => {
        // the observer runs after the task: a dashboard on the page then was there during it
        // or was drawn by it
        const dash = document.querySelector('.wb-dash') !== null;
        for (const e of list.getEntries()) {
            window.__wbLongTasks.push({start: Math.round(e.startTime), ms: Math.round(e.duration), dash});
        }
    }).observe({type: 'longtask', buffered: true});
})();"""


class PageProblems:
    """What a page reported that a user would suffer: uncaught errors, console errors, and
    main-thread stalls over STALL_MS while a dashboard was on the page."""

    def __init__(self, page):
        self.page = page
        self.errors: list[str] = []
        self.loads = [os.getloadavg()[0]]  # and again at the check
        page.add_init_script(_WATCH_LONG_TASKS)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("console", self._console)

    def _console(self, msg) -> None:
        if msg.type == "error":
            where = msg.location or {}
            self.errors.append(f"console error: {msg.text} ({where.get('url', '')}:{where.get('lineNumber', '')})")

    def limit_ms(self) -> float:
        """The stall limit for the busiest load seen while the page was open."""
        self.loads.append(os.getloadavg()[0])
        return stall_limit_ms(max(self.loads), os.cpu_count() or 1)

    def stalls(self) -> list[dict]:
        """The long tasks over the limit with a dashboard on the page, from every document the
        page has shown so far (a navigation starts a new list: read it before one)."""
        limit = self.limit_ms()
        with contextlib.suppress(Exception):
            tasks = self.page.evaluate("() => window.__wbLongTasks || []")
            return [{**t, "limit": limit} for t in tasks if t["dash"] and t["ms"] > limit]
        return []

    def check(self) -> None:
        stalls = self.stalls()
        found = self.errors + [f"the main thread stalled {t['ms']} ms at {t['start']} ms with a dashboard "
                               f"on the page (limit {t['limit']:.0f} ms: {STALL_MS} ms at load "
                               f"{max(self.loads):.1f} on {os.cpu_count()} cores)" for t in stalls]
        assert not found, "the page reported:\n" + "\n".join(found)


@contextlib.contextmanager
def browser_page(playwright, name: str, **page_args):
    """A page in Debian's headless Chromium; on failure a full-page screenshot goes to
    test-artifacts/browser-failure-NAME.png, for what the test could not say.

    Every page is watched (PageProblems): at the end of the block a page error, a console
    error or a main-thread stall over STALL_MS while a dashboard was shown fails the test."""
    ARTIFACTS.mkdir(exist_ok=True)
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"])
    page = browser.new_page(**page_args)
    # nbconvert's HTML loads require.js and MathJax from cdnjs; this machine has no network, so
    # they come back empty (the page then runs as it did when they failed) rather than as a
    # "Failed to load resource" console error that a user with a network never sees
    page.route("https://cdnjs.cloudflare.com/**",
               lambda route: route.fulfill(status=200, content_type="text/javascript", body=""))
    problems = PageProblems(page)
    try:
        yield page
        problems.check()
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(ARTIFACTS / f"browser-failure-{name}.png"), full_page=True)
        raise
    finally:
        browser.close()


def wait_ui(page, condition: str, what: str, timeout_ms: int, arg=None) -> None:
    """Wait until the JS predicate ``condition`` holds; fail at once if a dialog opens.

    On a dialog: its text in the message, a screenshot test-artifacts/browser-dialog-NAME.png.
    On the deadline: ``what`` and the deadline in the message.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    guarded = ("(arg) => document.querySelector('.jp-Dialog') ? 'dialog' : "
               f"(({condition})(arg) ? 'ok' : false)")
    try:
        outcome = page.wait_for_function(guarded, arg=arg, timeout=timeout_ms, polling=250).json_value()
    except PlaywrightTimeout:
        pytest.fail(f"waited {timeout_ms / 1000:.0f}s for {what}; state: {_lab_state(page)}")
    if outcome == "dialog":
        shot = ARTIFACTS / f"browser-dialog-{PurePosixPath(urlsplit(page.url).path).stem}.png"
        page.screenshot(path=str(shot), full_page=True)
        text = page.locator(".jp-Dialog").first.inner_text().replace("\n", " | ")
        pytest.fail(f"JupyterLab opened a dialog while waiting for {what}: {text!r} (screenshot {shot})")


def _lab_state(page) -> str:
    """The current widget's path and kernel, for a timeout's message."""
    with contextlib.suppress(Exception):
        return page.evaluate("""() => {
            const w = window.jupyterapp?.shell.currentWidget, sc = w?.sessionContext;
            return JSON.stringify({current: w?.context?.path ?? w?.id ?? null, ready: sc?.isReady,
                                   kernel: sc?.session?.kernel?.name, status: sc?.session?.kernel?.status,
                                   connection: sc?.session?.kernel?.connectionStatus});
        }""")
    return "unknown (page not readable)"


# The notebook at `path` is the shell's current widget, connected to an idle kernel of ours.
# (The toolbar's execution indicator is no use here: it reads data-status='idle' before any
# kernel exists.)
_NOTEBOOK_READY = f"""(path) => {{
    const w = window.jupyterapp?.shell.currentWidget, k = w?.sessionContext?.session?.kernel;
    return w?.context?.path === path && w.context.isReady && w.sessionContext.isReady
        && k?.name === '{KERNEL}' && k.status === 'idle' && k.connectionStatus === 'connected';
}}"""

# A cell's input prompt reads "[ ]:" until it is queued ("[*]:") or has run ("[1]:").
_STARTED = """() => [...window.jupyterapp.shell.currentWidget.node.querySelectorAll('.jp-InputPrompt')]
    .some(p => /[*0-9]/.test(p.textContent))"""


def open_notebook(page, lab: dict, notebook: str, alone: bool = False) -> None:
    """Start a kernel session for ``notebook`` on the server, open it, wait until it is ready.

    ``alone``: JupyterLab's ``reset`` URL parameter, so the workspace restores no other tab."""
    session = api(lab, "/api/sessions", {"path": notebook, "name": notebook, "type": "notebook",
                                         "kernel": {"name": KERNEL}}, timeout=SERVER_START_S)
    assert session["kernel"]["name"] == KERNEL, session
    reset = "&reset" if alone else ""
    page.goto(f"{lab['url']}/lab/tree/{notebook}?token={lab['token']}{reset}", timeout=PAGE_READY_MS)
    wait_ui(page, _NOTEBOOK_READY, f"{notebook} to be the current widget with an idle {KERNEL} kernel",
            PAGE_READY_MS, arg=notebook)


def run_all_cells(page, notebook: str) -> None:
    """Run > Run All Cells on the current notebook; wait until a cell is queued or has run."""
    from playwright.sync_api import expect

    page.get_by_role("menuitem", name="Run", exact=True).click()
    item = page.get_by_role("menuitem", name="Run All Cells", exact=True)
    # Lumino disables the item while no notebook is current; a click then would do nothing.
    expect(item).to_be_visible(timeout=60_000)
    expect(item).not_to_have_attribute("aria-disabled", "true", timeout=60_000)
    item.click()
    wait_ui(page, _STARTED, f"'Run All Cells' to start a cell of {notebook}", 120_000)


# Every code cell of the current notebook has run (an execution count, from the notebook's
# model: the page renders prompts lazily) and its kernel is idle again.
_ALL_RAN = """() => {
    const w = window.jupyterapp.shell.currentWidget, k = w?.sessionContext?.session?.kernel;
    const cells = [...(w?.content?.model?.cells ?? [])].filter(c => c.type === 'code');
    return cells.length > 0 && cells.every(c => c.executionCount !== null) && k?.status === 'idle';
}"""

# The outputs of the current notebook's cells that are errors: "ename: evalue" each.
_ERRORS = """() => [...window.jupyterapp.shell.currentWidget.content.model.cells]
    .filter(c => c.type === 'code').flatMap(c => c.outputs.toJSON())
    .filter(o => o.output_type === 'error').map(o => `${o.ename}: ${o.evalue}`)"""


def wait_all_ran(page, notebook: str, timeout_ms: int) -> None:
    """Wait until every code cell of ``notebook`` has run; fail on a cell's error output."""
    wait_ui(page, _ALL_RAN, f"every cell of {notebook} to run", timeout_ms)
    errors = page.evaluate(_ERRORS)
    assert not errors, f"{notebook} raised: {errors}"
