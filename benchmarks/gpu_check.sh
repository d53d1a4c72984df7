#!/usr/bin/env bash
# One command for a machine with one accelerator (an H200, say, or a Gaudi): engine
# (raw loop vs plain Trainer vs wb.train), shapes and MFU, in bf16, warm-up excluded,
# medians of repeats. Installs nothing: run it where torch for that device and this
# package are already installed (PYTHON=... to choose the interpreter). About 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${OUT_DIR:-benchmarks/results}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
"$PY" -m workbench devices
for model in gpt2-124m bert-base; do
  "$PY" -m workbench.bench engine --model "$model" --precision bf16 --batch-size 16 --seq-len 512 \
    --steps 20 --repeats 3 --json "$OUT/engine-$model.json"
done
"$PY" -m workbench.bench shapes --json "$OUT/shapes.json"
"$PY" -m workbench.bench mfu --model gpt2-124m --precision bf16 --seq-len 1024 --repeats 3 --json "$OUT/mfu.json"
echo "results in $OUT"
