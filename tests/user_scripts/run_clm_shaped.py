"""A causal-LM script in the shape of Optimum Habana's examples/language-modeling/run_clm.py
(1d8504c6c), written here: adapt_transformers_to_gaudi at import, the three argument
dataclasses, GaudiConfig.from_pretrained with the hub keywords, block grouping, a
GaudiTrainer, train, evaluate and perplexity.

Migrated as docs/optimum-habana.md says: the optimum.habana imports point at
workbench.compat.optimum_habana, send_example_telemetry is dropped, and ModelArguments'
own use_cache field is deleted (transformers 5's TrainingArguments has one: read
training_args.use_cache). Nothing else is changed.
"""

import json
import math
import os
from dataclasses import dataclass, field
from itertools import chain

from datasets import load_dataset
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    HfArgumentParser,
    default_data_collator,
)

from workbench.compat.optimum_habana import (
    GaudiConfig,
    GaudiTrainer,
    GaudiTrainingArguments,
    adapt_transformers_to_gaudi,
    set_seed,
)

adapt_transformers_to_gaudi()


@dataclass
class ModelArguments:
    model_name_or_path: str | None = field(default=None)
    cache_dir: str | None = field(default=None)
    model_revision: str = field(default="main")
    token: str | None = field(default=None)
    torch_dtype: str | None = field(default=None)


@dataclass
class DataTrainingArguments:
    train_file: str | None = field(default=None)
    validation_file: str | None = field(default=None)
    block_size: int | None = field(default=None)


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, GaudiTrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    gaudi_config = GaudiConfig.from_pretrained(
        training_args.gaudi_config_name,
        cache_dir=model_args.cache_dir,
        revision=model_args.model_revision,
        token=model_args.token,
    )
    set_seed(training_args.seed)
    raw = load_dataset("text", data_files={"train": data_args.train_file,
                                           "validation": data_args.validation_file})
    config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    config.use_cache = False if training_args.gradient_checkpointing else training_args.use_cache
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, config=config)
    tokenized = raw.map(lambda e: tokenizer(e["text"]), batched=True, remove_columns=["text"])
    block_size = data_args.block_size

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total = len(concatenated[next(iter(examples))]) // block_size * block_size
        result = {k: [t[i: i + block_size] for i in range(0, total, block_size)]
                  for k, t in concatenated.items()}
        result["labels"] = result["input_ids"].copy()
        return result

    lm = tokenized.map(group_texts, batched=True)
    trainer = GaudiTrainer(
        model=model,
        gaudi_config=gaudi_config,
        args=training_args,
        train_dataset=lm["train"] if training_args.do_train else None,
        eval_dataset=lm["validation"] if training_args.do_eval else None,
        processing_class=tokenizer,
        data_collator=default_data_collator,
    )
    if training_args.do_train:
        trainer.train()
        trainer.save_model()  # as run_clm.py does
    metrics = {}
    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["perplexity"] = math.exp(metrics["eval_loss"])
        trainer.log_metrics("eval", metrics)
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(training_args.output_dir, f"rank-{rank}.json"), "w") as f:
        json.dump({"step": trainer.state.global_step, "world_size": training_args.world_size,
                   "perplexity": metrics.get("perplexity")}, f)


if __name__ == "__main__":
    main()
