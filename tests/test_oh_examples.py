"""Optimum Habana's own example scripts, run with only the edits docs/optimum-habana.md lists.

The files come from a local Optimum Habana checkout named by ``OPTIMUM_HABANA_EXAMPLES``
(its root, holding ``examples/``). They are in no package registry (the optimum-habana sdists
and wheels on PyPI hold no ``examples/``) and the project vendors no third-party code, so CI,
which reaches only PyPI, Debian and npm, cannot have them: there these tests skip. Each test
copies one family's folder to ``tmp_path``, applies the page's edits as text substitutions
that fail when their pattern is missing (so the page and the files cannot drift apart), and
runs the script as a user would, with local stand-ins for the hub: tiny models saved by
``save_pretrained``, data files, and the metrics the scripts ``evaluate.load`` by name
(``evaluate`` loads ``./accuracy/accuracy.py`` before it asks the hub).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_attach_ranks import _env

import workbench as wb

OH = os.environ.get("OPTIMUM_HABANA_EXAMPLES", "")
pytestmark = [
    pytest.mark.usefixtures("runs_in_tmp"),
    pytest.mark.skipif(not OH, reason=(
        "set OPTIMUM_HABANA_EXAMPLES to an Optimum Habana checkout (git clone "
        "https://github.com/huggingface/optimum-habana): its examples are in no package "
        "registry, and CI reaches only PyPI, Debian and npm")),
]

# docs/optimum-habana.md's edits, as (pattern, replacement); each must match at least once
FIRST = (r"(?s)\A(.*?\n)(import |from )", r"\1import workbench\n\2")  # "import workbench" first, on Gaudi
IMPORTS = (r"from optimum\.habana(?:\.utils|\.transformers\.modeling_utils)? import",
           "from workbench.compat.optimum_habana import")
TELEMETRY = [(r"(from transformers\.utils import check_min_version.*), send_example_telemetry",
              r"\1"), (r"\n *send_example_telemetry\(.*\)", "")]
USE_CACHE = [(r"(?s)\n    use_cache: bool = field\(.*?\n    \)", ""),
             (r"model_args\.use_cache", "training_args.use_cache")]
OFFLINE = (r"(from transformers\.utils import check_min_version), is_offline_mode",
           r"\1\nfrom huggingface_hub import is_offline_mode")
TO_HPU = (r'\n    model = model\.to\("hpu"\)', "")
EDITS = {
    "text-classification/run_glue.py": [FIRST, IMPORTS, *TELEMETRY],
    "language-modeling/run_clm.py": [FIRST, IMPORTS, *TELEMETRY, *USE_CACHE],
    "language-modeling/run_lora_clm.py": [FIRST, IMPORTS, *USE_CACHE],
    "question-answering/run_qa.py": [FIRST, IMPORTS, *TELEMETRY, TO_HPU],
    "question-answering/trainer_qa.py": [IMPORTS],
    "summarization/run_summarization.py": [FIRST, IMPORTS, *TELEMETRY, OFFLINE, *USE_CACHE],
}
SCRIPTS = {"glue": "text-classification/run_glue.py", "clm": "language-modeling/run_clm.py",
           "lora": "language-modeling/run_lora_clm.py", "qa": "question-answering/run_qa.py",
           "summarization": "summarization/run_summarization.py"}
MODELS = {"glue": "bert", "clm": "gpt2", "lora": "llama", "qa": "bert", "summarization": "t5"}

# Stand-ins for the hub's evaluate metrics, loaded by name from the working folder
METRIC = '''import datasets
import evaluate
class M(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(description="", citation="", inputs_description="",
                                   features=datasets.Features({FEATURES}))
    def _compute(self, predictions, references, **kwargs):
        same = [p == r for p, r in zip(predictions, references)]
        return RESULT
'''
STRING = 'datasets.Value("string")'
METRICS = {
    "accuracy": ('"predictions": datasets.Value("int64"), "references": datasets.Value("int64")',
                 '{"accuracy": sum(same) / len(same)}'),
    "rouge": (f'"predictions": {STRING}, "references": {STRING}',
              '{"rouge1": sum(same) / len(same)}'),
    "squad": (f'"predictions": {{"id": {STRING}, "prediction_text": {STRING}}}, "references": '
              f'{{"id": {STRING}, "answers": datasets.Sequence({{"text": {STRING}, '
              '"answer_start": datasets.Value("int32")})}',
              '{"exact_match": 100 * sum(p["prediction_text"] in r["answers"]["text"] for p, r '
              'in zip(predictions, references)) / len(predictions)}'),
}


def edited(work: Path, name: str) -> None:
    """Apply the page's edits to ``work/name``; fail naming the pattern that is not there."""
    path = work / Path(name).name
    text = path.read_text()
    for pattern, new in EDITS[name]:
        text, n = re.subn(pattern, new, text)
        assert n, f"{name}: docs/optimum-habana.md's edit {pattern!r} found nothing to change"
    path.write_text(text)


def _rows(kind: str) -> dict[str, list[dict]]:
    if kind == "glue":
        data = wb.dataset("docstrings-topic", limit=64).load()
        split = {s: [{"sentence": r["text"], "label": r["label"]} for r in data[s]]
                 for s in ("train", "eval")}
    elif kind in ("clm", "lora"):
        data = wb.dataset("docstrings-lm", limit=64).load()
        split = {s: [{"text": r["text"].replace("\n", " ")} for r in data[s]]
                 for s in ("train", "eval")}
    else:
        data = wb.dataset("docstrings-summary", limit=64).load()
        split = {s: [{"text": r["document"], "summary": r["summary"]} for r in data[s]]
                 for s in ("train", "eval")}
        if kind == "qa":  # the summary starts the context: the answer to a fixed question
            split = {s: [{"id": str(i), "title": "t", "question": "What does it do?",
                          "context": f"{r['summary']} {r['text']}",
                          "answers": {"text": [r["summary"]], "answer_start": [0]}}
                         for i, r in enumerate(rows)] for s, rows in split.items()}
    return {"train": split["train"], "validation": split["eval"], "test": split["eval"]}


def prepared(tmp_path: Path, kind: str) -> tuple[Path, list[str]]:
    """The family's folder with the page's edits, local model, data and metrics; and the
    README command trimmed to a smoke run (arguments after the script)."""
    work = tmp_path / "work"
    shutil.copytree(Path(OH) / "examples" / Path(SCRIPTS[kind]).parent, work)
    for name in EDITS:
        if Path(name).parent == Path(SCRIPTS[kind]).parent:
            edited(work, name)
    for metric, (features, result) in METRICS.items():
        (work / metric).mkdir()
        (work / metric / f"{metric}.py").write_text(
            METRIC.replace("FEATURES", features).replace("RESULT", result))
    model, tok = wb.model(MODELS[kind], size="tiny").build()
    model.save_pretrained(work / "model")
    tok.save_pretrained(work / "model")
    (work / "gaudi").mkdir()
    (work / "gaudi" / "gaudi_config.json").write_text(json.dumps(
        {"use_fused_adam": True, "use_fused_clip_norm": True, "use_torch_autocast": True}))
    ext = "txt" if kind in ("clm", "lora") else "json"
    files = []
    for split, rows in _rows(kind).items():
        lines = [r["text"] if ext == "txt" else json.dumps(r) for r in rows]
        text = json.dumps({"data": rows}) if kind == "qa" else "\n".join(lines) + "\n"
        (work / f"{split}.{ext}").write_text(text)
        files += [f"--{split}_file", str(work / f"{split}.{ext}")]
    args = [*files[:4], "--model_name_or_path", str(work / "model"), "--do_train", "--do_eval",
            "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
            "--output_dir", str(work / "out"), "--use_habana", "--gaudi_config_name",
            str(work / "gaudi"), "--throughput_warmup_steps", "1", "--max_steps", "4",
            "--report_to", "none", "--bf16", "--seed", "0"]
    args += {"glue": [*files[4:], "--do_predict", "--max_seq_length", "32",
                      "--ignore_mismatched_sizes"],
             "clm": ["--block_size", "32", "--warmup_ratio", "0.25"],
             "lora": ["--max_seq_length", "32", "--lora_rank", "4", "--warmup_ratio", "0.25"],
             "qa": [*files[4:], "--do_predict", "--max_seq_length", "64", "--doc_stride", "16"],
             "summarization": [*files[4:], "--do_predict", "--predict_with_generate",
                               "--max_source_length", "64", "--max_target_length", "16",
                               "--text_column", "text", "--summary_column", "summary"],
             }[kind]
    return work, args


def requirements() -> None:
    """Skip unless the examples' requirements.txt (the parts these families import) is there."""
    for name in ("evaluate", "nltk"):
        pytest.importorskip(name, reason="the examples' requirements.txt: pip install evaluate "
                                         "nltk (or pip install --target DIR; DIR on PYTHONPATH)")


def nltk_data(work: Path) -> dict[str, str]:
    """run_summarization.py looks for nltk's punkt files and sentence-splits with them: empty
    parameter files (no abbreviations) stand in for the download."""
    tab = work / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    tab.mkdir(parents=True)
    (work / "nltk_data" / "tokenizers" / "punkt").mkdir()
    (work / "nltk_data" / "punkt_tab").mkdir()  # the script also looks for it there
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (tab / name).write_text("")
    return {"NLTK_DATA": str(work / "nltk_data")}


def _results(out: Path, kind: str) -> None:
    """The metrics files the script saved, each with finite numbers, and its outputs."""
    splits = ["train", "eval"] + (["predict"] if kind in ("qa", "summarization") else [])
    found = {s: json.loads((out / f"{s}_results.json").read_text()) for s in splits}
    for split, metrics in found.items():
        numbers = [v for v in metrics.values() if isinstance(v, (int, float))]
        assert numbers and all(map(math.isfinite, numbers)), (split, metrics)
    if kind == "glue":  # its predictions file: a header and a line per test row
        assert "eval_accuracy" in found["eval"]
        rows = (out.parent / "test.json").read_text().count("\n")
        assert (out / "predict_results_None.txt").read_text().count("\n") == rows + 1
    if kind == "clm":  # the use_cache edit keeps what the script's own field saved: True
        (config,) = out.glob("checkpoint-*/config.json")  # save_last_ckpt, on by default
        assert json.loads(config.read_text())["use_cache"] is True
    if kind == "summarization":  # a random T5 may generate nothing but special tokens
        assert (out / "generated_predictions.txt").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SCRIPTS))
def test_optimum_habanas_script_on_the_cpu(tmp_path, kind):
    requirements()
    work, args = prepared(tmp_path, kind)
    env = {**_env(), **(nltk_data(work) if kind == "summarization" else {})}
    done = subprocess.run([sys.executable, Path(SCRIPTS[kind]).name, *args, "--use_lazy_mode",
                           "True"], cwd=work, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    _results(work / "out", kind)
    (path,) = wb.runs()["path"]
    assert wb.Run.open(path).status == "completed"


@pytest.mark.parametrize(("kind", "ranks"), [(k, 1) for k in SCRIPTS] + [("glue", 2)])
def test_optimum_habanas_script_on_the_emulated_gaudi(on_hpu, tmp_path, kind, ranks):
    """In eager mode, the bridge's default since 1.22; two cards over hccl under torchrun."""
    requirements()
    work, args = prepared(tmp_path, kind)
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd = [sys.executable, *(launcher if ranks == 2 else []), Path(SCRIPTS[kind]).name, *args,
           "--use_lazy_mode", "False"]
    result = on_hpu(f"""
        import os, subprocess
        import workbench as wb
        env = {{**os.environ, **{nltk_data(work) if kind == "summarization" else {}!r}}}
        done = subprocess.run({cmd!r}, cwd={str(work)!r}, env=env, capture_output=True,
                              text=True, timeout=600)
        out["rc"], out["log"] = done.returncode, done.stdout[-3000:] + done.stderr[-6000:]
        out["runs"] = [[r.status, r.summary["device"]["kind"], r.summary.get("world_size")]
                       for r in map(wb.Run.open, wb.runs()["path"])]
    """)
    assert result["rc"] == 0, result["log"]
    _results(work / "out", kind)
    assert result["runs"] == [["completed", "hpu", ranks]], result["runs"]
