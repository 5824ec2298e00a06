#!/usr/bin/env bash
# The GPU campaign: full-size measurements in parts that each fit one command of a lent GPU machine (10 minutes;
# only files of at most 16 MiB written under $OUT come back). The parts, their order and estimates are in
# scripts/gpu_parts.py; which are measured on each GPU kind is results/<gpu>/plan.json (PLAN.md for people).
# A slot starts with `headline`, then `next` while time is left.
#
# On the GPU machine (from the repository root, $OUT set):
#   bash scripts/gpu_measure.sh headline               # phase2 as the README runs it, decided, + compile/TF32 and
#                                                      # forked-sweep guards + env: one command of <= 9 minutes
#   bash scripts/gpu_measure.sh next                   # the first pending parts of this GPU's plan that fit one command
#   bash scripts/gpu_measure.sh batch P1 P2 ...        # these parts, in order, while they fit (~540 s by estimate)
#   bash scripts/gpu_measure.sh PART [OUT_DIR]         # one part
# Here, after a slot:
#   bash scripts/gpu_measure.sh record FOLDER|PART.tar.gz|PART ...   # into results/<gpu>/, plan.json and PLAN.md
# Anywhere:
#   bash scripts/gpu_measure.sh list                   # every part, in priority order, with its estimate
#   bash scripts/gpu_measure.sh dry-run [PART ...|all|next]   # each part's commands; nothing runs
#   bash scripts/gpu_measure.sh plan [GPU ...]         # render results/<gpu>/PLAN.md again (h100 and h200)
#   bash scripts/gpu_measure.sh pin [COMMIT]           # the commit the campaign's parts measure (default HEAD)
#   DRY_RUN=1 GPU=h100 bash scripts/gpu_measure.sh headline   # the one command a slot is given, and its estimate
#
# Each part writes $OUT/PART.tar.gz: its new records under results/runs/, its log, table and stamp.json (what ran,
# when, at which commit and code fingerprint). Runs and their datasets live in $SCRATCH (default /tmp/harness-gpu),
# never under $OUT. A part still running 550 s after the command began (or at the machine's lease, LEASE_S, less
# 45 s) is stopped, and what it measured is packed; with LEASE_S no part starts that cannot finish by estimate.
# Environment: PYTHON (default python3: fresh GPU images often have no `python`), GPU (the plan to follow; default:
# the kind nvidia-smi names), DRIVER_PYTHON (this driver's, default $PYTHON), SCRATCH, RESULTS_FROM=FILE.tar.gz or
# RESULTS_DIR (more earlier records to build on), TIMEOUT_S (each run's limit instead of the part's: on a slower
# machine), DRY_RUN=1 (as dry-run), KEEP=1 (keep the packed folders), IN (record: where the PART.tar.gz are),
# GIT_COMMIT (the commit this copy is at, where it has no git: the headline's printed command sets it), LEASE_S (the
# machine's seconds left when the command begins: LEASE_S=420 bash scripts/gpu_measure.sh next).
# Exit status: 0 when every part that ran ended ok, 1 when a command failed, a record ended error/timeout/nan/oom or
# a compile failure was skipped, or a part was stopped or could not be packed, 2 for a usage mistake.
set -uo pipefail

PY=${DRIVER_PYTHON:-${PYTHON:-python3}}  # the driver's own interpreter; the parts' commands use $PYTHON
cd "$(dirname "$0")/.." || exit 2
case "${1:-}" in
  "" | -h | --help)
    sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
  list | plan | pin | record | dry-run | next | headline) exec "$PY" scripts/gpu_campaign.py "$@" ;;
  batch) shift; [ $# -gt 0 ] || { echo "usage: scripts/gpu_measure.sh batch PART [PART ...]" >&2; exit 2; }
    exec "$PY" scripts/gpu_campaign.py run "$@" ;;
  *)
    [ $# -le 2 ] || { echo "usage: scripts/gpu_measure.sh PART [OUT_DIR]; several parts: batch P1 P2 ..." >&2; exit 2; }
    if [ $# -eq 2 ]; then export OUT=$2; fi
    exec "$PY" scripts/gpu_campaign.py run "$1" ;;
esac
