#!/usr/bin/env bash
# CPU benchmark: tfbench's one-rank training step against PyTorch's CPU step at the same shapes and thread
# count: bert-mini and bert-base (batch 8, sequence 128, FP32, dropout 0.1, AdamW), resnet-tiny (batch 32, 32x32)
# and resnet50 (batch 2, 224x224, SGD); tfbench's MFU against its measured SGEMM peak; then tfbench's convolution
# (im2col + OpenBLAS) against PyTorch's (oneDNN) on ResNet-50 layer shapes. Installs Debian's python3-torch for
# the comparison only. Run from `make bench`, which also builds build/bench_conv.
# The step comparison runs ROUNDS rounds, tfbench and PyTorch alternating, and reports the median of the rounds'
# median step times with their range, so a noisy machine shows as a wide range rather than a wrong ratio.
# usage: scripts/bench-cpu.sh [STEPS] [ROUNDS]   (default 10 timed steps after 3 warm-up, 3 rounds)
set -eu
cd "$(dirname "$0")/.."
steps=${1:-10}
rounds=${2:-3}
warm=3
threads=$(nproc)
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "needs python3-torch: apt-get install -y python3-torch" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null
fi
# median and range of a list of numbers
summ() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f'{statistics.median(v):.1f} {min(v):.1f}-{max(v):.1f}')" "$@"; }
printf '%-12s %7s %22s %22s %7s %7s\n' model threads "tfbench ms (range)" "pytorch ms (range)" ratio mfu
for job in "bert-mini 8 128" "bert-base 8 128" "resnet-tiny 32 32" "resnet50 2 224"; do
    read -r model batch size <<<"$job"
    case $model in
    bert*) shape=(--seq-len "$size"); ref=scripts/torch_bert_step.py ;;
    *) shape=(--image-size "$size"); ref=scripts/torch_resnet_step.py ;;
    esac
    tf=() pt=() mfu=()
    out=$(mktemp --suffix=.json)
    for _ in $(seq "$rounds"); do
        build/tfbench --model "$model" --batch "$batch" "${shape[@]}" --steps "$steps" --warmup "$warm" \
            --threads "$threads" --progress off --output "$out" >/dev/null
        read -r t m < <(python3 -c "import json; r=json.load(open('$out'))['configurations'][0]['summary']; print(r['step_time_s']['median']*1e3, r['mfu']*100)")
        tf+=("$t") mfu+=("$m")
        pt+=("$(/usr/bin/python3 "$ref" "$model" "$batch" "$size" "$threads" "$steps" "$warm" 2>/dev/null | python3 -c "print(float(input())*1e3)")")
    done
    rm -f "$out"
    read -r tmed trange <<<"$(summ "${tf[@]}")"
    read -r pmed prange <<<"$(summ "${pt[@]}")"
    read -r mmed _ <<<"$(summ "${mfu[@]}")"
    printf '%-12s %7d %9s (%11s) %9s (%11s) %6.2fx %6.1f%%\n' "$model" "$threads" "$tmed" "$trange" "$pmed" "$prange" \
        "$(python3 -c "print($pmed/$tmed)")" "$mmed"
done
echo "medians of $rounds rounds (range over rounds); ratio = PyTorch / tfbench (above 1: tfbench faster);"
echo "MFU against tfbench's measured SGEMM peak"
echo
echo "convolution forward + backward-data + backward-filter, batch 2, median ms (ResNet-50 shapes)"
printf '%5s %4s %5s %-7s %10s %10s %7s\n' C H K kernel tfbench pytorch ratio
conv=$(mktemp)
build/bench_conv "$threads" >"$conv"   # first, alone on the cores; then PyTorch
/usr/bin/python3 scripts/torch_conv.py "$threads" <"$conv"
rm -f "$conv"
