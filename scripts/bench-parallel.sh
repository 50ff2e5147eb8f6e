#!/usr/bin/env bash
# Parallelism benchmark on this machine's CPU backend with 2 ranks: the comparison table (one rank, then data,
# tensor and pipeline parallelism on two) for bert-mini and resnet-tiny, and the measured pipeline bubble on
# 2 stages against the ideal (P - 1) / (M + P - 1) for M = 1, 2, 4, 8 micro-batches under both schedules.
# The stages are where the FLOP-balanced partition cuts each model (printed per stage): an imbalance between
# the two stages shows as bubble beyond the ideal.
# usage: scripts/bench-parallel.sh [STEPS]   (default 10 timed steps after 3 warm-up)
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
steps=${1:-10}
run() { mpirun --oversubscribe -np 2 build/tfbench --progress off --steps "$steps" --warmup 3 "$@"; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "== comparison: bert-mini, batch 8 per rank, seq 128"
run --model bert-mini --batch 8 --output "$out/bert.json" 2>/dev/null | grep -v '^results:'
echo
echo "== comparison: resnet-tiny, batch 32 per rank, 32x32"
run --model resnet-tiny --batch 32 --output "$out/resnet.json" 2>/dev/null | grep -v '^results:'
echo
echo "== pipeline bubble on 2 stages: measured (mean of the stages' median share of the step blocked in transfers)"
printf '%-12s %-6s %3s %10s %10s %12s %s\n' model sched M measured predicted samples/s "stage units"
for model in bert-mini resnet-tiny; do
    for sched in gpipe 1f1b; do
        for m in 1 2 4 8; do
            f="$out/$model-$sched-$m.json"
            run --model "$model" --parallel pipeline --scaling strong --batch 16 --microbatches "$m" --schedule "$sched" \
                --seq-len 64 --output "$f" >/dev/null 2>&1
            python3 - "$f" "$model" "$sched" "$m" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["configurations"][0]
p, s = c["pipeline"], c["summary"]
units = " | ".join(st["units"] for st in p["stages"])
print(f"{sys.argv[2]:<12} {sys.argv[3]:<6} {sys.argv[4]:>3} {100 * s['step_shares']['pipeline_bubble']:>9.1f}% "
      f"{100 * p['bubble_predicted']:>9.1f}% {s['throughput_samples_per_s']:>12.2f} {units}")
PY
        done
    done
done
