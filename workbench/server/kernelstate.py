"""A kernel's busy/idle as Jupyter Server and JupyterLab read it, kept true while a cell trains.

JupyterLab 4.6 sends a ``create_subshell_request`` on the control channel when a widget's comm
opens (``@jupyterlab/services`` kernel/comm.ts, ``CommHandler._maybeStartSubshell``), and
ipykernel 7 answers it between a ``status: busy`` and a ``status: idle`` (kernelbase.py,
``dispatch_control``). Both readers take every iopub ``status`` as the kernel's state unless its
parent's type is in the kernel manager's ``untracked_message_types``
(jupyter_server/services/kernels/kernelmanager.py, ``record_activity``), which lacks the
subshell messages: a training kernel read idle (and a culler could take it). Adding them keeps
the cell's own ``execute_request`` the only one that moves the indicator.
"""

from __future__ import annotations

from typing import Any

# the control-channel messages of kernel subshells (JEP 91, jupyter.org/enhancement-proposals),
# which ipykernel 7 and JupyterLab 4.6 exchange
SUBSHELL_MESSAGES = (
    "create_subshell_request",
    "create_subshell_reply",
    "delete_subshell_request",
    "delete_subshell_reply",
    "list_subshell_request",
    "list_subshell_reply",
)


def untrack_subshell_messages(server_app: Any) -> list[str]:
    """Add ``SUBSHELL_MESSAGES`` to the kernel manager's ``untracked_message_types`` and to the
    page config JupyterLab reads it from; returns the messages added."""
    manager = server_app.kernel_manager
    if not hasattr(manager, "untracked_message_types"):  # a kernel manager that tracks nothing
        return []
    current = list(manager.untracked_message_types)
    added = [m for m in SUBSHELL_MESSAGES if m not in current]
    manager.untracked_message_types = [*current, *added]
    # jupyterlab_server copies the list into the page config when its own extension loads,
    # which may be before this one: the copy gets the same list
    page = server_app.web_app.settings.setdefault("page_config_data", {})
    page["untracked_message_types"] = list(manager.untracked_message_types)
    return added
