"""The README's and the docs pages' Python examples run as written and show what they say.

Every ```python block of README.md and of each docs/*.md page runs as a notebook cell would,
statement by statement: what it prints and the value of every bare expression (what a
notebook would display after that line, the values the page's comments describe) are checked
against the page's own words. Blocks marked ``console``, ``text`` or ``bash`` (or unmarked)
are shown, not run. The README stays the front door: under 300 lines, and no line of prose on
these pages is over 100 characters.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
TEXTS = {page: (ROOT / page).read_text() for page in PAGES}
# what a fenced block may be marked with; only python runs
LANGUAGES = {"python", "console", "text", "bash", ""}


def _fences(text: str):
    """(the "# " or "## " heading a block sits under, the block's language, its code), in order.

    Lines inside a block (a ``# comment``) are never headings.
    """
    heading, lang, code = None, None, []
    for line in text.splitlines(keepends=True):
        if lang is None:
            if line.startswith("```"):
                lang, code = line[3:].strip(), []
            elif m := re.match(r"#{1,2} (.+)$", line):
                heading = m.group(1)
        elif line.startswith("```"):
            yield heading, lang, "".join(code)
            lang = None
        else:
            code.append(line)


# (page, section, code) of every python block, README first, then docs/ in name order
BLOCKS = [(page, section, code) for page in PAGES for section, lang, code in _fences(TEXTS[page])
          if lang == "python"]


def _section(page: str, heading: str) -> str:
    """The text of ``page`` under ``heading``, up to the next "# " or "## " heading."""
    text = TEXTS[page]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    end = re.search(r"^#{1,2} ", text[start:], re.M)
    return text[start:start + end.start()] if end else text[start:]


def _is_print(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "print"


def _run(code: str, name: str) -> tuple[dict, list, str]:
    """Run ``code`` like a cell: (its namespace, the value of each bare expression, stdout)."""
    ns: dict = {}
    shown: list = []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for node in ast.parse(code).body:
            if isinstance(node, ast.Expr) and not _is_print(node.value):
                shown.append(eval(compile(ast.Expression(node.value), name, "eval"), ns))
            else:
                exec(compile(ast.Module([node], []), name, "exec"), ns)
    return ns, shown, out.getvalue()


def _first_look(ns, shown, out):
    dev, (devices,) = ns["dev"], shown
    assert [d.kind for d in devices] == ["hpu", "cuda", "cpu"], "every backend, available or not"
    best = next(d.kind for d in devices if d.available)
    assert dev.kind == best, "wb.device() is the best available: hpu > cuda > cpu"
    kind_line, memory_line = out.splitlines()
    assert kind_line.split()[0] == dev.kind
    assert kind_line.split()[-1] == {"hpu": "hccl", "cuda": "nccl", "cpu": "gloo"}[dev.kind]
    assert int(memory_line) == dev.total_memory and dev.total_memory > 2**30, "bytes"


def _worker_frees_its_card(ns, shown, out):
    run = ns["run"]
    assert out.strip() == "completed" and run.status == "completed"
    assert run.spec.launch.devices == 1 and run.summary["world_size"] == 1


def _models_and_datasets(ns, shown, out):
    gpt2_small, catalog, splits, preview, lengths, padding = shown
    assert gpt2_small == 124_439_808, "the count the page quotes"
    assert sum(p.numel() for p in ns["model"].parameters()) < 5_000_000, "tiny: < 5 M parameters"
    assert {"bert", "gpt2", "t5", "llama", "unet"} <= set(catalog["family"])
    assert set(splits) == {"train", "eval"} and splits["train"].num_rows > splits["eval"].num_rows > 0
    assert len(preview) == 3 and list(preview.columns) == ["text", "label"]
    assert lengths["count"] == splits["train"].num_rows and 0 < lengths["min"] <= lengths["max"]
    assert padding["strategy"] == "bucketed" and 0 <= padding["waste_pct"] < 100 and padding["shapes"] <= 8


def _training(ns, shown, out):
    status, evals, tail, resumed, table, side = shown
    run = ns["run"]
    assert status == "completed"
    assert {"loss", "accuracy"} <= set(evals) and 0 <= evals["accuracy"] <= 1
    assert len(tail) == 3 and "step" in tail.columns
    assert resumed.path == run.path and run.status == "completed" and run.summary["step"] == 30
    assert run.name in set(table["run"]) and len(table) == 1, "resuming continues the same run"
    assert list(side.columns) == [run.name, f"{run.name} #2"], "the same run twice: two columns"


def _memory_planning(ns, shown, out):
    table, (fits_gaudi3, fix_h100) = shown
    assert list(table.columns) == ["device", "needs_gib", "fits", "suggestion"]
    assert {"Gaudi1", "Gaudi2", "Gaudi3", "A100 40GB", "A100 80GB", "H100 SXM", "H200"} < set(table["device"])
    # 7 B parameters trained with AdamW (bf16 weights, fp32 master copy, gradients, two
    # moments) need over 100 GiB before a single activation: no one device holds it
    assert not table["fits"].any()
    assert fits_gaudi3 is False
    assert re.search(r"ZeRO|batch_size|checkpointing", fix_h100), fix_h100


def _cost(ns, shown, out):
    (cheapest, fastest), h200_small = shown
    section = _section("docs/planner.md", "## What will it cost? Time and cost per device")
    printed = section.split("```text\n")[1].split("```")[0]
    assert out == printed, "the page shows the table the planner prints"
    plan = ns["plan"]
    assert (cheapest, fastest) == (plan.cheapest()["device"], plan.fastest()["device"]) == ("Gaudi3", "H100 SXM")
    assert h200_small == "measured by this project"
    kinds = {r["device"]: r["mfu_from"] for r in plan.rows}
    assert kinds == {"Gaudi2": "published", "Gaudi3": "published", "A100 80GB": "published", "H100 SXM": "published",
                     "H200": "published"}, "the page's list of which rows are which"


def _planner_unet(ns, shown, out):
    (unit, gaudi2_from, h100_hours), = shown
    assert (unit, gaudi2_from, h100_hours) == ("image", "published", 0.28), "the page's comment"
    assert ns["sd"].row("Gaudi2")["devices"] == 8 and "MLPerf" in ns["sd"].row("Gaudi2")["sources"]["mfu"]


def _planner_strategy(ns, shown, out):
    from workbench.planning.references import references

    (layout, tokens_s), degrees, global_batch = shown
    assert global_batch is True, "the comment"
    assert (layout, tokens_s) == ("8 devices, ZeRO-3, gradient checkpointing", 797), "the comment"
    assert degrees == (4, 4), "the comment"
    (intel,) = [r for r in references()["held_out"]["results"] if r.get("stack") == "optimum-habana"]
    assert round(intel["tokens_per_s_device"]) == 803, "the page's published figure"
    assert abs(tokens_s / intel["tokens_per_s_device"] - 1) < 0.15, "within 15%, as the page says"
    assert "--pipeline-model-parallel-size 4" in ns["nemo"].row("H100")["launch"]


def _planner_accuracy(ns, shown, out):
    from workbench.planning.references import references

    medians = shown[0]
    # the page states no figures: its link's home holds them, as recorded (test_plan.py checks
    # the home against the record and the record against a fresh wb.plan_accuracy())
    recorded = references()["accuracy"]
    for (check, family), v in medians.items():
        figures = recorded[check.replace("-", "_") + "_by_family"][family]
        assert v == pytest.approx(figures["median_abs_error"], abs=1e-3), (check, family)
    assert len(medians) == 6
    assert set(ns["acc"].check) == {"leave-one-out", "held-out"}


def _stable_diffusion(ns, shown, out):
    vae, run = ns["vae"], ns["run"]
    assert vae.status == "completed" and run.status == "completed", run.summary.get("error")
    assert ns["sd"].overrides["vae"] == str(vae.path.resolve()) and ns["sd"].num_params < 3_000_000
    assert shown == [[10, 20], (32, 32)] and [im.mode for im in ns["images"]] == ["RGB", "RGB"]
    again = run.sample(["a handwritten seven", "a handwritten one"], steps=25, guidance=7.5, seed=0)
    assert [a.tobytes() for a in ns["images"]] == [b.tobytes() for b in again]


def _pickers(ns, shown, out):
    ((model_spec, data_spec),) = shown
    assert model_spec.name == "gpt2-small" and data_spec.source == "docstrings-lm"
    form = ns["form"]
    assert form.model_picker is ns["model"] and form.data_picker is ns["data"]


def _past_one_device(ns, shown, out):
    run = ns["run"]
    assert run.status == "completed" and run.summary["world_size"] == 2 and run.summary["step"] == 20
    assert "gaudi-0 slots=8\ngaudi-1 slots=8" in out, "the DeepSpeed hostfile"
    assert re.search(r"^deepspeed .*--num_nodes=2 .*--master_addr=gaudi-0", out, re.M), out
    assert "#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:8\n" in out, "the sbatch script"
    assert re.search(r'^srun .* "\$PYTHON" -m torch.distributed.run --nnodes=4 --nproc_per_node=8 '
                     r".*--max_restarts=2 ", out, re.M), out
    (k8s,) = shown
    assert [job["kind"] for job in (k8s.pytorchjob(), k8s.mpijob())] == ["PyTorchJob", "MPIJob"], "two manifests"
    worker = k8s.mpijob()["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"]["habana.ai/gaudi"] == "8"
    assert "apiVersion: kubeflow.org/v1\nkind: PyTorchJob" in k8s._repr_markdown_()


def _profiling(ns, shown, out):
    head, trace = shown
    assert 0 < len(head) <= 5 and {"op", "self_ms", "calls"} <= set(head.columns)
    assert json.loads(Path(trace).read_text())["traceEvents"]


def _own_trainer(ns, shown, out):
    *_, status, evals, name = shown
    assert status == "completed", ns["run"].summary.get("error")
    assert {"loss", "accuracy"} <= set(evals) and name == "BertForSequenceClassification"
    assert (ns["run"].path / "checkpoints").resolve() == Path("out").resolve()


def _off_optimum_habana(ns, shown, out):
    *_, name, bf16, status = shown
    assert (name, bf16, status) == ("GaudiTrainer", True, "completed")


CHECKS = {
    ("README.md", "A first training cell"): _training,
    ("docs/devices.md", "Devices: `wb.device()` and `workbench devices`"): _first_look,
    ("docs/devices.md", "One Gaudi card per process"): _worker_frees_its_card,
    ("docs/models-and-data.md", "Models and datasets, offline"): _models_and_datasets,
    ("docs/multi-node.md", "Past one device"): _past_one_device,
    ("docs/optimum-habana.md", "Moving a script"): _off_optimum_habana,
    ("docs/own-trainer.md", "The same cell, one line added"): _own_trainer,
    ("docs/pickers.md", "Pickers and a training form"): _pickers,
    ("docs/planner.md", "Will it fit? Memory planning"): _memory_planning,
    ("docs/planner.md", "What will it cost? Time and cost per device"): _cost,
    ("docs/planner.md", "The stack you will run: `strategy=`"): _planner_strategy,
    ("docs/planner.md", "LoRA and Stable Diffusion"): _planner_unet,
    ("docs/planner.md", "How far to trust it"): _planner_accuracy,
    ("docs/profiling.md", "Profiling"): _profiling,
    ("docs/stable-diffusion.md", "Stable Diffusion"): _stable_diffusion,
}


@pytest.mark.policy
def test_every_python_block_has_a_check():
    assert [(page, section) for page, section, _ in BLOCKS] == list(CHECKS), "one block per section, each checked"


@pytest.mark.policy
@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_marked_with_a_known_language(page):
    langs = {lang for _, lang, _ in _fences(TEXTS[page])}
    assert langs <= LANGUAGES, f"{page}: {sorted(langs - LANGUAGES)} would be neither run nor known"


@pytest.mark.slow
@pytest.mark.parametrize("page,section,code", BLOCKS, ids=[f"{p}: {s}" for p, s, _ in BLOCKS])
def test_example_runs_and_shows_what_it_says(page, section, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKBENCH_RUNS", raising=False)  # runs go to ./runs, as the pages say
    ns, shown, out = _run(code, f"{page}, {section}")
    CHECKS[page, section](ns, shown, out)


@pytest.mark.policy
def test_readme_is_the_front_door():
    lines = TEXTS["README.md"].count("\n")
    assert lines < 300, f"README.md has {lines} lines: move a topic to its docs/ page and link it"


def _long_lines(page: str, tables: bool):
    """Lines over 100 characters outside code blocks (and outside tables unless ``tables``)."""
    code = False
    for number, line in enumerate(TEXTS[page].splitlines(), start=1):
        if line.startswith("```"):
            code = not code
        elif not code and len(line) > 100 and (tables or not line.lstrip().startswith("|")):
            yield f"{page}:{number} ({len(line)} characters)"


@pytest.mark.policy
@pytest.mark.parametrize("page", PAGES)
def test_no_prose_line_is_over_100_characters(page):
    # the README's tables too; a docs page's table rows may run longer (a cell cannot wrap)
    assert not list(_long_lines(page, tables=page == "README.md"))
