"""Scripts in the shape of Optimum Habana's examples (tests/user_scripts/run_*_shaped.py),
migrated as docs/optimum-habana.md says, run as a user runs them: under the user's own
``torchrun --nproc_per_node 2``, on the CPU (gloo) and on the emulated Gaudi (hccl), with a
local model folder and local data files where the examples name hub ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_attach_ranks import _env, ended_well, finish, start

import workbench as wb

pytestmark = pytest.mark.usefixtures("runs_in_tmp")
SCRIPTS = Path(__file__).resolve().parent / "user_scripts"
HABANA_BERT = {"use_fused_adam": True, "use_fused_clip_norm": True, "use_torch_autocast": True}


def local_files(root: Path, kind: str) -> dict[str, str]:
    """A model folder (a model saved by save_pretrained, with its tokenizer), data files and
    a gaudi_config.json, as a user would have them after a first download."""
    import transformers

    root.mkdir(parents=True, exist_ok=True)
    (root / "gaudi").mkdir(exist_ok=True)
    (root / "gaudi" / "gaudi_config.json").write_text(json.dumps(HABANA_BERT))
    transformers.set_seed(0)
    if kind == "glue":
        tok = wb.model("bert", size="tiny").load_tokenizer()
        model = transformers.BertForSequenceClassification(transformers.BertConfig(
            vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, num_labels=6, pad_token_id=tok.pad_token_id))
        rows = wb.dataset("docstrings-topic", limit=64).load()
        for split, name in (("train", "train.json"), ("eval", "validation.json")):
            (root / name).write_text("".join(
                json.dumps({"sentence": r["text"], "label": r["label"]}) + "\n"
                for r in rows[split]))
    else:
        tok = wb.model("gpt2", size="tiny").load_tokenizer()
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64))
        rows = wb.dataset("docstrings-lm", limit=64).load()
        for split, name in (("train", "train.txt"), ("eval", "validation.txt")):
            (root / name).write_text("".join(r["text"].replace("\n", " ") + "\n"
                                             for r in rows[split]))
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    ext = "json" if kind == "glue" else "txt"
    return {"model": str(root / "model"), "train": str(root / f"train.{ext}"),
            "validation": str(root / f"validation.{ext}"), "gaudi": str(root / "gaudi")}


def command(kind: str, files: dict[str, str], out: str, steps: int = 4,
            lazy: str = "True") -> list[str]:
    """The README command of the example, trimmed to a smoke run, under torchrun."""
    args = ["--model_name_or_path", files["model"], "--train_file", files["train"],
            "--validation_file", files["validation"], "--do_train", "--do_eval",
            "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
            "--output_dir", out, "--use_habana", "--use_lazy_mode", lazy,
            "--gaudi_config_name", files["gaudi"], "--throughput_warmup_steps", "1",
            "--max_steps", str(steps), "--report_to", "none", "--bf16"]
    args += (["--max_seq_length", "32"] if kind == "glue"
             else ["--block_size", "32", "--warmup_ratio", "0.25"])  # run_clm's README passes it
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            "2", str(SCRIPTS / f"run_{kind}_shaped.py"), *args]


def _ranks(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]


@pytest.mark.parametrize("kind", ["glue", "clm"])
@pytest.mark.slow
def test_the_scripts_train_and_evaluate_on_two_cpu_ranks(tmp_path, kind):
    files = local_files(tmp_path / "files", kind)
    out = tmp_path / "out"
    proc = start(command(kind, files, str(out)), _env())
    output = finish(proc, 600)
    assert ended_well(proc.returncode, output), output[-4000:]
    ranks = _ranks(out)
    assert [(r["step"], r["world_size"]) for r in ranks] == [(4, 2), (4, 2)], ranks
    (path,) = wb.runs()["path"]  # one run: rank 0's
    run = wb.Run.open(path)
    assert run.status == "completed" and run.summary["world_size"] == 2
    assert run.spec.training_arguments["bf16"] is True
    if kind == "glue":
        assert "accuracy" in run.summary["eval"], run.summary["eval"]
        assert json.loads((out / "gaudi_config.json").read_text())["use_fused_adam"] is True
    else:
        assert run.spec.model["task"] == "causal_lm"
        assert run.summary["eval"]["perplexity"] == pytest.approx(ranks[0]["perplexity"])
        assert run.spec.training_arguments["warmup_steps"] == 0.25, "warmup_ratio, mapped"
        # the use_cache edit keeps what Optimum Habana's run_clm.py saved (its field: True)
        assert json.loads((out / "config.json").read_text())["use_cache"] is True


def test_run_glue_shaped_on_two_emulated_gaudi_cards(on_hpu, tmp_path):
    """On the emulated Gaudi: both ranks on their cards over hccl, the fused AdamW that
    use_fused_adam asks for (hpex's, built by the Trainer), evaluation after train. In eager
    mode, the bridge's default since 1.22 (lazy mode needs PT_HPU_LAZY_MODE=1 set before
    Python starts there: the bridge loads with ``import torch``)."""
    files = local_files(tmp_path / "files", "glue")
    cmd = command("glue", files, "out", lazy="False")
    result = on_hpu(f"""
        import json, subprocess
        from pathlib import Path
        import workbench as wb
        done = subprocess.run({cmd!r}, capture_output=True, text=True, timeout=600)
        out["rc"], out["log"] = done.returncode, done.stderr[-4000:]
        out["ranks"] = [json.loads(p.read_text()) for p in sorted(Path("out").glob("rank-*"))]
        out["runs"] = [[r.status, r.summary["device"]["kind"], sorted(r.summary["eval"])]
                       for r in map(wb.Run.open, wb.runs()["path"])]
    """)
    assert ended_well(result["rc"], result["log"]), result["log"]
    assert [(r["step"], r["device"], r["optimizer"]) for r in result["ranks"]] == [
        (4, "hpu:0", "FusedAdamW")] * 2, result["ranks"]
    assert result["runs"] == [["completed", "hpu", ["accuracy", "loss"]]]
