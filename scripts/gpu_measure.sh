#!/usr/bin/env bash
# Full-size measurements for a CUDA GPU, written to results/<machine>/ for committing.
#
#   bash scripts/gpu_measure.sh results/h200 runs       # every workload, 32 and bf16-mixed (~5 min on an H200)
#   bash scripts/gpu_measure.sh results/h200 phase2     # the connectomics phase-2 ladder
#   bash scripts/gpu_measure.sh results/h200 resnet50   # the ImageNet guide's ladder
#   bash scripts/gpu_measure.sh results/h200 a100       # the A100 guide's situation and plan, data on disk
#   bash scripts/gpu_measure.sh results/h200 tests      # the gpu test tier
#
# One part per call keeps each under the lent GPU machine's 10-minute command limit. On that machine,
# first install the wheels of ../shared/device/wheels.sh (see its header) and set PYTHONPATH.
set -uo pipefail
out=${1:?usage: scripts/gpu_measure.sh RESULTS_DIR PART}
part=${2:?usage: scripts/gpu_measure.sh RESULTS_DIR runs|phase2|resnet50|a100|tests}
export PYTHONUNBUFFERED=1
case "$part" in
  runs)
    for w in unet3d basic_unet3d mednext resnet50; do
      for p in 32 bf16-mixed; do
        python -m harness run workload=$w precision=$p size=full results_dir="$out"
      done
    done ;;
  phase2) python -m harness sweep +ladder=phase2 results_dir="$out" ;;
  resnet50) python -m harness sweep +ladder=resnet50_aggressive results_dir="$out" ;;
  a100)
    python -m harness diagnose workload=basic_unet3d data=disk data.augment=heavy batch_size=1 data.num_workers=1 \
      data.prefetch_factor=1 'data.patch_size=[72,136,136]' results_dir="$out"
    python -m harness sweep +ladder=a100_volume data=disk data.augment=heavy results_dir="$out" ;;
  tests) python -m pytest -m gpu -q ;;
  *) echo "unknown part '$part': use runs, phase2, resnet50, a100 or tests" >&2; exit 2 ;;
esac
python -m harness table --results "$out" --sweep latest 2>/dev/null || true
