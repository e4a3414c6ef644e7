#!/usr/bin/env bash
# GPU benchmarks for one accelerator (sized for one H200): ends within 9 minutes, because every
# step has its own time limit (sum 530 s) and a step that runs over is stopped and reported.
#
#   bash benchmarks/gpu.sh [OUT_DIR]          # default OUT_DIR: benchmarks/results/gpu
#   bash benchmarks/gpu.sh --smoke [OUT_DIR]  # the same steps end to end on CPU, tiny (~2 min)
#
# Environment: PYTHON (default python) with visattn's dependencies; DATA_ROOT, the folder holding
# cifar-10-batches-py/ (default ../shared/data); without it the loader and real-epoch steps are
# skipped (the model-only epoch time is still extrapolated from images/s).
#
# Steps (each writes OUT_DIR/<step>.md with its tables and the machine, .csv, .log):
#   1 blocks_cuda_fp32   every block vs timm, fp32                                    80 s
#   2 blocks_cuda_bf16   the same in bf16                                              80 s
#   2b blocks_large_maps_cuda_bf16  mhsa, danet, a2, halo, lambda (+ routing/agent/area) at
#                        14x14-56x56, bf16: fused SDPA (flash / memory-efficient kernels) vs
#                        the previous math path vs timm, fwd+bwd time and peak memory    60 s
#   3 train_cuda_fp32    resnet20_cifar, se_resnet56_cifar, eager fp32: Lightning vs plain  60 s
#   4 train_cuda_fast    the same with bf16-mixed, channels_last, torch.compile        180 s
#   5 epoch_cuda         one real CIFAR-10 epoch per model, albumentations loader vs device
#                        augmentation (bf16, channels_last, eager), + loader throughput 70 s
#   6 reproduce          configs/ablations/cifar10_reproduce.yaml: 36 ResNet-20 runs, 12 at
#                        once on the GPU (JOBS, default 12), report + results.csv       600 s
#
# --smoke: device cpu, one block and one model in the benchmarks, and the reproduction sweep cut
# to 2 variants x 1 seed on 64 `shapes` images for 1 epoch (fp32, same augmentation path), so the
# whole script is checked without a GPU or CIFAR-10 (tests/ablate/test_executors.py runs it).
set -uo pipefail
cd "$(dirname "$0")/.."
SMOKE=0
if [ "${1:-}" = "--smoke" ]; then SMOKE=1; shift; fi
OUT=${1:-benchmarks/results/gpu}
JOBS=${JOBS:-12}
PY=${PYTHON:-python}
DATA_ROOT=${DATA_ROOT:-../shared/data}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
START=$(date +%s)

{
  echo "date: $(date -u +%FT%TZ)"
  [ "$SMOKE" = 1 ] && echo "smoke run on CPU (tiny): checks the script, measures nothing"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 \
    || echo "no nvidia-smi"
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

sweep() {  # sweep SWEEP_YAML LIMIT_S ARGS...: the reproduction sweep, bounded
  local file=$1 limit=$2
  shift 2
  echo "== reproduce (limit ${limit}s, t=$(( $(date +%s) - START ))s)"
  timeout --kill-after=10 "$limit" "$PY" -m visattn.ablate "$file" --out "$OUT/reproduce" "$@" \
    > "$OUT/reproduce.log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "!! reproduce: exit $rc (124 = over its ${limit}s limit); see $OUT/reproduce.log" \
      | tee -a "$OUT/reproduce.md"
  fi
  grep -E "finished in|FAILED" "$OUT/reproduce.log" || true
  [ -f "$OUT/reproduce/report.md" ] && cp "$OUT/reproduce/report.md" "$OUT/reproduce.md"
}

if [ "$SMOKE" = 1 ]; then
  "$PY" - "$OUT/smoke_sweep.yaml" <<'PYEOF'
import sys
import yaml
data = yaml.safe_load(open("configs/ablations/cifar10_reproduce.yaml"))
data["name"] = "cifar10_reproduce_smoke"
data["seeds"] = [0]
data["variants"] = [v for v in data["variants"] if v["name"] in ("resnet20_none", "resnet20_se")]
data["profile"] = {"device": "cpu", "batch": 4, "warmup": 0, "repeats": 1}
data["set"].update({
    "data.dataset": "shapes", "data.num_train": 64, "data.num_val": 32, "data.num_test": 32,
    "data.batch_size": 16, "data.num_workers": 0, "trainer.max_epochs": 1,
    "trainer.limit_train_batches": 2, "trainer.accelerator": "cpu", "trainer.precision": "32",
})
yaml.safe_dump(data, open(sys.argv[1], "w"), sort_keys=False)
PYEOF
  step blocks_cpu_smoke 120 benchmarks/bench_blocks.py --device cpu --blocks se --quick \
    --shapes 2x16x8x8 --no-gsop-reference --repeats 5 --min-sample 0.001
  step blocks_large_maps_cpu_smoke 60 benchmarks/bench_blocks.py --large-maps --quick \
    --device cpu --blocks mhsa --large-shape 1x16 --repeats 1 --warmup 0
  step train_cpu_smoke 120 benchmarks/bench_train.py --device cpu --skip-data --quick \
    --models resnet20_cifar --batch-size 8 --steps 1 --warmup 1 --rounds 1
  sweep "$OUT/smoke_sweep.yaml" 300 --jobs 2 --threads 1
  echo "smoke done in $(( $(date +%s) - START ))s; results in $OUT"
  exit 0
fi

step blocks_cuda_fp32 80 benchmarks/bench_blocks.py --device cuda --dtype fp32 \
  --repeats 11 --min-sample 0.01
step blocks_cuda_bf16 80 benchmarks/bench_blocks.py --device cuda --dtype bf16 \
  --repeats 11 --min-sample 0.01
step blocks_large_maps_cuda_bf16 60 benchmarks/bench_blocks.py --large-maps --device cuda \
  --dtype bf16 --repeats 11 --warmup 3
step train_cuda_fp32 60 benchmarks/bench_train.py --device cuda --skip-data \
  --steps 30 --warmup 5 --rounds 2
step train_cuda_fast 180 benchmarks/bench_train.py --device cuda --skip-data \
  --precision bf16 --channels-last --compile --steps 30 --warmup 5 --rounds 2
if [ -d "$DATA_ROOT/cifar-10-batches-py" ]; then
  step epoch_cuda 70 benchmarks/bench_train.py --device cuda --skip-model --epoch \
    --precision bf16 --channels-last --data-root "$DATA_ROOT" --workers 2
  sweep configs/ablations/cifar10_reproduce.yaml 600 --jobs "$JOBS" --runs-per-device "$JOBS" \
    --threads 1 --set "data.root=$DATA_ROOT" --set data.verify=false
else
  echo "== epoch_cuda and reproduce skipped: no CIFAR-10 at $DATA_ROOT/cifar-10-batches-py" \
    "(set DATA_ROOT)" | tee "$OUT/epoch_cuda.md" "$OUT/reproduce.md"
fi
echo "done in $(( $(date +%s) - START ))s; results in $OUT"
