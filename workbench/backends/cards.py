"""The cards of this machine and who holds them, read from the operating system.

On Gaudi a card belongs to the first process that touches it, and its owner keeps the card's
device file open (``/dev/accel/accel<N>``, ``/dev/hl<N>`` with older drivers): a card's holders
are the processes with an open file descriptor on it (``/proc/<pid>/fd``), never the device
runtime's answer (which would take a card). A Jupyter kernel holder names its notebook through
``JPY_SESSION_NAME`` (jupyter_server sets it). Other users' processes show through their hold
records (``holds``): their ``/proc/<pid>/fd`` is unreadable without privileges.
"""

from __future__ import annotations

import os
import pwd
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import settings
from . import holds

PROC = Path("/proc")
_KERNEL_FILE = re.compile(r"kernel-([0-9a-f-]{36})\.json")
# device file -> when this process was first seen holding it (the driver keeps no time)
_first_seen: dict[str, float] = {}


@dataclass(frozen=True)
class Holder:
    """A process that holds a card: its pid, command line, and where it is a Jupyter
    kernel, the kernel's id and its notebook."""

    pid: int
    command: str
    kernel_id: str | None = None
    notebook: str | None = None
    user: str | None = None

    def describe(self) -> str:
        """``"pid 4242 (alice), kernel of 05_llama_lora.ipynb"``, or the pid, its user and its
        command line."""
        who = f"pid {self.pid} ({self.user})" if self.user else f"pid {self.pid}"
        if self.pid == os.getpid():
            return f"{who}, {'this kernel' if in_kernel() else 'this process'}"
        if self.notebook:
            return f"{who}, kernel of {Path(self.notebook).name}"
        if self.kernel_id:
            return f"{who}, kernel {self.kernel_id[:8]}"
        short = self.command if len(self.command) <= 60 else self.command[:57] + "..."
        return f"{who}: {short}"


@dataclass
class Card:
    """One device card: its index as the management library counts it, its module id (the
    number ``HABANA_VISIBLE_MODULES`` and ``HLS_MODULE_ID`` use on Gaudi), its device file and
    the processes that hold it (empty: free)."""

    kind: str
    index: int
    name: str
    label: str = "card"  # "Gaudi", "GPU"
    module: int | None = None
    total_memory: int = 0
    path: str | None = None
    holders: list[Holder] = field(default_factory=list)

    @property
    def free(self) -> bool:
        return not self.holders

    @property
    def title(self) -> str:
        """``"Gaudi 0 (module 3)"``."""
        module = f" (module {self.module})" if self.module is not None else ""
        return f"{self.label} {self.index}{module}"

    @property
    def select(self) -> int | None:
        """The number a child's environment names this card by: the module id, else (a GPU)
        the index; None for a Gaudi whose module id is unknown (its index need not be it)."""
        if self.module is not None:
            return self.module
        return None if self.kind == "hpu" else self.index

    def held_here(self) -> bool:
        return any(h.pid == os.getpid() for h in self.holders)

    def describe(self) -> str:
        """``"Gaudi 0 (module 3): held by pid 4242, kernel of 05_llama_lora.ipynb"``."""
        who = "; ".join(h.describe() for h in self.holders)
        return f"{self.title}: {'held by ' + who if who else 'free'}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "title": self.title, "free": self.free}


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (an IPython kernel is running in it)."""
    app = sys.modules.get("ipykernel.kernelapp")
    return bool(app is not None and getattr(app.IPKernelApp, "initialized", lambda: False)())


# --------------------------------------------------------------------------- the OS
def openers(paths: Iterable[str], proc: Path = PROC) -> dict[str, list[int]]:
    """For each device file in ``paths`` (resolved), the pids that have it open."""
    wanted = {os.path.realpath(p): p for p in paths if p}
    found: dict[str, list[int]] = {p: [] for p in wanted.values()}
    if not wanted:
        return found
    try:
        pids = [int(d) for d in os.listdir(proc) if d.isdigit()]
    except OSError:
        return found
    for pid in sorted(pids):
        try:
            fds = os.listdir(proc / str(pid) / "fd")
        except OSError:  # gone, or another user's process
            continue
        for fd in fds:
            try:
                target = os.readlink(proc / str(pid) / "fd" / fd)
            except OSError:
                continue
            if target in wanted and pid not in found[wanted[target]]:
                found[wanted[target]].append(pid)
    return found


def holder(pid: int, proc: Path = PROC) -> Holder:
    """What the OS says of process ``pid``: its command line, and its kernel and notebook
    when it is a Jupyter kernel (its connection file's name, ``JPY_SESSION_NAME``)."""
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        command = " ".join(a.decode(errors="replace") for a in argv if a)
    except OSError:
        command = "?"
    kernel = _KERNEL_FILE.search(command)
    notebook = None
    try:
        for entry in (proc / str(pid) / "environ").read_bytes().split(b"\0"):
            if entry.startswith(b"JPY_SESSION_NAME="):
                notebook = entry.split(b"=", 1)[1].decode(errors="replace") or None
    except OSError:
        pass
    return Holder(pid, command, kernel.group(1) if kernel else None, notebook, owner(pid, proc))


def owner(pid: int, proc: Path = PROC) -> str | None:
    """The user name of process ``pid`` (the owner of ``/proc/<pid>``, its real uid); its
    ``uid N`` where the password database has no name for it; None once the process is gone."""
    uid = _uid(pid, proc)
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def with_holders(cards: list[Card], proc: Path = PROC) -> list[Card]:
    """``cards`` with their holders from the processes' open files and the other users' hold
    records (``holds``); this user's holds are recorded for the others in turn."""
    opened = openers([c.path for c in cards if c.path], proc)
    paths = {os.path.realpath(c.path): c.path for c in cards if c.path}
    me, mine = os.getuid(), {}
    for real, path in paths.items():
        for pid in opened[path]:
            if _uid(pid, proc) == me:
                mine.setdefault(pid, []).append(real)
    told = holds.exchange(mine, set(paths), proc)
    for c in cards:
        seen = opened.get(c.path or "", [])
        others = [p for p in told.get(os.path.realpath(c.path or ""), []) if p not in seen]
        c.holders = [holder(pid, proc) for pid in seen + others]
        if c.held_here():
            _first_seen.setdefault(os.path.realpath(c.path or ""), time.time())
    return cards


def _uid(pid: int, proc: Path) -> int | None:
    try:
        return (proc / str(pid)).stat().st_uid
    except OSError:
        return None


def since(card: Card) -> float | None:
    """When this process was first seen holding ``card`` (unix seconds); None if it does not."""
    return _first_seen.get(os.path.realpath(card.path)) if card.path else None


def holding(card: Card) -> str:
    """What this process holding ``card`` means, with the fix: ``"this kernel holds Gaudi 0
    (module 3) since 10:42; restart the kernel to free it"``."""
    at = since(card)
    when = f" since {time.strftime('%H:%M', time.localtime(at))}" if at else ""
    if in_kernel():
        return f"this kernel holds {card.title}{when}; restart the kernel to free it"
    return f"this process holds {card.title}{when}; it frees it when it exits"


# --------------------------------------------------------------------------- no card left
# the bridge's refusal when every card it may take is held (synStatus 20, "Device already
# acquired": huggingface/tgi-gaudi#93, huggingface/optimum-habana#288)
ACQUIRE_FAILED = "Device acquire failed"
NO_CARD_FIXES = (
    "wait for a card to be freed (a kernel frees its card when it stops: Kernel > Shut Down "
    "Kernel, or when the server culls it after it idles); or train on the CPU meanwhile with "
    "device='cpu'; the teacher's `sudo workbench devices` names every card's holder"
)


def kernel_users(proc: Path = PROC) -> list[str]:
    """The users of this machine's other Jupyter kernels (a command line naming a
    ``kernel-<id>.json``), this process's user left out: command lines are readable by all."""
    me, found = os.getuid(), set()
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            if (proc / entry).stat().st_uid == me:
                continue
            command = (proc / entry / "cmdline").read_bytes()
        except OSError:
            continue
        if _KERNEL_FILE.search(command.decode(errors="replace")):
            found.add(owner(int(entry), proc))
    return sorted(u for u in found if u)


def no_card(cards: list[Card], error: BaseException, proc: Path = PROC) -> RuntimeError | None:
    """The bridge's refusal to give this process a card (``error``), said for a person: how
    many cards, the holders this process may see (its own user's, or all of them to root),
    the users of the machine's other kernels, and what to do. None for any other error."""
    if ACQUIRE_FAILED not in str(error):
        return None
    label = cards[0].label if cards else "card"
    seen = [c for c in cards if not c.free]
    hidden = len(cards) - len(seen)
    text = f"no free {label} card for this process: all {len(cards)} are held."
    text += "".join(f" {c.describe()}." for c in seen)
    if hidden:
        text += (
            f" {hidden} {'is' if hidden == 1 else 'are'} held by other users' processes without a"
            " hold record, which only root can see"
        )
        users = kernel_users(proc)
        text += f" (Jupyter kernels here are run by {', '.join(users)})." if users else "."
    return RuntimeError(f"{text} What to do: {NO_CARD_FIXES}. ({error})")


# --------------------------------------------------------------------------- launches
WORKER_FIX = (
    "wb.launch(devices=1), which trains in a worker process that frees its card when the run ends"
)


def placement(cards: list[Card], devices: int, visible_env: str | None) -> dict[str, str]:
    """The environment that puts ``devices`` workers on free cards: ``{}`` when none is held,
    or where the cards' numbers are unknown (the bridge then gives each worker a free card:
    ``synapse_helpers/device.cpp``), else ``visible_env`` naming free cards. Raises
    RuntimeError, naming the holders and the fixes, when fewer than ``devices`` are free.
    """
    if not cards or visible_env is None:
        return {}
    chosen = settings.get(visible_env, "").strip()
    named = all(c.select is not None for c in cards)
    if chosen and named:  # the caller already restricted the cards: only those count
        allowed = {int(m) for m in chosen.split(",") if m.strip().isdigit()}
        cards = [c for c in cards if c.select in allowed]
    held = [c for c in cards if not c.free]
    if not held and not chosen:
        return {}
    free = [c for c in cards if c.free]
    if len(free) >= devices:
        if not named:  # never a device-file number or position passed off as a module id
            return {}
        return {visible_env: ",".join(str(c.select) for c in free[:devices])}
    label = cards[0].label if cards else "card"
    mine = [c for c in held if c.held_here()]
    fixes = [f"devices={len(free)}"] if free else []
    if mine:
        fixes.append(
            "restart the kernel to free its card"
            if in_kernel()
            else "train from a process that holds no card"
        )
    fixes.append(f"train with {WORKER_FIX}")
    raise RuntimeError(
        f"wb.launch(devices={devices}) needs {devices} free {label} cards; {len(free)} "
        f"{'is' if len(free) == 1 else 'are'} free here. "
        + " ".join(c.describe() + "." for c in held)
        + (" " + holding(mine[0]) + "." if mine else "")
        + " Fixes: "
        + "; or ".join(fixes)
        + "."
    )
