"""What slows a step on a Gaudi, counted on the emulated one: CPU fallbacks, host syncs,
graph compiles after warm-up and graph breaks, for three ways to train each model family.

    python -m benchmarks gaudi-counts --json out.json

The emulated Gaudi is the repository's test double (``tests/fakes``, a source checkout
only): it runs every op on the host, so no time here means anything, but it counts what the
bridge would (tests/fakes/README.md says how, and what the counts cannot mean). Each mode
(eager with ``torch.compile``, lazy) runs in its own fresh process, as the bridge's mode is
fixed when it loads; there each family trains with each contender on the same data:

- ``trainer``: ``transformers.Trainer`` with the arguments a GPU script gets for an HPU
  (bf16, its default collators; ``torch_compile`` with ``hpu_backend`` in eager mode);
- ``optimum``: the Optimum Habana recipe through ``workbench.compat.optimum_habana``
  (``use_habana``, ``use_lazy_mode``, a gaudi_config with fused AdamW and clip-norm and
  autocast);
- ``wb``: ``wb.train`` with its defaults.

Counts are taken between the end of step ``warmup`` and the end of the last step (the
Trainer logs a step after its end: the window holds the logs of steps ``warmup`` .. last-1),
with the double's test hook ``metrics.fake_counts()``, less what evaluations and checkpoint
saves in the window counted (they copy predictions and every tensor to the host, once each).
Graph breaks are dynamo's, over the whole run (a break is traced once and then stays in every
step).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# family -> (model, dataset, wb.train's extra arguments)
FAMILIES = {
    "bert": ("bert-tiny", "docstrings-topic", {}),
    "gpt2": ("gpt2-tiny", "docstrings-lm", {"padding": "packed"}),
    "t5": ("t5-tiny", "docstrings-summary", {}),
    "llama": ("llama-tiny", "docstrings-lm", {"lora": True}),
    "sd": ("sd-tiny", "digits-captioned", {}),
}
MODES = ("eager", "lazy")
CONTENDERS = ("trainer", "optimum", "wb")
SMOKE = {"batch_size": 2, "max_length": 32, "log_every": 2}
MARK = "@@gaudi-counts@@"
# no Trainer recipe trains a text-to-image model: diffusers' train_text_to_image.py (and
# Optimum Habana's copy of it) is a loop of its own, not a Trainer
NO_RECIPE = "no Trainer recipe for text-to-image (diffusers' script is its own loop)"
# wb.train's floor of host reads per log: the Trainer reads the loss and the gradient norm
# one after the other in a private method (docs/gaudi.md, "Host syncs a library forces")
TRAINER_READS = 2
TRAINER_LINES = "transformers trainer.py:2257, 2264"


def fakes() -> Path:
    """The emulated Gaudi: the test double of a source checkout."""
    found = Path(__file__).resolve().parents[1] / "tests" / "fakes"
    if not (found / "habana_frameworks").is_dir():
        raise RuntimeError(
            "gaudi-counts runs on the emulated Gaudi of a source checkout (tests/fakes): "
            "run it from a clone of the repository, not an installed package"
        )
    return found


def run(
    steps: int = 4,
    warmup: int = 2,
    model: str = ",".join(FAMILIES),
    device: str = "auto",
    modes: tuple[str, ...] = MODES,
    contenders: tuple[str, ...] = CONTENDERS,
    timeout: float = 3000,
) -> dict[str, Any]:
    """Counts per step after warm-up for each family (``model``: comma-separated), mode and
    contender, on the emulated Gaudi (``device`` must be auto or hpu: nothing else is
    emulated). Each mode runs in a fresh Python."""
    if device not in ("auto", "hpu"):
        raise ValueError(f"device={device!r}: gaudi-counts runs on the emulated Gaudi only (hpu)")
    families = [f.strip() for f in model.split(",") if f.strip()]
    if bad := [f for f in families if f not in FAMILIES]:
        raise ValueError(f"unknown model family {bad[0]!r}; known: {', '.join(FAMILIES)}")
    if bad := [c for c in contenders if c not in CONTENDERS]:
        raise ValueError(f"unknown contender {bad[0]!r}; known: {', '.join(CONTENDERS)}")
    root = fakes().parents[1]
    results: dict[str, Any] = {}
    for mode in modes:
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join((str(fakes()), str(root))),
                "PT_HPU_LAZY_MODE": "1" if mode == "lazy" else "0",
                "FAKE_HPU_INTEL_TORCH": "1",  # Intel's container ships its torch build
                "FAKE_HPU_DEV_DIR": str(Path(tmp) / "accel"),
                "WORKBENCH_HPU_DEVICE_FILES": str(Path(tmp) / "accel" / "accel*"),
                "WORKBENCH_RUNS": str(Path(tmp) / "runs"),
            }
            code = (
                "from benchmarks.gaudicounts import child; "
                f"child({mode!r}, {families!r}, {steps}, {warmup}, {tuple(contenders)!r})"
            )
            done = subprocess.run(
                [sys.executable, "-c", code],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
        if done.returncode or not lines:
            raise RuntimeError(
                f"the {mode} process failed ({done.returncode}):\n{done.stderr[-4000:]}"
            )
        results.update(json.loads(lines[-1][len(MARK) :]))
    return {
        "bench": "gaudi-counts",
        "device": {"kind": "hpu", "name": "emulated Gaudi 2 (tests/fakes)", "generation": None},
        "config": {
            "contenders": list(contenders),
            "steps": steps,
            "warmup": warmup,
            "families": families,
            "modes": list(modes),
            **SMOKE,
        },
        "results": results,
        "ratios": {},
        "table": table(results),
    }


def table(results: dict[str, Any]) -> str:
    """The Markdown table: one row per family, mode and contender."""
    head = (
        "family",
        "mode",
        "contender",
        "CPU fallbacks/step (ops)",
        "host syncs/step",
        "host syncs/log",
        "compiles after warm-up",
        "graph breaks",
    )
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, c in results.items():
        family, mode, who = key.split("/")
        if c.get("error"):
            cells = [c["error"]] + [""] * 4
        else:
            ops = ", ".join(
                f"{k.removeprefix('aten::')} {v:g}" for k, v in c["fallback_ops"].items()
            )
            cells = [
                f"{c['fallbacks_per_step']:g}" + (f" ({ops})" if ops else ""),
                f"{c['host_syncs_per_step']:g}",
                _per_log(who, c),
                str(c["compiles"]),
                "-" if c["graph_breaks"] is None else str(c["graph_breaks"]),
            ]
        rows.append("| " + " | ".join([family, mode, who, *cells]) + " |")
    return "\n".join(rows)


def _per_log(who: str, c: dict[str, Any]) -> str:
    """Host syncs per log; wb.train's, when they are the Trainer's two reads and nothing
    else, with the library lines that make them."""
    per_log = c["host_syncs_per_log"]
    if per_log is None:
        return "-"
    reads = set(c.get("host_syncs_by_cause", {})) <= {"aten::_local_scalar_dense"}
    if who == "wb" and reads and per_log == TRAINER_READS:
        return f"{per_log:g} ({TRAINER_LINES})"
    return f"{per_log:g}"


# --------------------------------------------------------------------- in the fresh process
class _Window:
    """Notes the device's counts at the end of step ``start`` and of step ``end``, the logs
    in between, and what evaluations and checkpoint saves in between counted (left out: they
    are not training steps). Added to every Trainer the same way (see ``child``)."""

    def __init__(self, start: int, end: int):
        self.start, self.end = start, end
        self.at: dict[int, dict] = {}
        self.logs = 0
        self.last: dict = {}  # the counts at the latest step end or log
        self.evals: list[tuple[dict, dict]] = []  # (before, after) each evaluation or save
        self.saves = 0

    def open(self) -> bool:
        return self.start in self.at and self.end not in self.at

    def callback(self):
        from transformers import TrainerCallback

        window = self

        class Window(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                window.last = _now()
                if state.global_step in (window.start, window.end):
                    window.at[state.global_step] = window.last

            def on_log(self, args, state, control, logs=None, **kw):
                if window.open() and "loss" in (logs or {}):
                    window.logs += 1
                window.last = _now()

            def on_evaluate(self, args, state, control, **kw):
                if window.open():
                    window.evals.append((window.last, _now()))
                window.last = _now()

            def on_save(self, args, state, control, **kw):  # a checkpoint copies every
                if window.open():  # tensor to the host: once per save, not per step
                    window.saves += 1
                    window.evals.append((window.last, _now()))
                window.last = _now()

        return Window()


def _now() -> dict:
    from habana_frameworks.torch.hpu.metrics import fake_counts

    c = fake_counts()
    return {"fallbacks": c["fallbacks"], "syncs": c["host_syncs"], "graphs": c["graphs"]}


def _breaks() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters.get("graph_break", {}).values()))


def _grown(a: dict, b: dict) -> dict:
    """What was counted from ``a`` to ``b``."""
    return {
        "fallbacks": {k: v - a["fallbacks"].get(k, 0) for k, v in b["fallbacks"].items()},
        "syncs": {k: v - a["syncs"].get(k, 0) for k, v in b["syncs"].items()},
        "graphs": b["graphs"] - a["graphs"],
    }


def _cell(window: _Window, breaks: int | None) -> dict[str, Any]:
    got = _grown(window.at[window.start], window.at[window.end])
    for before, after in window.evals:  # evaluations are not training steps
        ev = _grown(before, after)
        for part in ("fallbacks", "syncs"):
            for k, v in ev[part].items():
                got[part][k] -= v
        got["graphs"] -= ev["graphs"]
    n = window.end - window.start
    ops = {k: v / n for k, v in got["fallbacks"].items()}
    syncs = got["syncs"]
    total = sum(syncs.values())
    return {
        "steps": n,
        "logs": window.logs,
        "fallback_ops": {k: v for k, v in ops.items() if v},
        "fallbacks_per_step": sum(ops.values()),
        "host_syncs_per_step": total / n,
        "host_syncs_per_log": total / window.logs if window.logs else None,
        "host_syncs_by_cause": {k: v for k, v in syncs.items() if v},
        "compiles": got["graphs"],
        "evaluations_left_out": len(window.evals) - window.saves,
        "saves_left_out": window.saves,
        "graph_breaks": breaks,
    }


def _parts(family: str, lora: bool):
    from workbench.catalog.modelspec import model as as_model
    from workbench.data.dataset import dataset as as_dataset

    name, data, extra = FAMILIES[family]
    spec = as_model(name, lora=True) if lora or extra.get("lora") else as_model(name)
    return spec, as_dataset(data, limit=64), extra


def _trainer_parts(family: str):
    """Model, dataset and collator as a transformers user writes them (default collators)."""
    import transformers

    from workbench.shapes.batching import pack

    spec, data, extra = _parts(family, False)
    model, tok = spec.build(num_labels=data.num_labels)
    if spec.lora is not None:
        model = spec.wrap_lora(model)
    train = data.prepare(tok, max_length=SMOKE["max_length"])["train"]
    if extra.get("padding") == "packed":
        return model, pack(train, SMOKE["max_length"], tok.eos_token_id), None
    if spec.task == "seq2seq":
        return model, train, transformers.DataCollatorForSeq2Seq(tok, model)
    if spec.task == "causal_lm":
        return model, train, transformers.DataCollatorForLanguageModeling(tok, mlm=False)
    return model, train, transformers.DataCollatorWithPadding(tok)


def _step_args(mode: str, total: int) -> dict[str, Any]:
    """The training arguments both Trainer contenders share: the same steps, batch, logging
    and precision, compiled for the HPU in eager mode (lazy mode compiles its own graphs)."""
    compiled = {"torch_compile": True, "torch_compile_backend": "hpu_backend"}
    return {
        "per_device_train_batch_size": SMOKE["batch_size"],
        "max_steps": total,
        "logging_steps": SMOKE["log_every"],
        "bf16": True,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        **(compiled if mode == "eager" else {}),
    }


def _run_trainer(family: str, mode: str, total: int, out: str) -> None:
    import transformers

    model, train, collate = _trainer_parts(family)
    args = transformers.TrainingArguments(
        output_dir=out,
        **_step_args(mode, total),
    )
    transformers.Trainer(model=model, args=args, train_dataset=train, data_collator=collate).train()


def _run_optimum(family: str, mode: str, total: int, out: str) -> None:
    from workbench.compat.optimum_habana import GaudiTrainer, GaudiTrainingArguments

    model, train, collate = _trainer_parts(family)
    config = Path(out) / "gaudi_config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "gaudi_config.json").write_text(
        json.dumps(
            {"use_fused_adam": True, "use_fused_clip_norm": True, "use_torch_autocast": True}
        )
    )
    args = GaudiTrainingArguments(
        output_dir=out,
        use_habana=True,
        use_lazy_mode=mode == "lazy",
        gaudi_config_name=str(config),
        **_step_args(mode, total),
    )
    GaudiTrainer(model=model, args=args, train_dataset=train, data_collator=collate).train()


def _run_wb(family: str, mode: str, total: int, out: str) -> None:
    from workbench.training.engine import train

    spec, data, extra = _parts(family, False)
    run = train(
        spec,
        data,
        device="hpu",
        max_steps=total,
        live=False,
        **{k: v for k, v in extra.items() if k != "lora"},
        **SMOKE,
    )
    if run.status != "completed":
        raise RuntimeError(run.summary.get("error"))


RUNNERS = {"trainer": _run_trainer, "optimum": _run_optimum, "wb": _run_wb}


def child(
    mode: str,
    families: list[str],
    steps: int,
    warmup: int,
    contenders: tuple[str, ...] = CONTENDERS,
) -> None:
    """In the fresh process: every family with every contender; prints the cells as JSON."""
    import habana_frameworks.torch  # noqa: F401  (the bridge, in the mode the variable says)
    import transformers

    total = warmup + steps
    state: dict[str, Any] = {}
    original = transformers.Trainer.__init__

    def with_window(self, *a, **k):  # the same window on every contender's Trainer
        original(self, *a, **k)
        self.add_callback(state["window"].callback())

    # this bench's own process only, and put back before it ends
    transformers.Trainer.__init__ = with_window
    cells: dict[str, Any] = {}
    try:
        _contenders(mode, families, contenders, warmup, total, state, cells)
    finally:
        transformers.Trainer.__init__ = original
    print(MARK + json.dumps(cells, default=str), flush=True)


def _contenders(mode, families, contenders, warmup, total, state, cells) -> None:
    from workbench.liblogs import quiet_libraries

    with quiet_libraries():
        for family in families:
            for who in contenders:
                key = f"{family}/{mode}/{who}"
                if family == "sd" and who != "wb":
                    cells[key] = {"error": NO_RECIPE}
                    continue
                import torch

                torch._dynamo.reset()  # each contender compiles afresh
                state["window"] = _Window(warmup, total)
                before = _breaks()
                try:
                    with tempfile.TemporaryDirectory() as out:
                        RUNNERS[who](family, mode, total, out)
                    breaks = _breaks() - before if mode == "eager" else None
                    cells[key] = _cell(state["window"], breaks)
                except Exception as e:  # a contender that cannot run says why, in its cell
                    cells[key] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
