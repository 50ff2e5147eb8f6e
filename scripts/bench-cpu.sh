#!/usr/bin/env bash
# CPU benchmark: tfbench's one-rank BERT training step against PyTorch's CPU step at the same shapes (batch 8,
# sequence 128, FP32, dropout 0.1, AdamW) and thread count, for bert-mini and bert-base; then tfbench's MFU
# against its measured SGEMM peak. Installs Debian's python3-torch for the comparison only. Prints one table.
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
printf '%-10s %8s %16s %16s %8s %8s\n' model threads tfbench_ms pytorch_ms ratio mfu
for model in bert-mini bert-base; do
    out=$(mktemp --suffix=.json)
    build/tfbench --model "$model" --batch 8 --seq-len 128 --steps "$steps" --warmup "$warm" --threads "$threads" \
        --progress off --output "$out" >/dev/null
    read -r tf mfu < <(python3 -c "import json,sys; r=json.load(open('$out'))['summary']; print(r['step_time_s']['median']*1e3, r['mfu']*100)")
    pt=$(/usr/bin/python3 scripts/torch_bert_step.py "$model" 8 128 "$threads" "$steps" "$warm" 2>/dev/null)
    pt_ms=$(python3 -c "print($pt*1e3)")
    ratio=$(python3 -c "print(f'{$pt_ms/$tf:.2f}')")
    printf '%-10s %8d %16.1f %16.1f %8s %7.1f%%\n' "$model" "$threads" "$tf" "$pt_ms" "${ratio}x" "$mfu"
    rm -f "$out"
done
echo "ratio = PyTorch step time / tfbench step time (above 1: tfbench faster); MFU against tfbench's measured SGEMM peak"
