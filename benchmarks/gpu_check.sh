#!/usr/bin/env bash
# One command for a machine with one accelerator (an H200, say, or a Gaudi), in bf16,
# warm-up excluded, medians of interleaved repeats:
#   mfu    GPT-2-124M shape, packed blocks of 1024, batch 32: plain Trainer vs wb.train
#          with torch.compile (MFU against the dense bf16 peak)
#   engine GPT-2-124M and BERT-base shapes: raw loop vs plain Trainer vs wb.train
#   shapes pad-to-max vs dynamic vs bucketed vs packed (useful tokens/s, waste, shapes)
# Installs nothing: run it where torch for that device and this package's dependencies
# are already installed (PYTHON=... picks the interpreter; OUT_DIR=... the result folder).
# About 4.5 minutes on one H200 (STAGES=... runs a subset). Each stage has its own time
# limit, so one that hangs or fails is reported and the others still run. Opt-in stages,
# run only when named in STAGES: mfu-compiled, mfu-recipe, engine-bert-base-defaults,
# shapes-base (what each measures is said where it is defined, below).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${OUT_DIR:-benchmarks/results}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
start=$SECONDS
failed=()

STAGES=${STAGES:-mfu engine-gpt2-124m engine-bert-base shapes}  # a subset: STAGES="mfu shapes"

stage() {  # stage NAME LIMIT_S ARGS...: one benchmark, its own time limit
  local name=$1 limit=$2
  shift 2
  [[ " $STAGES " == *" $name "* ]] || return 0
  echo "== $name (limit ${limit}s, at $((SECONDS - start))s)"
  if ! timeout "$limit" "$PY" -m benchmarks "$@" --json "$OUT/$name.json"; then
    echo "!! $name failed or ran past ${limit}s"
    failed+=("$name")
  fi
}

"$PY" -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__,
"transformers", transformers.__version__)'
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -m workbench devices
# plain Trainer vs compiled wb.train (uncompiled wb.train vs Trainer: the engine stages)
stage mfu 200 mfu --model gpt2-124m --precision bf16 --batch-size 32 --seq-len 1024 --repeats 2 --compile \
  --ways trainer,workbench_compiled
stage engine-gpt2-124m 90 engine --model gpt2-124m --precision bf16 --batch-size 16 --seq-len 512 --steps 20 --repeats 3
stage engine-bert-base 90 engine --model bert-base --precision bf16 --batch-size 16 --seq-len 512 --steps 20 --repeats 3
stage shapes 60 shapes
# Opt-in stages (name them in STAGES):
# each engine at its own logging default, what a user gets (the Trainer every 500 steps;
# wb.train no sooner than 0.5 s apart)
stage engine-bert-base-defaults 90 engine --model bert-base --precision bf16 --batch-size 16 --seq-len 512 \
  --steps 20 --repeats 3 --log-every 0
# compiled wb.train against Trainer(torch_compile=True): what compile=True adds beyond
# torch.compile (packed blocks without a mask: SDPA's causal kernel)
stage mfu-compiled 240 mfu --model gpt2-124m --precision bf16 --batch-size 32 --seq-len 1024 --repeats 2 --compile \
  --ways trainer_compiled,workbench_compiled
# the padding trade-off at BERT-base and GPT-2-124M shapes (the default stage's tiny
# models are launch-bound on a GPU: bucketed_vs_pad_to_max was 1.02 on an H200)
stage shapes-base 120 shapes --size base
# the MFU settings of most pretraining recipes: no dropout, batch 64, the vocabulary padded
# to a multiple of 64 (50,304 rows, as nanoGPT does; the FLOPs count includes them)
stage mfu-recipe 200 mfu --model gpt2-124m --precision bf16 --batch-size 64 --seq-len 1024 --repeats 1 --compile \
  --ways workbench_compiled --config resid_pdrop=0 --config embd_pdrop=0 --config attn_pdrop=0 \
  --config vocab_size=50304
echo "== done in $((SECONDS - start))s; results in $OUT"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
