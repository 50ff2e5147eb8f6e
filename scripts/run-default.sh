#!/usr/bin/env bash
# The main job of `make run` on this machine's default backend: with no GPU, the comparison run of bert-tiny on
# two ranks of the CPU backend (one rank, then data, tensor and pipeline parallelism on two; FP32, batch 8 per
# rank, 20 timed steps after 5 warm-up each); with GPUs and the CUDA backend built, the comparison run of
# bert-base in FP16 (batch 32 per GPU) on one rank per GPU (up to 8). It prints the table, writes a results file
# under results/runs/ and plots it there (scripts/plot: throughput and efficiency against devices).
set -eu
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
np=2
[ "$(nproc)" -lt 2 ] && np=1
job=(--model bert-tiny --batch 8 --steps 20 --warmup 5)
# With GPUs (and a tfbench built with CUDA): one rank per GPU, up to 8, and a job sized for them.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -ge 1 ] && grep -q '^CUDA_BACKEND := 1' build/config.mk 2>/dev/null; then
    np=$(( gpus < 8 ? gpus : 8 ))
    job=(--model bert-base --precision fp16 --batch 32 --steps 20 --warmup 5)
fi
mkdir -p results/runs
out="results/runs/tfbench-make-run-$(date -u +%Y%m%d-%H%M%S)-$$.json"
mpirun --oversubscribe -np "$np" build/tfbench "${job[@]}" --output "$out" "$@"
echo "plots:"
scripts/plot "$out"
