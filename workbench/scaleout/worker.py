"""One torchrun worker: ``python -m workbench.scaleout.worker RUN_DIR [--trust-remote-code]``.

``--trust-remote-code`` lets the model's own Python files run; the run directory's spec.json
never does. Rebuilds the model and data from the specs and runs ``wb.train``'s engine; rank 0
writes the events and summary, and every rank a digest of its parameters
(``ranks/rank-N.json``). After a torchrun restart every rank continues from the newest
checkpoint whose files parse, and rank 0 claims the run's lock again.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import socket
import sys
import time
from functools import partial
from pathlib import Path
from typing import NoReturn

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record

from .. import settings


def digest(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


class WholeErrorFile(ErrorHandler):
    """torch elastic's error handler, writing the error file whole or not at all: a worker
    stopped while ``record_exception`` wrote left it empty, and the agent died in
    ``json.load``. This override writes beside the file and renames it into place.
    """

    _partial: str | None = None

    def _get_error_file_path(self) -> str | None:
        return self._partial or super()._get_error_file_path()

    def record_exception(self, e: BaseException) -> None:
        final = super()._get_error_file_path()
        if not final:
            super().record_exception(e)
            return
        self._partial = f"{final}.partial-{os.getpid()}"
        try:
            super().record_exception(e)
            os.replace(self._partial, final)
        finally:
            if os.path.exists(self._partial):
                os.unlink(self._partial)
            self._partial = None


TRUST_FLAG = "--trust-remote-code"  # the launcher's word, never the run directory's
CLAIM_WAIT = 60.0  # seconds a restarted rank 0 waits for the run's lock


def _claim_again(run):
    """The run's writer, its lock claimed by this restarted rank 0, waiting within a deadline:
    a process the previous rank 0 forked may hold the lock a moment after it exited."""
    from ..rundir.lock import RunBusy
    from ..rundir.writer import RunWriter

    deadline = time.monotonic() + CLAIM_WAIT
    while True:
        try:
            return RunWriter(run).claim("restart")
        except RunBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def restart(run, rank: int):
    """(checkpoint to continue from, rank 0's writer): the newest checkpoint whose files parse
    (None for a fresh run), and where the run trained before, rank 0's lock claimed again and
    the restart logged. Not TORCHELASTIC_RESTART_COUNT: an agent restarted for another node's
    failure keeps its count, so ranks would disagree.
    """
    ckpt = run.last_checkpoint  # the newest whose files parse: one cut short by the kill is skipped
    before = run.events if rank == 0 else []
    if not before:
        return ckpt, None
    writer = _claim_again(run)
    step = int(ckpt.name.split("-")[-1]) if ckpt is not None else 0
    attempt = 1 + sum(e.get("phase") == "restart" for e in before)
    # as resume() does: the steps after the checkpoint are trained again
    run.log.truncate_after(step)
    run.log.emit(
        {
            "phase": "restart",
            "step": step,
            "attempt": attempt,
            "from": ckpt.name if ckpt is not None else None,
            "skipped": sorted(run.broken_checkpoints),
            "torchrun_restarts": int(settings.get("TORCHELASTIC_RESTART_COUNT", "0")),
        }
    )
    return ckpt, writer


# a failing rank's traceback reaches torchrun's report, its error file written whole
@partial(record, error_handler=WholeErrorFile())
def main(argv: list[str] | None = None) -> int:
    from ..backends.hpu import hpu_mode
    from ..rundir.run import write_json
    from ..training.engine import Run, execute, untrusted
    from ..training.recipe import world

    args = list(argv if argv is not None else sys.argv[1:])
    trust = TRUST_FLAG in args
    args = [a for a in args if a != TRUST_FLAG]
    if len(args) != 1:
        print(f"usage: python -m workbench.scaleout.worker RUN_DIR [{TRUST_FLAG}]", file=sys.stderr)
        return 2
    run = Run.open(args[0])
    refusal = untrusted(run, trust, f"start the workers with {TRUST_FLAG} after RUN_DIR")
    if refusal is not None:
        raise ValueError(refusal)
    run.trust_remote_code = trust
    rank, size = world()
    ckpt, writer = restart(run, rank)
    execute(run, ckpt, writer)
    trainer = run.trainer
    model = trainer.model if trainer is not None else None
    if trainer is not None and model is not None:
        out = Path(run.path) / "ranks"
        out.mkdir(exist_ok=True)
        write_json(
            out / f"rank-{rank}.json",
            {
                "rank": rank,
                "host": socket.gethostname(),  # the node it ran on (multi-node tests read it)
                "world_size": size,
                "step": trainer.state.global_step,
                "params_sha256": digest(model),
                "device": str(trainer.args.device),
                "params_device": str(next(model.parameters()).device),
                "dist_backend": dist.get_backend() if dist.is_initialized() else None,
                "hpu_mode": hpu_mode(),  # as this worker's bridge reports it (or None)
            },
        )
    return 0


def leave(code: int) -> NoReturn:
    """Exit with ``code`` after the exit hooks, skipping the interpreter's finalization, where
    torch's threads (gloo's worker, the autograd device thread) may release a finished work's
    Python state and abort a rank that completed: "terminate called without an active
    exception" (pytorch issue #190489; the core dump's stack and the counts: docs/tests.md)."""
    atexit._run_exitfuncs()  # logging's flush, weakref.finalize's
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed or gone: nothing to flush
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main() or 0)  # record() types it int | None
