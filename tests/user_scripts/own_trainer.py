"""A researcher's own training script, shaped as one is written for torchrun: their model,
their tokenized data, their Trainer, and one line added (``callbacks=[wb.callback()]``).

    python -m torch.distributed.run --nproc_per_node 2 own_trainer.py --output_dir out

Each rank writes what it did (``rank-N.json`` in the output directory), so that a test can
check that every rank trained, evaluated and stopped at the same step.
"""

import argparse
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch.distributed as dist
import transformers

import workbench as wb

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", required=True)
parser.add_argument("--max_steps", type=int, default=6)
parser.add_argument("--eval_steps", type=int, default=3)
parser.add_argument("--deepspeed", default=None)
parser.add_argument("--use_cpu", action="store_true")  # torchrun on a CPU: DDP over gloo
parser.add_argument("--plain", action="store_true", help="without the workbench's line")
opts = parser.parse_args()

tok = wb.model("bert", size="tiny").load_tokenizer()  # shipped with the package: offline
data = wb.dataset("docstrings-topic", limit=96).load().map(
    lambda b: tok(b["text"], truncation=True, max_length=32), batched=True,
    remove_columns=["text"])
transformers.set_seed(0)
model = transformers.BertForSequenceClassification(transformers.BertConfig(
    vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=64, num_labels=6, pad_token_id=tok.pad_token_id))


def compute_metrics(pred):
    return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}


args = transformers.TrainingArguments(
    output_dir=opts.output_dir, max_steps=opts.max_steps, per_device_train_batch_size=4,
    learning_rate=1e-3, eval_strategy="steps", eval_steps=opts.eval_steps,
    save_strategy="no", report_to="none", disable_tqdm=True, seed=0,
    deepspeed=opts.deepspeed, use_cpu=opts.use_cpu)
trainer = transformers.Trainer(
    model=model, args=args, train_dataset=data["train"], eval_dataset=data["eval"],
    data_collator=transformers.DataCollatorWithPadding(tok), compute_metrics=compute_metrics,
    callbacks=None if opts.plain else [wb.callback(name="ranks")])  # the one added line
trainer.train()
metrics = trainer.evaluate()
weights = b"".join(p.detach().float().cpu().numpy().tobytes() for p in model.parameters())
rank = int(os.environ.get("RANK", "0"))
Path(opts.output_dir, f"rank-{rank}.json").write_text(json.dumps({
    "rank": rank, "world_size": args.world_size, "step": trainer.state.global_step,
    "device": str(args.device),
    "backend": dist.get_backend() if dist.is_initialized() else None,
    "eval_accuracy": metrics.get("eval_accuracy"),
    "params_sha256": hashlib.sha256(weights).hexdigest()}))
