"""``wb.doctor()`` / ``workbench doctor``: is this machine ready to train? Run it first; paste
its report into an issue when something is wrong.

In about a minute on one device, through the public API only: versions and driver; the device,
its memory readers and compile counter; 20-step tiny GPT-2 and BERT runs; bf16 against fp32;
with two devices an all-reduce and a two-rank ``wb.launch``; a short profile. (Not named
``doctor.py``: ``workbench.doctor`` would replace the function ``wb.doctor`` with the module.)
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.registry import DeviceInfo, backend, fmt_bytes, launch_env, parse_device
from ..backends.registry import device as pick_device
from ..backends.torchrun import child_env
from ..catalog.modelspec import model as model_spec
from ..data.dataset import dataset
from ..scaleout.launcher import launch
from ..training.engine import train
from ..training.profiler import profile
from . import diagnosis
from .diagnosis import REPORT_IT, Check, Diagnosis, failed, passed, skipped

STEPS = 20  # training steps per model
BF16_TOL = {"loss": 2e-2, "grads": 5e-2}  # relative: bf16 keeps 8 significant bits (~4e-3 a value)
RUNS = {  # name -> (model, dataset arguments, wb.train arguments)
    "gpt2": ("gpt2-tiny", {"source": "docstrings-lm", "limit": 64}, {}),
    # a few rows seen several times: 20 steps are enough to see the loss fall
    "bert": (
        "bert-tiny",
        {"source": "docstrings-topic", "limit": 32, "eval_fraction": 0.25},
        {"padding": "bucketed", "buckets": 4},
    ),
}
RUN_CHECKS = ("train", "optimizer", "clip", "memory", "recompiles", "counts")
MULTI_COST = (
    "the 2-process gloo all-reduce and the 2-rank launch take ~30 s on a CPU: ask for them "
    "with `workbench doctor --multi` (wb.doctor(multi=True))"
)


@dataclass
class _Visit:
    """What every check reads: the device under test and where the doctor writes."""

    dev: DeviceInfo | None
    error: str | None  # why no device could be used
    spec: str  # the device as wb.train takes it
    out: Path
    multi: bool
    versions: dict[str, str | None]

    @property
    def kind(self) -> str:
        return self.dev.kind if self.dev else "-"

    @property
    def device(self) -> DeviceInfo:
        """The device, for the checks that need one (GROUPS skips them without)."""
        assert self.dev is not None
        return self.dev

    def runs(self, name: str, **extra) -> dict:
        """wb.train arguments shared by every run the doctor makes."""
        return {
            "batch_size": 8,
            "max_length": 32,
            "log_every": 1,
            "save_every": 1000,
            "live": False,
            "run_dir": self.out / "runs",
            "name": f"doctor-{name}",
            "device": self.spec,
            **extra,
        }


# --------------------------------------------------------------------------- versions, device
def _versions(v: _Visit) -> list[Check]:
    found, text = v.versions, diagnosis.versions_text(v.versions)
    missing = [k for k in ("torch", "transformers", "accelerate", "datasets") if not found[k]]
    if v.kind == "hpu" and not found["habana_frameworks"]:
        missing.append("habana_frameworks")
    if missing:
        return [
            failed(
                "versions",
                f"not installed: {', '.join(missing)}; {text}",
                "pip install -e '.[dev]' in this repository (on Gaudi: inside Intel's container, "
                "which brings torch and habana_frameworks)",
                **found,
            )
        ]
    return [passed("versions", text, **found)]


def _device(v: _Visit) -> list[Check]:
    if v.dev is None:
        return [
            failed(
                "device",
                v.error or "no device",
                "unset WORKBENCH_DEVICE or choose an available device "
                "(`workbench devices` lists them)",
            )
        ]
    d, chip = v.dev, v.dev.chip
    text = (
        f"{d.kind} x{d.count}: {d.name}, {fmt_bytes(d.total_memory)}, {d.precision}, "
        f"{d.dist_backend}"
    )
    text += f", {d.generation}" if d.generation else ""
    text += f", {d.mode} mode" if d.mode else ""
    text += (
        f"; chip {chip.name}" if chip else "; a chip the table (chips.CHIPS) does not know: no MFU"
    )
    if d.cards:
        text += f"; {sum(c.free for c in d.cards)} of {len(d.cards)} cards free"
        text += "".join(f"; {c.describe()}" for c in d.cards if not c.free)
    text += f"; {d.holding}" if d.holding else ""
    if d.kind == "cpu":
        import torch

        text += f"; torch threads: {torch.get_num_threads()}"
    return [passed("device", text, device=d.to_dict(), chip=chip.name if chip else None)]


def _memory(v: _Visit) -> list[Check]:
    m = v.device.memory()
    shape_ok = set(m) >= {"allocated", "peak", "total"} and all(isinstance(m[k], int) for k in m)
    if (
        not shape_ok
        or m["total"] <= 0
        or not 0 <= m["allocated"] <= m["peak"]
        or m["allocated"] > m["total"]
    ):
        return [
            failed(
                "memory",
                f"the {v.kind} memory reader returned {m}",
                "expected bytes with 0 <= allocated <= peak and allocated <= total > 0; "
                + REPORT_IT,
                **m,
            )
        ]
    if v.kind == "cpu":
        return [
            passed(
                "memory",
                f"process RSS {fmt_bytes(m['allocated'])}, peak RSS {fmt_bytes(m['peak'])}, "
                f"system {fmt_bytes(m['total'])} (the CPU record reports process RSS, not device "
                "memory)",
                **m,
            )
        ]
    chip = v.device.chip
    hbm = f" of {fmt_bytes(chip.memory)} HBM" if chip and chip.memory else ""
    return [
        passed(
            "memory",
            f"usable {fmt_bytes(m['total'])}{hbm}; in use {fmt_bytes(m['allocated'])}, "
            f"peak {fmt_bytes(m['peak'])}",
            **m,
        )
    ]


def _compile_counter(v: _Visit) -> list[Check]:
    n = v.device.compiles()
    if n is None and v.kind == "hpu":
        return [
            failed(
                "compile-counter",
                "the bridge's graph compile counter is unreadable (metric_global"
                "('graph_compilation'))",
                "recompiles cannot be seen: use a bridge whose "
                "habana_frameworks.torch.hpu.metrics has metric_global; " + REPORT_IT,
            )
        ]
    if n is None:
        return [
            skipped(
                "compile-counter",
                f"the {v.kind} record reports no compile counter (Gaudi's bridge "
                f"counts graph compiles; this backend does not)",
            )
        ]
    if not isinstance(n, int) or n < 0:
        return [
            failed(
                "compile-counter", f"the counter read {n!r}", "expected a count >= 0; " + REPORT_IT
            )
        ]
    return [passed("compile-counter", f"{n} graph compiles so far in this process", compiles=n)]


# --------------------------------------------------------------------------- training runs
def _run_checks(key: str, v: _Visit) -> list[Check]:
    model, data, extra = RUNS[key]
    names = [f"{key}.{c}" for c in RUN_CHECKS]
    before, start = v.device.memory(), v.device.compiles()
    v.device.reset_peak_memory()
    try:
        run = train(model, dataset(**data), max_steps=STEPS, **v.runs(key, **extra))
    except Exception as e:
        return [
            failed(
                names[0],
                f"{model} did not train: {type(e).__name__}: {e}",
                "read the error; " + REPORT_IT,
            ),
            *(skipped(n, f"the {key} run failed (see {names[0]})") for n in names[1:]),
        ]
    steps = [e for e in run.events if e.get("phase") in ("warmup", "train")]
    found = [
        diagnosis.loss_falls(names[0], run, steps),
        diagnosis.optimizer_ran(names[1], run, v.device),
        diagnosis.clip_ran(names[2], steps),
        diagnosis.memory_moved(names[3], steps, before, v.device),
        diagnosis.no_recompiles(names[4], steps, v.device, run.spec.args.padding, start),
        diagnosis.step_counts(names[5], run.summary.get("after_warmup") or {}, v.device),
    ]
    run.trainer = None  # let the model and optimizer go before the next check
    return found


# --------------------------------------------------------------------------- bf16
def _step(model, ids, dev: DeviceInfo, bf16: bool):
    """(loss, flat gradients on the CPU) of one forward/backward, under bf16 autocast or not."""
    import torch

    model.zero_grad(set_to_none=True)
    with torch.autocast(device_type=dev.backend.torch_device, dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    dev.mark_step()  # HPU lazy mode: run the accumulated graph (a no-op elsewhere)
    grads = torch.cat(
        [p.grad.detach().float().flatten() for p in model.parameters() if p.grad is not None]
    )
    return float(loss.detach()), grads.cpu()


def _bf16(v: _Visit) -> list[Check]:
    chip = v.device.chip
    if not (chip.bf16 if chip else v.device.precision == "bf16"):
        return [
            skipped(
                "bf16",
                f"{chip.name if chip else v.device.name} has no bf16 (chips.CHIPS / the backend "
                "record)",
            )
        ]
    import torch

    model: Any = model_spec("gpt2-tiny").build()[0]  # a transformers model
    model.to(v.device.torch_device).eval()  # no dropout: both passes see the same function
    ids = torch.randint(
        0, model.config.vocab_size, (4, 32), generator=torch.Generator().manual_seed(0)
    )
    ids = ids.to(v.device.torch_device)
    l32, g32 = _step(model, ids, v.device, False)
    l16, g16 = _step(model, ids, v.device, True)
    dl, dg = abs(l16 - l32) / abs(l32), float((g16 - g32).norm() / g32.norm())
    text = (
        f"gpt2-tiny, one step: loss {l32:.4f} (fp32) vs {l16:.4f} (bf16 autocast), {dl:.1e} apart; "
        f"gradients {dg:.1e} apart (tolerance {BF16_TOL['loss']:g} and {BF16_TOL['grads']:g}, "
        "relative)"
    )
    if dl <= BF16_TOL["loss"] and dg <= BF16_TOL["grads"]:
        return [passed("bf16", text, loss_rel=dl, grads_rel=dg)]
    return [
        failed(
            "bf16",
            text,
            "bf16 drifts from fp32 beyond the tolerance on this device: train with "
            "precision='fp32' for now; " + REPORT_IT,
            loss_rel=dl,
            grads_rel=dg,
        )
    ]


# --------------------------------------------------------------------------- two devices
def _two_devices(v: _Visit, name: str) -> Check | None:
    """A skip when two ranks cannot or should not run here; None when they should."""
    if v.kind == "cpu":
        return None if v.multi else skipped(name, f"one CPU device: {MULTI_COST}")
    if v.device.count < 2:
        return skipped(name, f"one {v.kind} device visible: two ranks need two devices")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def all_reduce_rank(kind: str, out: str) -> None:
    """One rank of the doctor's all-reduce, in its own process (RANK, WORLD_SIZE... set),
    its process group set up by accelerate as the Trainer does."""
    import torch
    import torch.distributed as dist
    from accelerate import PartialState

    state = PartialState(cpu=kind == "cpu", backend=backend(kind).policy.dist_backend)
    t0 = time.perf_counter()
    x = torch.full((1024,), float(state.process_index + 1), device=state.device)
    dist.all_reduce(x)
    got = x.cpu()  # waits for the collective
    want = float(sum(range(1, state.num_processes + 1)))
    Path(out, f"rank-{state.process_index}.json").write_text(
        json.dumps(
            {
                "rank": state.process_index,
                "backend": dist.get_backend(),
                "device": str(state.device),
                "ok": bool(torch.all(got == want)),
                "value": float(got[0]),
                "want": want,
                "seconds": time.perf_counter() - t0,
            }
        )
    )
    state.destroy_process_group()


def _all_reduce(v: _Visit) -> list[Check]:
    skip = _two_devices(v, "all-reduce")
    if skip:
        return [skip]
    out = v.out / "all-reduce"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:  # two free cards (this kernel may hold one since the checks above), read from the OS
        cards = launch_env(v.device, 2)
    except RuntimeError as e:
        return [
            failed(
                "all-reduce",
                f"two ranks need two free cards: {e}",
                "free a card (restart the kernel that holds it) and run the doctor again",
            )
        ]
    # without this kernel's HLS_MODULE_ID, on the free cards
    env = child_env(
        {
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
            **cards,
        }
    )
    code = (
        "from workbench.checks.checkup import all_reduce_rank; "
        f"all_reduce_rank({v.kind!r}, {str(out)!r})"
    )
    procs = []
    for rank in range(2):
        log = open(out / f"rank-{rank}.log", "w")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            )
        )
        log.close()
    try:
        codes = [p.wait(timeout=180) for p in procs]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]
    dist = backend(v.kind).policy.dist_backend
    ok = (
        codes == [0, 0]
        and len(results) == 2
        and all(r["ok"] and r["backend"] == dist for r in results)
    )
    if ok:
        return [
            passed(
                "all-reduce",
                f"{dist} all-reduce over 2 processes ({', '.join(r['device'] for r in results)}): "
                f"1 + 2 = {results[0]['value']:g} in every element, "
                f"{max(r['seconds'] for r in results):.2f} s",
                ranks=results,
            )
        ]
    why = "timed out after 180 s" if codes is None else f"exit codes {codes}, results {results}"
    return [
        failed(
            "all-reduce",
            f"{dist} all-reduce over 2 processes failed: {why}",
            f"read {out}/rank-*.log; a card held by another process (hl-smi / nvidia-smi lists "
            "them) "
            f"or a blocked port on 127.0.0.1 are common causes; " + REPORT_IT,
            ranks=results,
        )
    ]


def _launch(v: _Visit) -> list[Check]:
    skip = _two_devices(v, "launch")
    if skip:
        return [skip]
    args = v.runs("launch", batch_size=4)
    args.pop("device")
    try:
        run = launch(
            "gpt2-tiny",
            dataset("docstrings-lm", limit=64),
            devices=2,
            max_steps=6,
            device=v.kind,
            **args,
        )
    except Exception as e:
        return [
            failed(
                "launch",
                f"wb.launch(devices=2) failed: {e}",
                f"read launcher.log and logs/ in its run directory under {v.out / 'runs'}; "
                + REPORT_IT,
            )
        ]
    digests = {
        json.loads(p.read_text())["params_sha256"] for p in run.path.glob("ranks/rank-*.json")
    }
    ranks = len(list(run.path.glob("ranks/rank-*.json")))
    text = (
        f"{run.summary.get('world_size')} ranks trained {run.summary.get('step')} steps over "
        f"{backend(v.kind).policy.dist_backend} ({run.path})"
    )
    if run.status == "completed" and ranks == 2 and len(digests) == 1:
        return [
            passed("launch", text + "; both ranks ended with the same weights", run=str(run.path))
        ]
    return [
        failed(
            "launch",
            f"{text}: status {run.status}, {ranks} rank digests, {len(digests)} distinct",
            "ranks that end with different weights did not synchronise gradients; " + REPORT_IT,
        )
    ]


# --------------------------------------------------------------------------- profile
def _profile(v: _Visit) -> list[Check]:
    model, data, extra = RUNS["bert"]
    prof = profile(model, dataset(**data), steps=3, warmup=1, top=10, **v.runs("profile", **extra))
    events = (
        json.loads(prof.trace.read_text()).get("traceEvents", []) if prof.trace.exists() else []
    )
    if not events or prof.table.empty:
        return [
            failed(
                "profile",
                f"trace events: {len(events)}, table rows: {len(prof.table)} ({prof.trace})",
                "torch.profiler recorded nothing: " + REPORT_IT,
            )
        ]
    top = prof.table.iloc[0]
    text = (
        f"{len(events)} trace events; top op {top['op']} {top['self_ms']:.2f} ms; "
        f"trace {prof.trace}"
    )
    if v.kind == "hpu" and "hpu" not in prof.activities:
        text += " (CPU time only: this torch cannot record the HPU activity)"
    elif v.kind == "hpu" and not prof.table["self_ms"].any():
        # the bridge merges its device events into the exported trace file only
        text += " (HPU device times reach only the trace: open it in ui.perfetto.dev)"
    return [passed("profile", text, trace=str(prof.trace), events=len(events))]


# --------------------------------------------------------------------------- the visit
GROUPS = [  # (group, its checks, the function that makes them, whether it needs a device)
    ("versions", ("versions",), _versions, False),
    ("device", ("device",), _device, False),
    ("memory", ("memory",), _memory, True),
    ("compile-counter", ("compile-counter",), _compile_counter, True),
    *(
        (key, tuple(f"{key}.{c}" for c in RUN_CHECKS), lambda v, k=key: _run_checks(k, v), True)
        for key in RUNS
    ),
    ("bf16", ("bf16",), _bf16, True),
    ("all-reduce", ("all-reduce",), _all_reduce, True),
    ("launch", ("launch",), _launch, True),
    ("profile", ("profile",), _profile, True),
]
CHECKS = tuple(n for _, names, _, _ in GROUPS for n in names)


def _wanted(only) -> set[str]:
    """The check names ``only`` selects (check or group names); every check when None."""
    if only is None:
        return set(CHECKS)
    asked = [only] if isinstance(only, str) else list(only)
    groups = {g: set(names) for g, names, _, _ in GROUPS}
    bad = [a for a in asked if a not in groups and a not in CHECKS]
    if bad:
        raise ValueError(
            f"unknown check {bad[0]!r}; known: {', '.join(dict.fromkeys([*groups, *CHECKS]))}"
        )
    return set().union(*(groups.get(a, {a}) for a in asked))


def doctor(
    out: str | Path = "doctor",
    *,
    multi: bool = False,
    device: str = "auto",
    only=None,
    echo: bool = True,
) -> Diagnosis:
    """Check that this machine trains correctly; returns the ``Diagnosis`` (a table).

    Parameters
    ----------
    out : path
        Where ``report.json``, ``report.md`` and the doctor's runs go (default ``./doctor``).
    multi : bool
        On a CPU, also run the two-process all-reduce and the two-rank launch (~30 s).
        With two or more HPUs or GPUs they always run.
    device : str
        The device to check (default: the one ``wb.train`` would use).
    only : str or list of str, optional
        Check names or groups (``"versions"``, ``"gpt2"``, ``"bf16"``...) to run alone.
    echo : bool
        Print each check to stderr as it finishes.

    The diagnosis's ``exit_code`` is 1 when a check failed; each failure says what to do.
    """
    wanted = _wanted(only)
    if isinstance(device, str) and device != "auto":  # a misspelt device= is refused before
        parse_device(device)  # anything is written; one this machine lacks is a finding
    try:
        dev, error = pick_device(device), None
    except (RuntimeError, ValueError) as e:
        dev, error = None, str(e)
    spec = device if device != "auto" else (dev.kind if dev else "auto")
    visit = _Visit(dev, error, spec, Path(out), multi, diagnosis.versions(dev))
    t0, checks = time.monotonic(), []
    for _group, names, make, needs_device in GROUPS:
        if not wanted & set(names):
            continue
        started = time.monotonic()
        if needs_device and dev is None:
            found = [skipped(n, "no usable device (see the device check)") for n in names]
        else:
            try:
                found = make(visit)
            except Exception as e:  # a check that crashed failed, with its error
                found = [
                    failed(n, f"the check crashed: {type(e).__name__}: {e}", REPORT_IT)
                    for n in names
                ]
        found = [c for c in found if c.name in wanted]
        if found:
            found[0].seconds = time.monotonic() - started
        for c in found if echo else ():
            print(f"doctor: {c.status.upper():4} {c.name}", file=sys.stderr, flush=True)
        checks += found
    report = Diagnosis(
        checks, dev.to_dict() if dev else None, visit.versions, seconds=time.monotonic() - t0
    )
    report.write(out)
    return report
