"""JupyterHub for a room of students on one Gaudi node: docs/classroom.md says how to use it.

Started as root (it runs each student's server as that student):

    sudo .venv/bin/jupyterhub -f jupyter-config/classroom/jupyterhub_config.py

- Who logs in: the node's system users of the group ``gaudi-class``, with their own password
  (PAM). Another authenticator is one line (docs/classroom.md, "Other logins").
- Each student gets one single-user JupyterLab, run as that user, in their home folder, with
  their runs under ``~/runs`` (``WORKBENCH_RUNS``): the workbench panel lists them, and only them,
  and every card of the node with the user who holds it (``WORKBENCH_HOLDS``).
- Cards: nothing here hands them out. A Gaudi card belongs to the first process that touches
  it (docs/devices.md), so a student's kernel takes one free card when it first trains and
  keeps it until it stops. A kernel idle for ``KERNEL_IDLE_S`` is culled (its card freed), and
  a server idle for ``SERVER_IDLE_S`` is stopped (jupyterhub-idle-culler).

tests/test_classroom.py starts the hub from this file (it adds only a loopback address, free
ports, a test token and the emulated node's variables).
"""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (traitlets' config loader defines it)

REPO = Path(__file__).resolve().parents[2]
GROUP = "gaudi-class"  # the students' Unix group
KERNEL_IDLE_S = 30 * 60  # a kernel idle this long is shut down: its card goes back
SERVER_IDLE_S = 60 * 60  # a server idle this long is stopped (its kernels with it)
# each student's kernels record here which card they hold, so every student sees whose each
# card is (Linux shows a process's open files to its owner only): made by root, mode 1777
HOLDS = Path("/var/lib/gaudi-workbench/holds")
if os.geteuid() == 0:  # as the hub runs (a test reads this file's settings as any user)
    HOLDS.mkdir(parents=True, exist_ok=True)
    HOLDS.chmod(0o1777)

# --------------------------------------------------------------------------- who logs in
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {GROUP}

# --------------------------------------------------------------------------- one server each
c.JupyterHub.spawner_class = "localprocess"  # the student's own Unix user, on this node
# this venv's Python (students need to read it: a venv under a private home will not do)
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"


def runs_folder(spawner) -> str:
    """The student's runs root, ``~/runs``: each student's runs stay in their home."""
    return str(Path(pwd.getpwnam(spawner.user.name).pw_dir) / "runs")


c.Spawner.environment = {"WORKBENCH_RUNS": runs_folder, "WORKBENCH_HOLDS": str(HOLDS)}
# jupyter_server's kernel culler (MappingKernelManager): an idle kernel is shut down, even
# with its notebook open in a tab, so a card left idle goes back to the room
c.Spawner.args = [
    f"--MappingKernelManager.cull_idle_timeout={KERNEL_IDLE_S}",
    "--MappingKernelManager.cull_interval=60",
    "--MappingKernelManager.cull_connected=True",
]

# --------------------------------------------------------------------------- idle servers
c.JupyterHub.services = [
    {
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={SERVER_IDLE_S}"],
    }
]
c.JupyterHub.load_roles = [
    {
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    }
]

# --------------------------------------------------------------------------- the proxy
# configurable-http-proxy from npm: this checkout's (`npm ci` installs it), else the one on PATH
_local_proxy = REPO / "node_modules" / ".bin" / "configurable-http-proxy"
if _local_proxy.exists():
    c.ConfigurableHTTPProxy.command = [str(_local_proxy)]
