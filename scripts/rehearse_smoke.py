"""The HPU smoke of ``make rehearse`` (scripts/rehearse.sh): run inside the rehearsed Intel
container's environment, it checks that the setup kept the image's torch and installed no
upstream DeepSpeed, that the bridge (the double, installed as a distribution) is the one the
image has, then trains on it eager and lazy and runs the doctor, each in a fresh process.
Prints one line per check; exits non-zero at the first failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

SYSTEM = os.environ["REHEARSE_SYSTEM_SITE"]  # the image's site-packages
TORCH = os.environ["REHEARSE_TORCH"]  # the image's torch version, read before the setup

TRAIN = """
import json, math, workbench as wb
run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=32), device="hpu", mode={mode!r},
               max_steps=2, batch_size=2, max_length=32, log_every=1, live=False)
losses = [e["loss"] for e in run.events if "loss" in e]
print("@@" + json.dumps({{"status": run.status, "device": str(run.trainer.args.device),
                         "losses": losses, "finite": all(math.isfinite(x) for x in losses)}}))
"""
DOCTOR = """
import json, workbench as wb
r = wb.doctor("rehearse", device="hpu", echo=False)
print("@@" + json.dumps({"failed": [[c.name, c.status, c.detail] for c in r.checks
                                    if c.status != "pass"],
                        "names": [c.name for c in r.checks], "exit_code": r.exit_code}))
"""


def fresh(code: str, **env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("@@")]
    if done.returncode or not lines:
        sys.exit(f"FAILED ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return json.loads(lines[-1][2:])


def check(name: str, ok: bool, said) -> None:
    print(f"{'ok' if ok else 'FAILED'}  {name}: {said}", flush=True)
    if not ok:
        sys.exit(1)


def main() -> None:
    import importlib.metadata as md

    import torch

    started = time.monotonic()
    check("torch is the image's, unchanged",
          torch.__file__.startswith(SYSTEM) and torch.__version__ == TORCH,
          f"{torch.__version__} from {os.path.dirname(torch.__file__)}")
    try:
        found = md.version("deepspeed")
    except md.PackageNotFoundError:
        found = None
    check("no upstream DeepSpeed installed", found is None, found or "not installed")
    bridge = md.distribution("habana-frameworks-double")
    import habana_frameworks

    check("the bridge is the image's distribution (not PYTHONPATH)",
          habana_frameworks.__file__.startswith(SYSTEM) and "PYTHONPATH" not in os.environ,
          f"{bridge.metadata['Name']} {bridge.version} in {os.path.dirname(habana_frameworks.__file__)}")
    for mode, env in (("eager", {}), ("lazy", {"PT_HPU_LAZY_MODE": "1"})):
        out = fresh(TRAIN.format(mode=mode), **env)
        check(f"wb.train on hpu, {mode}", out["status"] == "completed"
              and out["device"] == "hpu:0" and len(out["losses"]) >= 2 and out["finite"], out)
    out = fresh(DOCTOR)
    check("wb.doctor(device='hpu'): every check passes (launch over hccl included)",
          not out["failed"] and out["exit_code"] == 0 and "launch" in out["names"], out)
    print(f"smoke: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
