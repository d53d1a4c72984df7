"""One torchrun worker: ``python -m workbench.worker RUN_DIR``.

Rebuilds the model and data from the run directory's specs and runs the same engine as
``wb.train``; the Trainer sets up torch.distributed from torchrun's environment with the
backend from the backend table (hccl, nccl, gloo). Rank 0 writes the events and summary.
At the end every rank writes a digest of its parameters (``ranks/rank-N.json``), so that a
test, or a doubtful user, can check that all ranks hold the same weights.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record


def digest(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


@record  # a failing rank's traceback reaches torchrun's error report
def main(argv: list[str] | None = None) -> int:
    from .engine import Run, execute
    from .recipe import world

    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m workbench.worker RUN_DIR", file=sys.stderr)
        return 2
    run = Run.open(args[0])
    rank, size = world()
    execute(run)
    model = run.trainer.model if run.trainer is not None else None
    if model is not None:
        out = Path(run.path) / "ranks"
        out.mkdir(exist_ok=True)
        (out / f"rank-{rank}.json").write_text(json.dumps({
            "rank": rank, "world_size": size, "step": run.trainer.state.global_step,
            "params_sha256": digest(model)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
