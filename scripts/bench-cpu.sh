#!/usr/bin/env bash
# CPU benchmark: tfbench's one-rank training step against PyTorch's CPU step at the same shapes and thread
# count: bert-mini and bert-base (batch 8, sequence 128, FP32, dropout 0.1, AdamW), resnet-tiny (batch 32, 32x32)
# and resnet50 (batch 2, 224x224, SGD); tfbench's MFU against its measured SGEMM peak; then tfbench's convolution
# (im2col + OpenBLAS) against PyTorch's (oneDNN) on ResNet-50 layer shapes. Installs Debian's python3-torch for
# the comparison only. Run from `make bench`, which also builds build/bench_conv.
# usage: scripts/bench-cpu.sh [STEPS]   (default 10 timed steps after 3 warm-up)
set -eu
cd "$(dirname "$0")/.."
steps=${1:-10}
warm=3
threads=$(nproc)
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || { echo "needs python3-torch: apt-get install -y python3-torch" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null
fi
printf '%-12s %8s %16s %16s %8s %8s\n' model threads tfbench_ms pytorch_ms ratio mfu
for job in "bert-mini 8 128" "bert-base 8 128" "resnet-tiny 32 32" "resnet50 2 224"; do
    read -r model batch size <<<"$job"
    out=$(mktemp --suffix=.json)
    case $model in
    bert*) shape=(--seq-len "$size"); ref=scripts/torch_bert_step.py ;;
    *) shape=(--image-size "$size"); ref=scripts/torch_resnet_step.py ;;
    esac
    build/tfbench --model "$model" --batch "$batch" "${shape[@]}" --steps "$steps" --warmup "$warm" \
        --threads "$threads" --progress off --output "$out" >/dev/null
    read -r tf mfu < <(python3 -c "import json,sys; r=json.load(open('$out'))['summary']; print(r['step_time_s']['median']*1e3, r['mfu']*100)")
    pt=$(/usr/bin/python3 "$ref" "$model" "$batch" "$size" "$threads" "$steps" "$warm" 2>/dev/null)
    pt_ms=$(python3 -c "print($pt*1e3)")
    ratio=$(python3 -c "print(f'{$pt_ms/$tf:.2f}')")
    printf '%-12s %8d %16.1f %16.1f %8s %7.1f%%\n' "$model" "$threads" "$tf" "$pt_ms" "${ratio}x" "$mfu"
    rm -f "$out"
done
echo "ratio = PyTorch step time / tfbench step time (above 1: tfbench faster); MFU against tfbench's measured SGEMM peak"
echo
echo "convolution forward + backward-data + backward-filter, batch 2, median ms (ResNet-50 shapes)"
printf '%5s %4s %5s %-7s %10s %10s %7s\n' C H K kernel tfbench pytorch ratio
conv=$(mktemp)
build/bench_conv "$threads" >"$conv"   # first, alone on the cores; then PyTorch
/usr/bin/python3 scripts/torch_conv.py "$threads" <"$conv"
rm -f "$conv"
