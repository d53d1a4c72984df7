"""Optimum Habana scripts on transformers 5: workbench.compat.optimum_habana."""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path

import pytest
from test_attach import own_parts

import workbench as wb
from workbench.compat import optimum_habana as oh

pytestmark = pytest.mark.usefixtures("runs_in_tmp")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "optimum-habana.md"

# Every field GaudiTrainingArguments declares in huggingface/optimum-habana
# optimum/habana/transformers/training_args.py at 1d8504c6c (main after v1.20.0, version
# 1.21.0.dev0), in its order; and GaudiConfig's in gaudi_configuration.py at the same commit.
OH_121_FIELDS = [
    "use_habana", "gaudi_config_name", "use_lazy_mode", "use_hpu_graphs",
    "use_hpu_graphs_for_inference", "use_hpu_graphs_for_training", "use_compiled_autograd",
    "compile_from_sec_iteration", "compile_dynamic", "use_zero3_leaf_promotion",
    "cache_size_limit", "use_regional_compilation", "inline_inbuilt_nn_modules",
    "allow_unspec_int_on_nn_module", "disable_tensor_cache_hpu_graphs", "max_hpu_graphs",
    "distribution_strategy", "context_parallel_size", "minimize_memory",
    "throughput_warmup_steps", "adjust_throughput", "pipelining_fwd_bwd", "ignore_eos",
    "non_blocking_data_copy", "profiling_warmup_steps", "profiling_steps",
    "profiling_warmup_steps_eval", "profiling_steps_eval", "profiling_record_shapes",
    "profiling_with_stack", "optim", "adam_epsilon", "logging_nan_inf_filter",
    "ddp_bucket_cap_mb", "ddp_find_unused_parameters", "half_precision_backend",
    "attn_implementation", "flash_attention_recompute", "flash_attention_fast_softmax",
    "flash_attention_causal_mask", "flash_attention_fp8", "sdp_on_bf16", "fp8",
]
OH_121_CONFIG = ["use_torch_autocast", "autocast_bf16_ops", "autocast_fp32_ops",
                 "use_dynamic_shapes", "use_fused_adam", "use_fused_clip_norm"]

# Shaped like the gaudi_config.json files Habana published for its model repos (Optimum
# Habana's docs/source/package_reference/gaudi_config.mdx quotes bert-large's and SD 2's).
BERT_CONFIG = {"use_fused_adam": True, "use_fused_clip_norm": True, "use_torch_autocast": True}
SD2_CONFIG = {**BERT_CONFIG, "autocast_bf16_ops": ["conv2d", "addmm", "bmm", "linear"],
              "autocast_fp32_ops": ["embedding", "log_softmax", "nll_loss"]}


@pytest.mark.policy
def test_every_121_field_is_in_the_mapping_and_the_docs_table():
    assert set(OH_121_FIELDS) == set(oh.FIELDS), "the mapping has exactly 1.21's fields"
    assert set(OH_121_CONFIG) == set(oh.CONFIG_FIELDS)
    text = DOCS.read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]* \| (\w+) \|", text, re.M))
    for name in OH_121_FIELDS + OH_121_CONFIG:
        assert name in rows, f"{name} is missing from docs/optimum-habana.md's table"
        f = oh.FIELDS.get(name) or oh.CONFIG_FIELDS[name]
        assert rows[name] == f.how, f"the docs say {rows[name]} for {name}, the code {f.how}"
    fields = {f.name for f in dataclasses.fields(oh.GaudiTrainingArguments)}
    assert set(OH_121_FIELDS) <= fields, "HfArgumentParser sees every 1.21 field"
    defaults = {f.name: f.default for f in dataclasses.fields(oh.GaudiTrainingArguments)}
    assert (defaults["adam_epsilon"], defaults["use_lazy_mode"], defaults["ddp_bucket_cap_mb"]) \
        == (1e-6, True, 230), "Optimum Habana's defaults, not transformers'"


# transformers 4.55 TrainingArguments fields that Optimum Habana's examples pass in their
# README commands or read in their scripts (1d8504c6c: examples/**/README.md, examples/**/*.py)
# and transformers 5 removed; found by comparing their --flags and training_args.X / args.X
# with dataclasses.fields(transformers.Seq2SeqTrainingArguments), the scripts' own fields left
# out. The scripts' own ModelArguments.use_cache is now a transformers field (CHANGED).
OH_REMOVED_FIELDS = ["overwrite_output_dir", "warmup_ratio", "use_legacy_prediction_loop",
                     "save_safetensors", "group_by_length", "push_to_hub_model_id"]


@pytest.mark.policy
def test_every_removed_field_the_scripts_use_is_absorbed_and_in_the_docs_table():
    import transformers

    ta5 = {f.name for f in dataclasses.fields(transformers.Seq2SeqTrainingArguments)}
    assert not set(OH_REMOVED_FIELDS) & ta5, "removed in transformers 5"
    assert set(OH_REMOVED_FIELDS) == set(oh.REMOVED) and set(oh.CHANGED) == {"use_cache"}
    fields = {f.name: f.default for f in dataclasses.fields(oh.GaudiSeq2SeqTrainingArguments)}
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]* \| (\w+) \|", DOCS.read_text(), re.M))
    for name, f in {**oh.REMOVED, **oh.CHANGED}.items():
        assert fields[name] == f.default, f"{name} keeps the default the scripts had"
        assert rows.get(name) == f.how, f"docs/optimum-habana.md's table: {name} {f.how}"


def _config_dir(tmp_path, config) -> Path:
    folder = tmp_path / "gaudi"
    folder.mkdir(exist_ok=True)
    (folder / "gaudi_config.json").write_text(json.dumps(config))
    return folder


@dataclasses.dataclass
class ScriptArguments:
    """The example scripts' own model and data arguments (those the commands below pass)."""

    model_name_or_path: str = "bert-base-uncased"
    task_name: str | None = None
    max_seq_length: int = 128
    dataset_name: str | None = None
    dataset_config_name: str | None = None
    dataset_config: str | None = None
    source_prefix: str | None = None
    ignore_pad_token_for_loss: bool = True
    pad_to_max_length: bool = False


def _parse(cls, argv):
    from transformers import HfArgumentParser

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, args = HfArgumentParser((ScriptArguments, cls)).parse_args_into_dataclasses(argv)
    return args, [str(w.message) for w in caught]


def test_the_example_scripts_command_lines_parse(tmp_path):
    """The commands of optimum-habana's examples/{text-classification, language-modeling,
    summarization}/README.md (1d8504c6c), with our own gaudi_config.json for the hub names."""
    config = str(_config_dir(tmp_path, BERT_CONFIG))
    glue = ["--model_name_or_path", "bert-large-uncased-whole-word-masking",
            "--gaudi_config_name", config, "--task_name", "mrpc", "--do_train", "--do_eval",
            "--per_device_train_batch_size", "64", "--learning_rate", "3e-5",
            "--num_train_epochs", "3", "--max_seq_length", "128",
            "--output_dir", str(tmp_path / "mrpc"), "--use_habana", "--use_lazy_mode",
            "--use_hpu_graphs_for_inference", "--throughput_warmup_steps", "3", "--bf16",
            "--sdp_on_bf16"]
    args, said = _parse(oh.GaudiTrainingArguments, glue)
    assert args.bf16 and args.learning_rate == 3e-5 and args.throughput_warmup_steps == 3
    assert args.gaudi_config.use_fused_adam and args.workbench_device == "cpu"
    assert any("use_hpu_graphs_for_inference" in s and "lazy mode" in s for s in said)
    clm = ["--model_name_or_path", "gpt2", "--dataset_name", "wikitext",
           "--dataset_config_name", "wikitext-2-raw-v1", "--per_device_train_batch_size", "4",
           "--per_device_eval_batch_size", "4", "--do_train", "--do_eval",
           "--output_dir", str(tmp_path / "clm"), "--gaudi_config_name", config,
           "--use_habana", "--use_lazy_mode", "--use_hpu_graphs_for_inference",
           "--throughput_warmup_steps", "3"]
    args, _ = _parse(oh.GaudiTrainingArguments, clm)
    assert args.per_device_eval_batch_size == 4 and args.use_lazy_mode
    summarization = ["--model_name_or_path", "t5-small", "--do_train", "--do_eval",
                     "--dataset_name", "cnn_dailymail", "--dataset_config", "3.0.0",
                     "--source_prefix", "summarize: ", "--output_dir", str(tmp_path / "sum"),
                     "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
                     "--overwrite_output_dir", "--predict_with_generate", "--use_habana",
                     "--use_lazy_mode", "--use_hpu_graphs_for_inference",
                     "--gaudi_config_name", config, "--ignore_pad_token_for_loss", "False",
                     "--pad_to_max_length", "--save_strategy", "epoch",
                     "--throughput_warmup_steps", "3", "--bf16"]
    args, said = _parse(oh.GaudiSeq2SeqTrainingArguments, summarization)
    assert args.predict_with_generate and args.save_strategy == "epoch"
    assert any("overwrite_output_dir" in s for s in said), "a field transformers 5 dropped warns"


def test_refusals_name_the_field_and_the_replacement(tmp_path):
    out = str(tmp_path / "o")
    with pytest.raises(ValueError, match=r"fp8=True .*bf16"):
        oh.GaudiTrainingArguments(output_dir=out, use_habana=True, fp8=True)
    with pytest.raises(ValueError, match=r"context_parallel_size=2"):
        oh.GaudiTrainingArguments(output_dir=out, context_parallel_size=2)
    with pytest.raises(ValueError, match="gaudi_config_name needs use_habana"):
        oh.GaudiTrainingArguments(output_dir=out, gaudi_config_name=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="hf_hub_download"):
        oh.GaudiConfig.from_pretrained("Habana/bert-base-uncased")
    with pytest.raises(ValueError, match="known: use_torch_autocast"):
        oh.GaudiConfig(use_fused_adamw=True)
    with pytest.warns(UserWarning, match="fast_ddp"):
        oh.GaudiTrainingArguments(output_dir=out, distribution_strategy="fast_ddp")


def test_habanas_published_configs_read(tmp_path):
    bert = oh.GaudiConfig.from_pretrained(_config_dir(tmp_path, BERT_CONFIG))
    assert (bert.use_fused_adam, bert.use_fused_clip_norm, bert.use_torch_autocast) == (
        True, True, True)
    sd2 = oh.GaudiConfig.from_pretrained(_config_dir(tmp_path, SD2_CONFIG) / "gaudi_config.json")
    assert sd2.autocast_bf16_ops[0] == "conv2d" and sd2.to_dict()["autocast_fp32_ops"][-1] == \
        "nll_loss"


def _train(tmp_path, trainer_fn, args):
    model, tok, data, metrics = own_parts()
    trainer = trainer_fn(model=model, args=args, train_dataset=data["train"],
                         eval_dataset=data["eval"], processing_class=tok,
                         compute_metrics=metrics)
    trainer.train()
    run = wb.Run.open(sorted(wb.runs()["path"])[-1])
    return [e["loss"] for e in run.events if e.get("phase") in ("warmup", "train")], run


@pytest.mark.slow
def test_an_optimum_habana_script_trains_the_loss_curve_of_wb_training_args(tmp_path, capsys):
    """The done-check: an Optimum Habana argument set with Habana's BERT gaudi_config.json,
    through the compat module, and its equivalent with wb.training_args, same seed."""
    import transformers

    config = _config_dir(tmp_path, BERT_CONFIG)
    common = {"max_steps": 8, "per_device_train_batch_size": 8, "learning_rate": 1e-3,
              "seed": 0, "report_to": "none", "disable_tqdm": True, "save_strategy": "no"}
    gaudi_args = oh.GaudiTrainingArguments(
        output_dir=str(tmp_path / "oh"), use_habana=True, use_lazy_mode=True,
        gaudi_config_name=str(config), throughput_warmup_steps=2, **common)
    assert "no Gaudi: training on cpu" in capsys.readouterr().out
    transformers.set_seed(0)
    oh_loss, oh_run = _train(tmp_path, oh.GaudiTrainer, gaudi_args)
    # the equivalent: bf16 from use_torch_autocast, Optimum Habana's adam_epsilon
    wb_args = wb.training_args(str(tmp_path / "wb"), bf16=True, adam_epsilon=1e-6,
                               optim="adamw_torch", **common)
    transformers.set_seed(0)
    def attached(**kw):
        trainer = transformers.Trainer(**kw)
        wb.attach(trainer, live=False)
        return trainer

    wb_loss, wb_run = _train(tmp_path, attached, wb_args)
    assert oh_run.path != wb_run.path and len(oh_loss) == 8
    assert oh_loss == pytest.approx(wb_loss, rel=1e-6), "the same loss curve"
    assert oh_run.spec["training_arguments"]["bf16"] is True
    assert oh_run.spec["args"]["throughput_warmup_steps"] == 2
    assert oh_run.status == "completed"


def test_the_torch_settings_of_the_arguments_hold_for_the_run_and_are_put_back(tmp_path):
    """sdp_on_bf16 and the dynamo fields are process-wide torch settings: Optimum Habana set
    them for good when the Trainer was built; here they hold while it trains and evaluates,
    and the notebook's next cell finds them as they were, also after a failed run."""
    import torch
    import transformers

    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    before = (torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed(), getattr(config, limit),
              config.allow_unspec_int_on_nn_module)
    wanted = (not before[0], before[1] + 7, not before[2])

    def now():
        return (torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed(), getattr(config, limit),
                config.allow_unspec_int_on_nn_module)

    seen = []

    class Watch(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            seen.append(("train", now()))

        def on_evaluate(self, args, state, control, **kw):
            seen.append(("evaluate", now()))

    model, tok, data, metrics = own_parts()
    args = oh.GaudiTrainingArguments(
        output_dir=str(tmp_path / "oh"), use_habana=True, max_steps=2, per_device_train_batch_size=8,
        report_to="none", disable_tqdm=True, save_strategy="no", sdp_on_bf16=not before[0],
        cache_size_limit=wanted[1], allow_unspec_int_on_nn_module=wanted[2])
    trainer = oh.GaudiTrainer(model=model, args=args, train_dataset=data["train"],
                              eval_dataset=data["eval"], processing_class=tok,
                              compute_metrics=metrics, callbacks=[Watch()])
    assert now() == before, "building the Trainer changes nothing for the process"
    trainer.train()
    assert now() == before, "the run left a torch setting changed"
    trainer.evaluate()
    assert now() == before
    assert {w for w, _ in seen} == {"train", "evaluate"} and all(v == wanted for _, v in seen), seen

    class Fail(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            assert now() == wanted
            raise RuntimeError("a step failed")

    trainer.add_callback(Fail())
    with pytest.raises(RuntimeError, match="a step failed"):
        trainer.train()
    assert now() == before, "a failed run puts them back too"


# ------------------------------------------------------------------ issue 39: the scripts' shapes
# The dataclasses below have the shape of Optimum Habana's own example scripts (1d8504c6c:
# examples/text-classification/run_glue.py and examples/language-modeling/run_clm.py, their
# ModelArguments and DataTrainingArguments; written here, trimmed to the fields that matter).
@dataclasses.dataclass
class GlueModelArguments:
    model_name_or_path: str = dataclasses.field(metadata={"help": "model or path"})
    config_name: str | None = None
    tokenizer_name: str | None = None
    cache_dir: str | None = None
    use_fast_tokenizer: bool = True
    model_revision: str = "main"
    token: str | None = None
    trust_remote_code: bool = False
    ignore_mismatched_sizes: bool = False


@dataclasses.dataclass
class GlueDataArguments:
    task_name: str | None = None
    max_seq_length: int = 128
    overwrite_cache: bool = False
    pad_to_max_length: bool = True
    max_train_samples: int | None = None
    max_eval_samples: int | None = None


@dataclasses.dataclass
class ClmModelArguments:
    model_name_or_path: str | None = None
    model_type: str | None = None
    cache_dir: str | None = None
    model_revision: str = "main"
    token: str | None = None
    torch_dtype: str | None = None
    use_cache: bool = dataclasses.field(default=True, metadata={"help": "return key/values"})
    low_cpu_mem_usage: bool = False


@dataclasses.dataclass
class ClmDataArguments:
    dataset_name: str | None = None
    block_size: int | None = None
    streaming: bool = False


def _parser(*classes):
    from transformers import HfArgumentParser

    return HfArgumentParser(classes)


def test_run_glue_shaped_arguments_parse_and_read_the_gaudi_config(tmp_path):
    """``HfArgumentParser((ModelArguments, DataTrainingArguments, GaudiTrainingArguments))``
    and then, as every run_*.py does, ``GaudiConfig.from_pretrained(name, cache_dir=,
    revision=, token=)``; a gaudi_config.json Optimum Habana wrote (with its version keys)."""
    config = _config_dir(tmp_path, {**BERT_CONFIG, "optimum_version": "1.19.0",
                                    "transformers_version": "4.55.0"})
    argv = ["--model_name_or_path", "bert-base-uncased", "--task_name", "mrpc", "--do_train",
            "--do_eval", "--output_dir", str(tmp_path / "out"), "--use_habana",
            "--use_lazy_mode", "--gaudi_config_name", str(config), "--cache_dir",
            str(tmp_path / "cache"), "--max_seq_length", "64", "--bf16"]
    model_args, data_args, training_args = _parser(
        GlueModelArguments, GlueDataArguments, oh.GaudiTrainingArguments
    ).parse_args_into_dataclasses(argv)
    gaudi_config = oh.GaudiConfig.from_pretrained(
        training_args.gaudi_config_name, cache_dir=model_args.cache_dir,
        revision=model_args.model_revision, token=model_args.token)
    assert gaudi_config.use_fused_adam and gaudi_config.versions["optimum_version"] == "1.19.0"
    assert data_args.max_seq_length == 64 and training_args.bf16


def test_run_clm_shaped_arguments_need_the_one_use_cache_edit(tmp_path):
    """transformers 5's TrainingArguments has a ``use_cache`` field: run_clm's own
    ``ModelArguments.use_cache`` now clashes in argparse. The migration page's fix (drop the
    field, read ``training_args.use_cache``) parses."""
    import argparse

    with pytest.raises(argparse.ArgumentError, match="use_cache"):
        _parser(ClmModelArguments, ClmDataArguments, oh.GaudiTrainingArguments)
    fields = [(f.name, f.type, f) for f in dataclasses.fields(ClmModelArguments)
              if f.name != "use_cache"]
    fixed = dataclasses.make_dataclass("ModelArguments", fields)
    argv = ["--model_name_or_path", "gpt2", "--output_dir", str(tmp_path / "out"),
            "--use_habana", "--gaudi_config_name", str(_config_dir(tmp_path, BERT_CONFIG)),
            "--use_cache", "False"]
    _, _, training_args = _parser(fixed, ClmDataArguments, oh.GaudiTrainingArguments
                                  ).parse_args_into_dataclasses(argv)
    assert training_args.use_cache is False


def test_optimum_habana_utils_have_their_counterparts():
    import random

    oh.set_seed(7)
    first = random.random()
    oh.set_seed(7)
    assert random.random() == first
    assert oh.adapt_transformers_to_gaudi() is None
    assert oh.check_optimum_habana_min_version("1.19.0.dev0") is None


def test_a_hub_name_is_refused_naming_what_was_asked(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"hf_hub_download\('Habana/gpt2', "):
        oh.GaudiConfig.from_pretrained("Habana/gpt2", cache_dir=str(tmp_path / "cache"),
                                       revision="main", token=None)
    with pytest.raises(FileNotFoundError, match="no such gaudi_config.json") as caught:
        oh.GaudiConfig.from_pretrained(str(tmp_path / "nowhere"))
    assert "hf_hub_download" not in str(caught.value), "a path is not a hub name"


def test_warnings_point_at_the_users_line(tmp_path):
    with pytest.warns(UserWarning, match="use_hpu_graphs_for_inference") as said:
        oh.GaudiTrainingArguments(output_dir=str(tmp_path / "o"),
                                  use_hpu_graphs_for_inference=True)
    assert {Path(w.filename).name for w in said} == {"test_compat.py"}, \
        [(w.filename, w.lineno) for w in said]


def test_notices_come_from_rank_0_only(tmp_path, monkeypatch):
    """Under torchrun every rank builds the arguments: one notice, rank 0's."""
    for rank, expected in (("1", 0), ("0", 1)):
        monkeypatch.setenv("RANK", rank)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            oh.GaudiTrainingArguments(output_dir=str(tmp_path / "o"),
                                      use_hpu_graphs_for_inference=True)
        notices = [w for w in said if "use_hpu_graphs_for_inference" in str(w.message)]
        assert len(notices) == expected, (rank, [str(w.message) for w in said])


def test_a_gaudi_trainer_run_records_its_eval_rows(tmp_path):
    args = oh.GaudiTrainingArguments(output_dir=str(tmp_path / "o"), max_steps=2,
                                     per_device_train_batch_size=8, report_to="none",
                                     disable_tqdm=True, save_strategy="no")
    model, tok, data, _ = own_parts()
    oh.GaudiTrainer(model=model, args=args, train_dataset=data["train"],
                    eval_dataset=data["eval"], processing_class=tok).train()
    (path,) = wb.runs()["path"]
    assert wb.Run.open(path).spec["data"]["eval_rows"] == len(data["eval"]) == 10


class QuestionAnsweringTrainer(oh.GaudiTrainer):
    """The shape of Optimum Habana's examples/question-answering/trainer_qa.py: a subclass
    with keywords of its own, an evaluate() of its own, everything else passed through."""

    def __init__(self, *args, eval_examples=None, post_process_function=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.eval_examples = eval_examples
        self.post_process_function = post_process_function

    def evaluate(self, eval_dataset=None, eval_examples=None, ignore_keys=None,
                 metric_key_prefix: str = "eval"):
        metrics = super().evaluate(eval_dataset, ignore_keys=ignore_keys,
                                   metric_key_prefix=metric_key_prefix)
        return self.post_process_function(metrics) if self.post_process_function else metrics


def test_a_gaudi_trainer_subclass_trains_with_positional_arguments(tmp_path):
    """Optimum Habana's positional order (model, gaudi_config, args, data_collator,
    train_dataset, eval_dataset, processing_class): a subclass trains, evaluates after
    train() into its run, and writes gaudi_config.json into every checkpoint."""
    import transformers

    config = oh.GaudiConfig.from_pretrained(_config_dir(tmp_path, BERT_CONFIG))
    args = oh.GaudiTrainingArguments(
        output_dir=str(tmp_path / "qa"), use_habana=True, max_steps=4, save_steps=2,
        save_strategy="steps", per_device_train_batch_size=8, report_to="none",
        disable_tqdm=True)
    model, tok, data, metrics = own_parts()
    trainer = QuestionAnsweringTrainer(
        model, config, args, transformers.DataCollatorWithPadding(tok), data["train"],
        data["eval"], tok, compute_metrics=metrics,
        post_process_function=lambda m: {**m, "post_processed": True})
    assert isinstance(trainer, oh.GaudiTrainer) and isinstance(trainer, transformers.Trainer)
    trainer.train()
    assert trainer.evaluate()["post_processed"]
    run = wb.Run.open(wb.runs().loc[0, "path"])
    assert run.status == "completed" and "accuracy" in run.summary["eval"]
    for step in (2, 4):
        saved = json.loads((tmp_path / "qa" / f"checkpoint-{step}" / "gaudi_config.json")
                           .read_text())
        assert saved["use_fused_adam"] is True and "transformers_version" in saved
        assert oh.GaudiConfig.from_pretrained(tmp_path / "qa" / f"checkpoint-{step}") \
            .use_torch_autocast


def test_gaudi_trainer_with_a_named_callback_makes_one_run(tmp_path):
    args = oh.GaudiTrainingArguments(output_dir=str(tmp_path / "o"), max_steps=2,
                                     per_device_train_batch_size=8, report_to="none",
                                     disable_tqdm=True, save_strategy="no")
    model, tok, data, _ = own_parts()
    oh.GaudiTrainer(model=model, args=args, train_dataset=data["train"], processing_class=tok,
                    callbacks=[wb.callback(name="mine", live=False)]).train()
    assert list(wb.runs()["run"].str.endswith("-mine")) == [True]


def test_seq2seq_with_fused_adam_trains(tmp_path):
    """A summarization-shaped run: GaudiSeq2SeqTrainer, Habana's config with
    ``use_fused_adam: true`` (on the CPU the Trainer's own AdamW), predict_with_generate."""
    import transformers

    tok = wb.model("t5", size="tiny").load_tokenizer()
    texts = [r["text"] for r in wb.dataset("docstrings-lm", limit=24).load()["train"]]
    rows = [{**tok("summarize: " + t, truncation=True, max_length=32),
             "labels": tok(t, truncation=True, max_length=8)["input_ids"]} for t in texts]
    transformers.set_seed(0)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=len(tok), d_model=32, d_ff=64, d_kv=8, num_layers=1, num_heads=2,
        decoder_start_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id))
    args = oh.GaudiSeq2SeqTrainingArguments(
        output_dir=str(tmp_path / "sum"), use_habana=True, use_lazy_mode=True,
        gaudi_config_name=str(_config_dir(tmp_path, BERT_CONFIG)), max_steps=3,
        per_device_train_batch_size=4, report_to="none", disable_tqdm=True,
        save_strategy="no", predict_with_generate=True, generation_max_length=8)
    trainer = oh.GaudiSeq2SeqTrainer(
        model=model, args=args, train_dataset=rows, eval_dataset=rows[:4],
        data_collator=transformers.DataCollatorForSeq2Seq(tok, model=model), tokenizer=tok)
    assert isinstance(trainer, transformers.Seq2SeqTrainer)
    trainer.train()
    trainer.evaluate()
    run = wb.Run.open(wb.runs().loc[0, "path"])
    assert run.status == "completed" and run.spec["model"]["task"] == "seq2seq"
    assert "perplexity" in run.summary["eval"]


def test_the_migration_page_says_the_way_out_of_the_recipe_cache_warning():
    """Migrated scripts import torch before the compat: the page gives the two fixes the
    warning names (import workbench first, or set the variable before Python starts)."""
    text = DOCS.read_text()
    assert "the HPU recipe cache is off in this process" in text
    assert "make `import workbench` the script's first import" in text
    assert re.search(r"export PT_HPU_RECIPE_CACHE_CONFIG=\S+,false,4096", text)


def test_seq2seq_with_fused_adam_trains_on_the_emulated_gaudi(on_hpu):
    """On Gaudi, use_fused_adam gives GaudiSeq2SeqTrainer hpex's FusedAdamW, built by the
    Trainer over its own decay groups (Seq2SeqTrainer's constructor has no
    optimizer_cls_and_kwargs: the class's create_optimizer passes it)."""
    out = on_hpu("""
        import json, pathlib
        import transformers
        import workbench as wb
        from workbench.compat import optimum_habana as oh
        pathlib.Path("gaudi").mkdir()
        pathlib.Path("gaudi/gaudi_config.json").write_text(json.dumps({"use_fused_adam": True}))
        tok = wb.model("t5", size="tiny").load_tokenizer()
        texts = [r["text"] for r in wb.dataset("docstrings-lm", limit=16).load()["train"]]
        rows = [{**tok("summarize: " + t, truncation=True, max_length=16),
                 "labels": tok(t, truncation=True, max_length=8)["input_ids"]} for t in texts]
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=len(tok), d_model=32, d_ff=64, d_kv=8, num_layers=1, num_heads=2,
            decoder_start_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id))
        args = oh.GaudiSeq2SeqTrainingArguments(
            output_dir="sum", use_habana=True, use_lazy_mode=False, gaudi_config_name="gaudi",
            max_steps=2, per_device_train_batch_size=4, report_to="none", save_strategy="no",
            disable_tqdm=True)
        trainer = oh.GaudiSeq2SeqTrainer(
            model=model, args=args, train_dataset=rows,
            data_collator=transformers.DataCollatorForSeq2Seq(tok, model=model))
        trainer.train()
        out["optimizer"] = type(trainer.optimizer.optimizer).__name__
        out["device"] = str(next(model.parameters()).device)
        out["status"] = wb.Run.open(wb.runs().loc[0, "path"]).status
    """)
    assert out == {"optimizer": "FusedAdamW", "device": "hpu:0", "status": "completed"}, out


# ------------------------------------------------------------ issue 54: the removed fields
def test_readme_warmup_ratio_and_group_by_length_map_onto_transformers_5(tmp_path):
    """``--warmup_ratio 0.03`` (examples/language-modeling/README.md) is transformers 5's
    ``warmup_steps=0.03`` (below 1: a ratio); ``group_by_length`` its sampling strategy."""
    argv = ["--model_name_or_path", "gpt2", "--output_dir", str(tmp_path / "o"),
            "--use_habana", "--warmup_ratio", "0.03", "--group_by_length"]
    args, said = _parse(oh.GaudiTrainingArguments, argv)
    assert args.warmup_steps == 0.03 and args.get_warmup_steps(1000) == 30
    assert args.warmup_ratio == 0.03, "scripts may still read it"
    assert args.train_sampling_strategy == "group_by_length" and args.group_by_length
    assert not [s for s in said if "warmup" in s or "group_by_length" in s], "mapped silently"
    with pytest.raises(ValueError, match=r"warmup_ratio=0\.1 and warmup_steps=10 .*pass only one"):
        oh.GaudiTrainingArguments(output_dir=str(tmp_path / "o"), warmup_ratio=0.1,
                                  warmup_steps=10)
    with pytest.raises(ValueError, match=r"warmup_ratio=1\.0: .*warmup_steps=<a number"):
        oh.GaudiTrainingArguments(output_dir=str(tmp_path / "o"), warmup_ratio=1.0)
    with pytest.raises(ValueError, match="group_by_length=True and train_sampling_strategy"):
        oh.GaudiTrainingArguments(output_dir=str(tmp_path / "o"), group_by_length=True,
                                  train_sampling_strategy="sequential")


def test_readme_push_to_hub_model_id_is_hub_model_id(tmp_path):
    """examples/image-classification/README.md: ``--push_to_hub --push_to_hub_model_id``."""
    argv = ["--model_name_or_path", "vit", "--output_dir", str(tmp_path / "o"),
            "--push_to_hub", "--push_to_hub_model_id", "me/vit-beans"]
    args, _ = _parse(oh.GaudiTrainingArguments, argv)
    assert args.hub_model_id == "me/vit-beans" and args.push_to_hub
    with pytest.raises(ValueError, match="pass only hub_model_id"):
        oh.GaudiTrainingArguments(output_dir=str(tmp_path / "o"),
                                  push_to_hub_model_id="me/a", hub_model_id="me/b")


def _notices(name, caught):
    """The notices about one field, among caught warnings or their messages."""
    return [str(getattr(w, "message", w)) for w in caught
            if str(getattr(w, "message", w)).startswith(name)]


def test_trainer_qa_picks_evaluation_loop_with_use_legacy_prediction_loop(tmp_path):
    """examples/question-answering/trainer_qa.py's line, ``self.prediction_loop if
    self.args.use_legacy_prediction_loop else self.evaluation_loop``: transformers 5 has no
    prediction_loop; the flag on the command line says so once and the line picks
    evaluation_loop."""
    argv = ["--model_name_or_path", "bert-base-uncased", "--output_dir", str(tmp_path / "o"),
            "--use_legacy_prediction_loop", "--report_to", "none"]
    args, said = _parse(oh.GaudiTrainingArguments, argv)
    (said,) = _notices("use_legacy_prediction_loop", said)
    assert "only evaluation_loop" in said and args.use_legacy_prediction_loop is False
    model, tok, data, _ = own_parts()
    trainer = QuestionAnsweringTrainer(model=model, args=args, eval_dataset=data["eval"],
                                       processing_class=tok)
    eval_loop = (trainer.prediction_loop if trainer.args.use_legacy_prediction_loop
                 else trainer.evaluation_loop)
    output = eval_loop(trainer.get_eval_dataloader(), description="Evaluation")
    assert output.num_samples == len(data["eval"]) and "eval_loss" in output.metrics


def test_save_safetensors_false_says_so_and_saves_safetensors(tmp_path):
    """examples/language-modeling/run_multitask_prompt_tuning.py sets
    ``training_args.save_safetensors = False`` before building its trainer: transformers 5
    always writes safetensors, so one notice; given on the command line, one notice and the
    field reads what happens."""
    argv = ["--model_name_or_path", "bert-base-uncased", "--output_dir", str(tmp_path / "o"),
            "--save_safetensors", "False", "--report_to", "none", "--save_strategy", "no"]
    args, said = _parse(oh.GaudiTrainingArguments, argv)
    assert len(_notices("save_safetensors", said)) == 1 and args.save_safetensors is True
    args.save_safetensors = False  # run_multitask_prompt_tuning.py's line
    model, tok, data, _ = own_parts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = oh.GaudiTrainer(model=model, args=args, train_dataset=data["train"],
                                  processing_class=tok)
        trainer.save_model()
    (said,) = _notices("save_safetensors", caught)
    assert "always saves safetensors" in said
    assert (tmp_path / "o" / "model.safetensors").exists()


@pytest.mark.parametrize("checkpointing, saved", [([], True), (["--gradient_checkpointing"],
                                                                False)])
def test_a_run_clm_shaped_run_saves_use_cache_as_optimum_habana_did(tmp_path, checkpointing,
                                                                       saved):
    """run_clm.py with the migration page's use_cache edit (its own field deleted, the config
    built with ``training_args.use_cache``): the saved config.json reads use_cache: true, as
    Optimum Habana's run wrote (its field defaulted to True), false under gradient
    checkpointing (the script's own ``False if gradient_checkpointing``); transformers 5's
    default (False), which its Trainer writes into the model's config, would save false."""
    import torch
    import transformers

    fields = [(f.name, f.type, f) for f in dataclasses.fields(ClmModelArguments)
              if f.name != "use_cache"]
    fixed = dataclasses.make_dataclass("ModelArguments", fields)
    argv = ["--model_name_or_path", "gpt2", "--output_dir", str(tmp_path / "out"),
            "--use_habana", "--max_steps", "1", "--per_device_train_batch_size", "2",
            "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "True",
            *checkpointing]
    _, _, training_args = _parser(fixed, ClmDataArguments, oh.GaudiTrainingArguments
                                  ).parse_args_into_dataclasses(argv)
    # run_clm.py's config_kwargs, with the edit
    use_cache = False if training_args.gradient_checkpointing else training_args.use_cache
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1,
                                     n_head=2, use_cache=use_cache)
    ids = torch.arange(16) % 64
    rows = [{"input_ids": ids, "labels": ids} for _ in range(4)]
    trainer = oh.GaudiTrainer(model=transformers.GPT2LMHeadModel(config), args=training_args,
                              train_dataset=rows)
    trainer.train()
    trainer.save_model()
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["use_cache"] is saved
