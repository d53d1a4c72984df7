"""Who holds each device card, as this Jupyter server sees it: the OS's holders
(``backends.cards``), and for one of this server's kernels its id and notebook.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import settings
from ..backends.cards import PROC, Card
from ..backends.monitor import Unavailable
from ..backends.registry import BACKENDS, ORDER
from .runs import RunTable


def kernel_pids(kernel_manager: Any) -> dict[int, str]:
    """pid -> kernel id for every kernel this server started (its provisioner's process)."""
    out: dict[int, str] = {}
    for kid in list(kernel_manager.list_kernel_ids()):
        try:
            km = kernel_manager.get_kernel(kid)
        except KeyError:  # shut down meanwhile
            continue
        provisioner = getattr(km, "provisioner", None)
        pid = getattr(provisioner, "pid", None) or getattr(
            getattr(provisioner, "process", None), "pid", None
        )
        if pid:
            out[int(pid)] = kid
    return out


def card_rows(
    kernels: dict[int, str], notebooks: dict[str, str], known: set[str]
) -> dict[str, Any]:
    """Every card of every kind, free or with its holders (pid, command line, and for a kernel
    of this server its ``kernel_id`` and ``notebook``)."""
    cards, notes = [], []
    for kind in ORDER:
        try:
            found = BACKENDS[kind].monitoring.cards()
        except Unavailable as e:  # a management library that cannot start: no cards of it
            notes.append({"kind": kind, "title": BACKENDS[kind].title, "why": e.why})
            continue
        for card in found:
            row = card.to_dict()
            for h in row["holders"]:
                kid = kernels.get(h["pid"]) or (h["kernel_id"] if h["kernel_id"] in known else None)
                h["kernel_id"], h["this_server"] = kid, kid is not None
                if kid is not None:
                    h["notebook"] = notebooks.get(kid, h["notebook"])
            cards.append(row)
    return {"cards": cards, "notes": notes}


async def server_cards(kernel_manager: Any, session_manager: Any) -> dict[str, Any]:
    """``card_rows`` for this server's kernels and sessions."""
    sessions = await session_manager.list_sessions()
    notebooks = {s["kernel"]["id"]: s.get("path") for s in sessions if s.get("kernel")}
    known = set(kernel_manager.list_kernel_ids())
    return card_rows(kernel_pids(kernel_manager), notebooks, known)


def with_allocator_memory(
    readings: dict[str, Any], by_pid: Callable[[], dict[int, tuple[int, int | None]]]
) -> dict[str, Any]:
    """``readings`` (``monitor_all``) with each held Gaudi's memory in use from the run its
    holder writes (``by_pid()``: pid -> (in use, total)): HLML's "used" is the bridge's
    reservation, nearly the whole HBM. A card whose holder writes no run stays "not reported"."""
    rows = [r for r in readings["devices"] if r["kind"] == "hpu" and r["mem_used"] is None]
    writers = by_pid() if rows else {}
    if not writers:
        return readings
    try:
        holders = {c.index: [h.pid for h in c.holders] for c in BACKENDS["hpu"].monitoring.cards()}
    except Unavailable:
        return readings
    for r in rows:
        for pid in holders.get(r["index"], []):
            if pid in writers:
                used, total = writers[pid]
                r["mem_used"], r["mem_total"] = used, total or r["mem_total"]
    return readings


def _runs_home(pid: int, proc: Path = PROC) -> Path | None:
    """Where process ``pid`` keeps its runs (the folder above its ``WORKBENCH_RUNS``, else its
    working folder); None where this process may not read it (another user's, but to root)."""
    try:
        for entry in (proc / str(pid) / "environ").read_bytes().split(b"\0"):
            if entry.startswith(settings.RUNS.encode() + b"="):
                named = entry.split(b"=", 1)[1].decode(errors="replace")
                if named:
                    return Path(named).expanduser().parent
        return Path(os.readlink(proc / str(pid) / "cwd"))
    except OSError:
        return None


def room(cards: list[Card], proc: Path = PROC) -> list[dict[str, Any]]:
    """The teacher's view of a shared node: each held card's holders with their user, notebook
    and the run they train or last trained. Complete for root; others see their own holds."""
    pids = {h.pid for c in cards for h in c.holders}
    tables: dict[Path, dict[int, dict[str, Any]]] = {}
    rows = []
    for card in cards:
        for h in card.holders:
            home = _runs_home(h.pid, proc)
            if home is not None and home not in tables:
                tables[home] = RunTable(home).by_writer(pids) if home.is_dir() else {}
            run = tables.get(home, {}).get(h.pid) if home is not None else None
            rows.append(
                {
                    "card": card.title,
                    "pid": h.pid,
                    "user": h.user,
                    "notebook": h.notebook,
                    "run": run["full_path"] if run else None,
                    "step": run["step"] if run else None,
                    "status": run["status"] if run else None,
                    "max_steps": run["max_steps"] if run else None,
                }
            )
    return rows
