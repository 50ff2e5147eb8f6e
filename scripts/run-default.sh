#!/usr/bin/env bash
# The main job of `make run` on this machine's default backend: with no GPU, the comparison run of bert-tiny on
# two ranks of the CPU backend (one rank, then data, tensor and pipeline parallelism on two; FP32, batch 8 per
# rank, 20 timed steps after 5 warm-up each), printing the table, writing a results file under results/runs/ and
# plotting it there (scripts/plot: throughput and efficiency against devices).
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
np=2
[ "$(nproc)" -lt 2 ] && np=1
mkdir -p results/runs
out="results/runs/tfbench-make-run-$(date -u +%Y%m%d-%H%M%S)-$$.json"
mpirun --oversubscribe -np "$np" build/tfbench --model bert-tiny --batch 8 --steps 20 --warmup 5 --output "$out" "$@"
echo "plots:"
scripts/plot "$out"
