"""TEST HARNESS for torchrun workers over the Habana bridge double (not part of the double).

``tests/test_hpu.py`` launches ``wb.launch(devices=2, device="hpu")`` with this folder and
``tests/fakes`` on ``PYTHONPATH``. Python imports ``sitecustomize`` at start-up, so every
worker runs this first. transformers and accelerate see the double's HPU as they would a
Gaudi (they pick "hccl", which the double runs over gloo); only the tensors stay on the CPU,
since a CPU build of torch has no HPU tensors: accelerate's own switches place the model on
the CPU (``ACCELERATE_TORCH_DEVICE``) and wrap it in DDP without device ids
(``ACCELERATE_BYPASS_DEVICE_MAP``), and the workbench's device string reads "cpu". At exit
each worker writes what it saw to ``$WB_DOUBLE_RECORD/rank-<RANK>.json``.
"""

import atexit
import json
import os
import sys
from pathlib import Path

OUT = os.environ.get("WB_DOUBLE_RECORD")
BACKENDS: list[str] = []  # the backend each init_process_group call asked for


def _record() -> None:
    mods = sys.modules
    optimizers = getattr(mods.get("habana_frameworks.torch.hpex.optimizers"), "CREATED", [])
    marks = getattr(mods.get("habana_frameworks.torch.core.step_closure"), "MARKS", [])
    internal = mods.get("habana_frameworks.torch.utils.internal")
    record = {"rank": os.environ.get("RANK"), "local_rank": os.environ.get("LOCAL_RANK"),
              "hls_module_id": os.environ.get("HLS_MODULE_ID"),
              "bridge_loaded": "habana_frameworks.torch" in mods,
              "lazy": internal.is_lazy() if internal is not None else None,
              "optimizers": [type(o).__name__ for o in optimizers],
              "workbench_mark_steps": sum(1 for m in marks if m.startswith("workbench")),
              "process_group_backends": BACKENDS}
    Path(OUT, f"rank-{record['rank']}.json").write_text(json.dumps(record))


if OUT and os.environ.get("RANK") is not None:  # a torchrun worker, not torchrun itself
    os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"
    os.environ["ACCELERATE_BYPASS_DEVICE_MAP"] = "true"
    import torch.distributed as _dist

    from workbench.backends.registry import DeviceInfo

    DeviceInfo.torch_device = property(lambda self: "cpu")
    _init = _dist.init_process_group

    def _recorded_init(*args, **kwargs):
        BACKENDS.append(str(kwargs.get("backend", args[0] if args else None)))
        return _init(*args, **kwargs)

    _dist.init_process_group = _recorded_init
    atexit.register(_record)
