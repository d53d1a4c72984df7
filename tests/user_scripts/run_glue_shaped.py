"""A text-classification script in the shape of Optimum Habana's
examples/text-classification/run_glue.py (1d8504c6c), written here: its three argument
dataclasses through HfArgumentParser, GaudiConfig.from_pretrained with the hub keywords,
set_seed, a GaudiTrainer, train, then evaluate. Local files stand in for the hub.

Migrated as docs/optimum-habana.md says: the optimum.habana imports point at
workbench.compat.optimum_habana, and send_example_telemetry (gone in transformers 5) is
dropped; nothing else is changed.
"""

import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import transformers
from datasets import load_dataset
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    HfArgumentParser,
)
from transformers.utils import check_min_version

from workbench.compat.optimum_habana import (
    GaudiConfig,
    GaudiTrainer,
    GaudiTrainingArguments,
    set_seed,
)

try:
    from workbench.compat.optimum_habana import check_optimum_habana_min_version
except ImportError:

    def check_optimum_habana_min_version(*a, **b):
        return ()


check_min_version("4.55.0")
check_optimum_habana_min_version("1.19.0.dev0")


@dataclass
class DataTrainingArguments:
    train_file: str | None = field(default=None, metadata={"help": "a json lines file"})
    validation_file: str | None = field(default=None)
    max_seq_length: int = field(default=128)
    pad_to_max_length: bool = field(default=True)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "a model folder or hub name"})
    cache_dir: str | None = field(default=None)
    model_revision: str = field(default="main")
    token: str | None = field(default=None)
    use_fast_tokenizer: bool = field(default=True)


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, GaudiTrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(sys.argv[1])
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    gaudi_config = GaudiConfig.from_pretrained(
        training_args.gaudi_config_name,
        cache_dir=model_args.cache_dir,
        revision=model_args.model_revision,
        token=model_args.token,
    )
    set_seed(training_args.seed)
    raw = load_dataset("json", data_files={"train": data_args.train_file,
                                           "validation": data_args.validation_file})
    labels = sorted(set(raw["train"]["label"]))
    config = AutoConfig.from_pretrained(model_args.model_name_or_path, num_labels=len(labels))
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model = AutoModelForSequenceClassification.from_pretrained(
        model_args.model_name_or_path, config=config)
    padding = "max_length" if data_args.pad_to_max_length else False

    def preprocess(examples):
        return tokenizer(examples["sentence"], padding=padding,
                         max_length=data_args.max_seq_length, truncation=True)

    raw = raw.map(preprocess, batched=True, remove_columns=["sentence"])

    def compute_metrics(p):
        preds = np.argmax(p.predictions, axis=1)
        return {"accuracy": float((preds == p.label_ids).mean())}

    trainer = GaudiTrainer(
        model=model,
        gaudi_config=gaudi_config,
        args=training_args,
        train_dataset=raw["train"] if training_args.do_train else None,
        eval_dataset=raw["validation"] if training_args.do_eval else None,
        compute_metrics=compute_metrics,
        processing_class=tokenizer,
        data_collator=None if data_args.pad_to_max_length else DataCollatorWithPadding(tokenizer),
    )
    if training_args.do_train:
        train_result = trainer.train()
        trainer.save_model()
        trainer.log_metrics("train", train_result.metrics)
    if training_args.do_eval:
        metrics = trainer.evaluate(eval_dataset=raw["validation"])
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(training_args.output_dir, f"rank-{rank}.json"), "w") as f:
        json.dump({"step": trainer.state.global_step, "world_size": training_args.world_size,
                   "device": str(training_args.device), "bf16": training_args.bf16,
                   # accelerate wraps the optimizer the Trainer built
                   "optimizer": type(getattr(trainer.optimizer, "optimizer", None)).__name__,
                   "transformers": transformers.__version__}, f)


if __name__ == "__main__":
    main()
