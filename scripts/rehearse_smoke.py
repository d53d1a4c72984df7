"""The HPU smoke of ``make rehearse`` (scripts/rehearse.sh): run inside the rehearsed Intel
container's environment, it checks that the setup kept the image's torch and installed no
upstream DeepSpeed, that the bridge (the double, installed as a distribution) is the one the
image has, then, each in a fresh process: trains on it lazy, runs the doctor (eager: its
trainings, and its launch over two cards, ``wb.launch(devices=2)``, checked rank by rank), and
runs notebooks 01, 12 and 13 under papermill with their smoke parameters in a kernel of this
venv's Python.
Prints one line per check with its time; exits non-zero at the first failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SYSTEM = os.environ["REHEARSE_SYSTEM_SITE"]  # the image's site-packages
TORCH = os.environ["REHEARSE_TORCH"]  # the image's torch version, read before the setup
REPO = Path(__file__).resolve().parents[1]  # the setup's copy of the checkout
KERNEL = "wb-rehearse"  # a kernelspec whose Python is this venv's (sys.executable)

TRAIN = """
import json, math, workbench as wb
run = wb.train("gpt2-tiny", wb.dataset("docstrings-lm", limit=32), device="hpu", mode={mode!r},
               max_steps=2, batch_size=2, max_length=32, log_every=1, live=False)
losses = [e["loss"] for e in run.events if "loss" in e]
print("@@" + json.dumps({{"status": run.status, "device": str(run.trainer.args.device),
                         "losses": losses, "finite": all(math.isfinite(x) for x in losses)}}))
"""
# the doctor's launch (wb.launch(devices=2)) is the smoke's: its ranks are read here too
DOCTOR = """
import json, pathlib, workbench as wb
r = wb.doctor("rehearse", device="hpu", echo=False)
run = next(pathlib.Path(c.data["run"]) for c in r.checks if c.name == "launch" and "run" in c.data)
print("@@" + json.dumps({"checks": {c.name: [c.status, c.detail] for c in r.checks},
                        "exit_code": r.exit_code, "status": wb.Run.open(run).status,
                        "ranks": [json.loads(p.read_text()) for p in sorted(run.glob("ranks/rank-*"))]}))
"""
# notebook -> (papermill parameters, environment): 01 and 12 pick their device from
# WORKBENCH_DEVICE, 13 takes DEVICE and, on a two-card node, must leave one card free
NOTEBOOKS = {
    "01_quickstart": ([], {"WORKBENCH_DEVICE": "hpu"}),
    "12_your_own_trainer": ([], {"WORKBENCH_DEVICE": "hpu"}),
    "13_gaudi_node": (["-p", "DEVICE", "hpu"], {"FAKE_HPU_COUNT": "2"}),
}


def fresh(code: str, **env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("@@")]
    if done.returncode or not lines:
        sys.exit(f"FAILED ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return json.loads(lines[-1][2:])


def check(name: str, ok: bool, said, since: float | None = None) -> None:
    took = f" ({time.monotonic() - since:.0f} s)" if since is not None else ""
    print(f"{'ok' if ok else 'FAILED'}  {name}{took}: {said}", flush=True)
    if not ok:
        sys.exit(1)


def notebook_checks():
    """The recorded-results checks of the course's test (tests/test_notebooks.py) and the
    emulated-HPU test's warm-up check (for the notebooks it leaves to this smoke in `make
    test`), read with the environment put back as it was (its conftest sets the session's)."""
    import warnings

    saved = dict(os.environ)
    sys.path.insert(0, str(REPO / "tests"))
    try:
        with warnings.catch_warnings():  # this process loaded the bridge (torch) first and
            warnings.filterwarnings("ignore", "the HPU recipe cache is off")  # trains nothing
            from test_emulated_notebooks import IN_REHEARSAL, after_warmup
            from test_notebooks import CHECKS
    finally:
        sys.path.remove(str(REPO / "tests"))
        os.environ.clear()
        os.environ.update(saved)
    return CHECKS, IN_REHEARSAL, after_warmup


def kernelspec(where: Path) -> Path:
    """A kernelspec named KERNEL that starts this venv's Python (papermill's -k picks it)."""
    spec = where / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "the rehearsed container's venv", "language": "python"}))
    return where


def notebook(name: str, work: Path, jupyter: Path, checks) -> None:
    import nbformat

    import workbench as wb

    params, env = NOTEBOOKS[name]
    folder = work / name
    folder.mkdir(parents=True)
    out = folder / f"{name}.ipynb"
    env = {**os.environ, "JUPYTER_PATH": str(jupyter), "FAKE_HPU_DEV_DIR": str(folder / "accel"),
           "WORKBENCH_HPU_DEVICE_FILES": str(folder / "accel" / "accel*"),
           "WORKBENCH_RUNS": str(folder / "runs"), **env}
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "papermill", str(REPO / "notebooks" / f"{name}.ipynb"), str(out),
         "-k", KERNEL, "--cwd", str(folder), "--no-progress-bar", *params],
        env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        check(f"notebook {name} under papermill", False, done.stderr[-4000:], t0)
    nb = nbformat.read(out, as_version=4)
    errors = [o.get("ename") for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    records = wb.records(out)
    summaries = [json.loads(p.read_text()) for p in folder.rglob("runs/*/summary.json")]
    kinds = {s["device"]["kind"] for s in summaries if s.get("device")}
    records_ok, warmed, after_warmup = checks
    ok = not errors and records_ok[name](records) and kinds == {"hpu"} \
        and (name not in warmed or bool(after_warmup(summaries)))
    said = {"errors": errors, "devices": sorted(kinds), "records": records,
            "after_warmup": [s.get("after_warmup") for s in summaries]}
    if name == "13_gaudi_node":  # the worker freed its card; the in-kernel run holds one
        text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                       for o in c.outputs)
        ok = ok and (records["cards"], records["free_cards"]) == (2, 1) \
            and "this kernel holds Gaudi " in text and "restart the kernel to free it" in text
    check(f"notebook {name} on hpu under papermill, kernel {KERNEL}", ok, said, t0)


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
          habana_frameworks.__file__.startswith(SYSTEM)  # the image's PYTHONPATH is set (rehearse.sh)
          and not any(habana_frameworks.__file__.startswith(p) for p in os.environ["PYTHONPATH"].split(":")),
          f"{bridge.metadata['Name']} {bridge.version} in {os.path.dirname(habana_frameworks.__file__)}")
    # eager, the bridge's default, is the doctor's (its gpt2 and bert trainings, below); lazy
    # is fixed per process, so it has its own
    t0 = time.monotonic()
    out = fresh(TRAIN.format(mode="lazy"), PT_HPU_LAZY_MODE="1")
    check("wb.train on hpu, lazy", out["status"] == "completed"
          and out["device"] == "hpu:0" and len(out["losses"]) >= 2 and out["finite"], out, t0)

    t0 = time.monotonic()
    out = fresh(DOCTOR)
    checks = out["checks"]
    failed = {name: said for name, said in checks.items() if said[0] != "pass"}
    check("wb.doctor(device='hpu'): every check passes (launch over hccl included)",
          not failed and out["exit_code"] == 0
          and {"gpt2.train", "bert.train", "bf16", "all-reduce", "launch", "profile"} <= set(checks)
          and "eager mode" in checks["device"][1]
          and "hccl all-reduce over 2 processes (hpu:0, hpu:0)" in checks["all-reduce"][1]
          and "over hccl" in checks["launch"][1], failed or {n: checks[n][1] for n in ("all-reduce", "launch")}, t0)
    ranks = out["ranks"]
    check("wb.launch(devices=2) on hpu: both ranks trained, over hccl, to the same weights "
          "(the doctor's launch)", out["status"] == "completed" and [r["rank"] for r in ranks] == [0, 1]
          and all(r["world_size"] == 2 and r["step"] == ranks[0]["step"] >= 2 and r["dist_backend"] == "hccl"
                  and r["params_device"].startswith("hpu") for r in ranks)
          and len({r["params_sha256"] for r in ranks}) == 1, out["ranks"])

    work = Path(os.environ.get("TMPDIR", "/tmp")).resolve() / "notebooks"
    jupyter = kernelspec(work / "jupyter")
    checks = notebook_checks()
    for name in NOTEBOOKS:
        notebook(name, work, jupyter, checks)
    print(f"smoke: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
