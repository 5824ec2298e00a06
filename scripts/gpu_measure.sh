#!/usr/bin/env bash
# Full-size measurements on a CUDA GPU, one PART per command, so that each fits a lent GPU machine's
# 10-minute command and what it measured comes back from the folder that machine returns ($OUT).
#
#   bash scripts/gpu_measure.sh PART [OUT_DIR]        # OUT_DIR defaults to $OUT
#   bash scripts/gpu_measure.sh list                  # the parts
#
# Each part writes OUT_DIR/PART.tar.gz (the records under results/runs/, the part's log and its table), and
# nothing else is left in OUT_DIR unless KEEP=1. Untar every part's file into one folder (e.g. results/h100/)
# to commit them together; ladder rungs measured one per command share one sweep id (LADDER-gpu), so
# `python -m harness table --results results/h100 --sweep resnet50_aggressive-gpu` shows the whole ladder.
#
# Environment: PYTHON (default python3: fresh GPU images often have no `python`), DRY_RUN=1 (print the
# commands, run nothing), RESULTS_FROM=FILE.tar.gz|RESULTS_DIR (records of earlier parts: later rungs then build on
# the last ok rung and reuse measured ones, as one sweep would), KEEP=1 (keep the unpacked folder).
# Exit status: 0 when every command and record of the part is fine, 1 when a command failed or a record
# ended error/timeout/nan/oom (the tar.gz is written either way), 2 for a usage mistake.
set -uo pipefail

PY=${PYTHON:-python3}
DRY=${DRY_RUN:-0}
PARTS="env runs-unet3d runs-basic_unet3d runs-mednext runs-resnet50 phase2 scaling resnet50-0..7 detr-0..7 a100-diagnose \
a100-0..6 tests tests-slow"
usage() {
  echo "usage: scripts/gpu_measure.sh PART [OUT_DIR]   (OUT_DIR defaults to \$OUT)" >&2
  echo "parts: $PARTS" >&2
  exit 2
}

part=${1:-}
[ -n "$part" ] || usage
if [ "$part" = list ]; then echo "$PARTS"; exit 0; fi
outdir=${2:-${OUT:-}}
if [ -z "$outdir" ]; then echo "no output folder: give OUT_DIR or set \$OUT" >&2; usage; fi

case "$part" in
  env | tests | tests-slow | phase2 | scaling | a100-diagnose) ;;
  runs-unet3d | runs-basic_unet3d | runs-mednext | runs-resnet50) ;;
  resnet50-[0-7] | detr-[0-7] | a100-[0-6]) ;;
  *) echo "unknown part '$part'" >&2; usage ;;
esac

outdir=$(realpath -m "$outdir")  # absolute: the commands run from the repository root
[ -z "${RESULTS_FROM:-}" ] || RESULTS_FROM=$(realpath -m "$RESULTS_FROM")
cd "$(dirname "$0")/.." || exit 2
work="$outdir/$part"
results="$work/results"
log="$work/$part.log"
status=0

run() {  # print a command, and run it unless DRY_RUN=1; a failure marks the part failed and goes on
  echo "+ $*"
  [ "$DRY" = 1 ] && return 0
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then echo "exit $rc: $*" | tee -a "$log"; status=1; fi
  return 0
}

rung() {  # LADDER RUNG TIMEOUT_S [key=value ...]: one rung of a ladder into the sweep LADDER-gpu
  local ladder=$1 index=$2 limit=$3
  shift 3
  run "$PY" scripts/gpu_part.py rung "$ladder" "$index" "${SWEEP_ID:-$ladder-gpu}" results_dir="$results" \
    timeout_s="$limit" "$@"
}

if [ "$DRY" != 1 ]; then
  mkdir -p "$results/runs" || exit 2
  : > "$log"
  if [ -n "${RESULTS_FROM:-}" ]; then  # earlier parts' records: a ladder's later rungs see earlier ones
    from=$RESULTS_FROM
    if [ ! -d "$from" ]; then  # a part's tar.gz: its records are under results/runs/
      from=$(mktemp -d) && tar -xzf "$RESULTS_FROM" -C "$from" && from="$from/results" || status=1
    fi
    cp -n "$from"/runs/*.parquet "$results/runs/" || status=1
  fi
  ls "$results/runs" > "$work/before.txt"
fi
export PYTHONUNBUFFERED=1

# Per-run limits (timeout_s): below the 10-minute command limit with room for start-up, dataset writing and
# packing; a part with several runs gives each a share of it.

case "$part" in
  env)
    run "$PY" -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, \
torch.cuda.is_available() and torch.cuda.get_device_name(0))"
    run nvidia-smi ;;
  runs-*)
    w=${part#runs-}
    for p in 32 bf16-mixed; do
      run "$PY" -m harness run workload="$w" precision="$p" size=full timeout_s=240 results_dir="$results"
    done ;;
  phase2) run "$PY" -m harness sweep +ladder=phase2 timeout_s=120 results_dir="$results" ;;
  scaling)
    # ResNet-50 on 1, 2, 4, 8 GPUs (DDP over NCCL, batch 256 per GPU): rungs beyond the GPUs here are skipped.
    run "$PY" -m harness sweep +ladder=scaling timeout_s=120 results_dir="$results" ;;
  resnet50-*)
    # One rung per command: max-autotune compiles ResNet-50 at batch 384, which alone takes minutes.
    rung resnet50_aggressive "${part#resnet50-}" 500 ;;
  detr-*) rung detr_fast "${part#detr-}" 500 ;;
  a100-diagnose)
    # The A100 guide's situation (NIfTI from disk, heavy 3D augmentation, one worker), fewer steps: with one
    # worker each step waits seconds for data, and the 60 default steps times three runs do not fit.
    run "$PY" -m harness diagnose workload=basic_unet3d data=disk data.augment=heavy batch_size=1 \
      data.num_workers=1 data.prefetch_factor=1 'data.patch_size=[72,136,136]' data.num_items=8 \
      measure.warmup_steps=2 measure.steps=12 timeout_s=160 results_dir="$results" ;;
  a100-*)
    rung a100_volume "${part#a100-}" 480 data.source=disk data.cache=none data.augment=heavy data.num_items=8 \
      measure.warmup_steps=2 measure.steps=15 ;;
  tests)  # the gpu tier without its slow checks (~5 runs)
    run "$PY" -m pytest -m "gpu and not slow" -q -p no:cacheprovider --junitxml="$work/gpu-tests.xml" \
      tests/test_gpu.py ;;
  tests-slow)  # CUDA-graph compile and two hang faults (each killed at its 60 s timeout)
    run "$PY" -m pytest -m "gpu and slow" -q -p no:cacheprovider --junitxml="$work/gpu-tests-slow.xml" \
      tests/test_gpu.py ;;
esac

if [ "$DRY" = 1 ]; then
  echo "+ $PY scripts/gpu_part.py check $results $work/before.txt"
  echo "+ tar -czf $outdir/$part.tar.gz -C $work ."
  exit 0
fi
if [ "$part" != env ] && [ "${part%-slow}" != tests ]; then
  "$PY" scripts/gpu_part.py check "$results" "$work/before.txt" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  "$PY" -m harness table --results "$results" --sweep latest > "$work/table.md" 2>&1
fi
rm -f "$work/before.txt"
if tar -czf "$outdir/$part.tar.gz" -C "$work" .; then
  [ "${KEEP:-0}" = 1 ] || rm -rf "$work"
  echo "wrote $outdir/$part.tar.gz (status $status)"
else
  echo "could not write $outdir/$part.tar.gz" >&2
  status=1
fi
exit "$status"
