#!/usr/bin/env bash
# GPU benchmarks for one accelerator (sized for one H200): ends within 8 minutes, because every
# step has its own time limit (sum 470 s) and a step that runs over is stopped and reported.
#
#   bash benchmarks/gpu.sh [OUT_DIR]          # default OUT_DIR: benchmarks/results/gpu
#
# Environment: PYTHON (default python) with visattn's dependencies; DATA_ROOT, the folder holding
# cifar-10-batches-py/ (default ../shared/data); without it the loader and real-epoch steps are
# skipped (the model-only epoch time is still extrapolated from images/s).
#
# Steps (each writes OUT_DIR/<step>.md with its tables and the machine, .csv, .log):
#   1 blocks_cuda_fp32   every block vs timm, fp32                                    80 s
#   2 blocks_cuda_bf16   the same in bf16                                              80 s
#   3 train_cuda_fp32    resnet20_cifar, se_resnet56_cifar, eager fp32: Lightning vs plain  60 s
#   4 train_cuda_fast    the same with bf16-mixed, channels_last, torch.compile        180 s
#   5 epoch_cuda         one real CIFAR-10 epoch per model, albumentations loader vs device
#                        augmentation (bf16, channels_last, eager), + loader throughput 70 s
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/gpu}
PY=${PYTHON:-python}
DATA_ROOT=${DATA_ROOT:-../shared/data}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
START=$(date +%s)

{
  echo "date: $(date -u +%FT%TZ)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
} > "$OUT/device.txt"
cat "$OUT/device.txt"

step() {  # step NAME LIMIT_S ARGS...
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s, t=$(( $(date +%s) - START ))s)"
  timeout --kill-after=5 "$limit" "$PY" "$@" --out "$OUT/$name.csv" > "$OUT/$name.md" 2> "$OUT/$name.log"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "!! $name: exit $rc (124 = over its ${limit}s limit); see $OUT/$name.log" | tee -a "$OUT/$name.md"
  fi
  grep -E "^- .*(MISSES|ok|faster|keeps up|BOTTLENECK)" "$OUT/$name.md" || true
}

step blocks_cuda_fp32 80 benchmarks/bench_blocks.py --device cuda --dtype fp32 \
  --repeats 11 --min-sample 0.01
step blocks_cuda_bf16 80 benchmarks/bench_blocks.py --device cuda --dtype bf16 \
  --repeats 11 --min-sample 0.01
step train_cuda_fp32 60 benchmarks/bench_train.py --device cuda --skip-data \
  --steps 30 --warmup 5 --rounds 2
step train_cuda_fast 180 benchmarks/bench_train.py --device cuda --skip-data \
  --precision bf16 --channels-last --compile --steps 30 --warmup 5 --rounds 2
if [ -d "$DATA_ROOT/cifar-10-batches-py" ]; then
  step epoch_cuda 70 benchmarks/bench_train.py --device cuda --skip-model --epoch \
    --precision bf16 --channels-last --data-root "$DATA_ROOT" --workers 2
else
  echo "== epoch_cuda skipped: no CIFAR-10 at $DATA_ROOT/cifar-10-batches-py (set DATA_ROOT)" \
    | tee "$OUT/epoch_cuda.md"
fi
echo "done in $(( $(date +%s) - START ))s; results in $OUT"
