#!/usr/bin/env bash
# The CUDA backend's checks on a machine with a GPU (`make gpu-check`), in one call of about five minutes:
#   1. builds for this GPU's architecture (CUDA_ARCHS, default the compute capability nvidia-smi reports);
#   2. build/tests/gpu_check: every op against the CPU backend on fresh random inputs, outputs poisoned first;
#   3. whole training steps: bert-tiny (unfused attention, and fused in FP16/BF16: --attention fused, the CPU's
#      reference op on the CPU side) and resnet-tiny (NCHW and NHWC, the same layout on both sides; ResNet at
#      lr 0.01, where its random-label trajectory stays smooth), 10 steps on the GPU and on the CPU backend from the
#      same seed, the per-step losses compared (FP32 1e-5, TF32 5e-3, FP16/BF16 2e-2 relative); each row is
#      printed as it completes, so a run cut off still shows what it reached; with two or more GPUs
#      also bert-tiny tensor and pipeline parallel on two ranks against the CPU backend on two ranks, and
#      `tfbench links --device cuda` on two ranks (NCCL collectives on GPU buffers, every result checked), and a
#      tensor-parallel run whose second rank stalls at step 3 (--inject-hang: the job must end, rank 0's watchdog
#      naming the all-reduce its GPU has not finished); then
#      whether bert-tiny and resnet-tiny in FP16 repeat their losses bit for bit over two runs (a diagnostic);
#   4. a short benchmark on one GPU: bert-large (batch 32, sequence 128) and resnet50 (batch 256) in FP32, TF32 and
#      FP16 (resnet50's FP16 in NHWC, the default on a GPU, and in NCHW beside it; bert-large's FP16 also with
#      --attention fused), samples/s and MFU, and the allocator's measured peak beside the planned memory (what `tfbench
#      estimate` predicts): the peak must lie between the plan and the plan plus the 1 GiB the estimate reserves
#      for cuDNN workspaces and staging, with the median forward, backward and optimizer phases (where a slow step's
#      time went). When python3 has PyTorch with CUDA, the same step in PyTorch beside it
#      (scripts/torch_*_step.py: eager, FP16 as AMP, resnet50's FP16 channels-last) and the ratio; the issue's goals
#      read off those rows (bert-large FP16 at 40% MFU and at least PyTorch's speed; resnet50 FP16 at least
#      PyTorch's). GPU_CHECK_TORCH=0 leaves PyTorch out;
#   5. the kernel profile of the two FP16 runs (TFB_KERNEL_PROFILE=15: the 15 largest kernels by GPU time, from
#      CUPTI), a diagnostic that never fails the check (GPU_CHECK_PROFILE=0 leaves it out);
#   6. build/bench_fused: each fused op of the BERT layer against the separate ops it replaces, and each 16-bit
#      GEMM result or gradient with its reader against the FP32 form it replaced, at bert-large's layer shapes
#      (batch 32, FP16; batch 1 when the CPU stands in), microseconds per call and GB/s, so a run says whether
#      each change paid on this GPU. It fails the check only if an op fails;
#   7. compute-sanitizer's memcheck, racecheck and synccheck over tfbench's own kernels (gpu_check --only),
#      each under a time limit, after the table (GPU_CHECK_SANITIZE=0 leaves them out).
# Ends with one compact table; logs and results files go to $OUT (default build/gpu-check). Exit 0 when every check
# passed, 1 otherwise, 2 when there is no usable GPU. Needs what `make` needs (MPI, OpenBLAS, cJSON, hwloc, CUDA).
# GPU_CHECK_DEVICE=cpu runs the whole script with the CPU backend standing in for the GPU (to check the script
# itself), GPU_CHECK_STEPS the step comparisons' models (default "bert-tiny bert-tiny:fused resnet-tiny:nchw
# resnet-tiny:nhwc") and
# GPU_CHECK_BENCH the benchmark's (default "bert-large resnet50"; none: no benchmark).
# On a machine without a package registry: DEBS=DIR names the packages `scripts/offline-deps.sh fetch` saved, used
# when mpicc is missing; cuDNN and NCCL are taken from Python's nvidia-cudnn/nvidia-nccl packages when the toolkit
# has neither (CUDNN_HOME and NCCL_HOME name other places).
set -u
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-build/gpu-check}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

# MPI, OpenBLAS, cJSON and hwloc unpacked from DEBS when this machine lacks them.
if ! mpicc --version >/dev/null 2>&1 && [ -n "${DEBS:-}" ]; then
    scripts/offline-deps.sh unpack "$DEBS" build/deps >"$out/deps.log" 2>&1 || { cat "$out/deps.log"; exit 1; }
    # shellcheck disable=SC1091
    . build/deps/env.sh
fi

# A library the toolkit lacks, from a Python package: build/ext/NAME gets include/ and lib/ (with the unversioned
# name the linker needs) pointing into it, VAR (CUDNN_HOME, NCCL_HOME) names that folder, and the package's own
# folder joins LD_LIBRARY_PATH (cuDNN loads its parts from there).
use_python_lib() { # name (cudnn, nccl) library (libcudnn) VAR
    local pkg home=build/ext/$1 f roots
    roots=$(python3 -c "import nvidia; print(' '.join(nvidia.__path__))" 2>/dev/null) || return 1
    # shellcheck disable=SC2086
    f=$(find $roots -maxdepth 4 -name "$1.h" -path '*/include/*' 2>/dev/null | head -1)
    [ -n "$f" ] || return 1
    pkg=$(realpath "$(dirname "$f")/..")
    [ -d "$pkg/lib" ] || return 1
    mkdir -p "$home/lib"
    ln -sfn "$pkg/include" "$home/include"
    for f in "$pkg/lib/$2".so*; do ln -sf "$f" "$home/lib/$(basename "$f")"; done
    f=$(find "$pkg/lib" -maxdepth 1 -name "$2.so.*" | sort | head -1)
    [ -n "$f" ] && [ ! -e "$home/lib/$2.so" ] && ln -sf "$f" "$home/lib/$2.so"
    export LD_LIBRARY_PATH="$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export "$3=$(realpath "$home")"
}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
[ -z "${CUDNN_HOME:-}" ] && [ ! -f "$cuda_home/include/cudnn.h" ] && use_python_lib cudnn libcudnn CUDNN_HOME
[ -z "${NCCL_HOME:-}" ] && [ ! -f "$cuda_home/include/nccl.h" ] && use_python_lib nccl libnccl NCCL_HOME
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "gpu-check: GPU ${gpu:-none (no nvidia-smi)}; mpicc $(command -v mpicc || echo missing);" \
    "cuDNN ${CUDNN_HOME:-in $cuda_home}; NCCL ${NCCL_HOME:-in $cuda_home}"
arch=${CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')}
start=$(date +%s)
if ! make --no-print-directory CUDA_ARCHS="${arch:-90}" -j"$(nproc)" all build/bench_fused >"$out/build.log" 2>&1; then
    tail -30 "$out/build.log"
    echo "gpu-check: the build failed (log: $out/build.log)"
    exit 1
fi
grep -E '^  [✓✗]' "$out/build.log" | sort -u
dev=${GPU_CHECK_DEVICE:-cuda}
build/tests/gpu_check --device "$dev" | tee "$out/ops.txt"
ops=${PIPESTATUS[0]}
[ "$ops" = 2 ] && exit 2
echo "gpu-check: ops done in $(( $(date +%s) - start )) s"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
run() { # device model precision steps warmup output [extra options]; RANKS=n runs n ranks
    local dev=$1 model=$2 prec=$3 steps=$4 warm=$5 json=$6 launch=()
    shift 6
    [ "${RANKS:-1}" -gt 1 ] && launch=(mpirun -np "$RANKS" --oversubscribe)
    # --timeout 120: a run that hangs costs two minutes of the call, not the default five, and the rows after it run
    "${launch[@]}" build/tfbench --device "$dev" --model "$model" --precision "$prec" --steps "$steps" \
        --warmup "$warm" --progress off --timeout 120 --output "$json" "$@" >"${json%.json}.log" 2>&1
}

# layouts: one GPU, and with two or more GPUs tensor and pipeline parallel on two ranks (bert-tiny)
layouts=("1 data")
[ "${gpus:-0}" -ge 2 ] && layouts+=("2 tensor" "2 pipeline")
steps_rows=()
status=0
for layout in "${layouts[@]}"; do
  ranks=${layout% *} par=${layout#* }
  for model in ${GPU_CHECK_STEPS:-bert-tiny bert-tiny:fused resnet-tiny:nchw resnet-tiny:nhwc}; do # MODEL[:variant]
    name=${model%%:*} extra=() precs="fp32 tf32 fp16 bf16"
    case $model in
    *:fused) extra=(--attention fused) precs="fp16 bf16" ;; # the CUDA kernels are 16-bit (tensor cores)
    *:*) extra=(--conv-layout "${model#*:}") ;;
    esac
    # ResNet at lr 0.01, not its default 0.1: at 0.1 the random-label trajectory turns chaotic after about six
    # steps and amplifies FP32 rounding differences (1e-7) a hundredfold by step ten (seen on an H200)
    [ "$name" = resnet-tiny ] && extra+=(--lr 0.01)
    [ "$par" != data ] && [ "$name" = resnet-tiny ] && continue
    for prec in $precs; do
        base="$out/steps-${model/:/-}-$prec-$par$ranks"
        RANKS=$ranks run "$dev" "$name" "$prec" 10 0 "$base-cuda.json" --peak-tflops 1 --parallel "$par" "${extra[@]}"
        rc_gpu=$?
        RANKS=$ranks run cpu "$name" "$prec" 10 0 "$base-cpu.json" --peak-tflops 1 --parallel "$par" "${extra[@]}"
        rc_cpu=$?
        row=$(python3 - "$base-cpu.json" "$base-cuda.json" "$prec" "$rc_cpu" "$rc_gpu" <<'EOF'
import json, math, sys
cpu, gpu, prec, rc_cpu, rc_gpu = sys.argv[1:]
tol = {"fp32": 1e-5, "tf32": 5e-3, "fp16": 2e-2, "bf16": 2e-2}[prec]
if rc_cpu != "0" or rc_gpu != "0":
    print(f"exit cpu {rc_cpu} gpu {rc_gpu} | - | {tol:.0e} | FAIL")
    sys.exit()
def losses(path):
    return json.load(open(path))["configurations"][0]["per_step"]["loss_all_steps_including_warmup"]
a, b = losses(cpu), losses(gpu)
err = max(abs(x - y) / max(abs(x), 1e-30) if not (math.isnan(x) or math.isnan(y)) else math.inf for x, y in zip(a, b))
ok = len(a) == len(b) == 10 and err <= tol
print(f"{a[-1]:.6f} vs {b[-1]:.6f} | {err:.3g} | {tol:.0e} | {'PASS' if ok else 'FAIL'}")
EOF
)
        steps_rows+=("| $model $par x$ranks | $prec | $row |")
        echo "gpu-check: $(( $(date +%s) - start )) s ${steps_rows[-1]}" # as it completes, should the call be cut off
        case $row in *FAIL*) status=1 ;; esac
    done
  done
done
echo "gpu-check: training steps done in $(( $(date +%s) - start )) s"

# Whether a run repeats itself bit for bit: each model in FP16 twice from the same seed, the per-step losses compared
# exactly. A diagnostic that never fails the check (bert-tiny is expected to repeat: every reduction in its step
# adds in a fixed order; cuDNN's search may pick a non-deterministic algorithm for resnet-tiny); it says where
# repeatability stands on this GPU.
repeat_rows=()
for model in bert-tiny resnet-tiny; do
    extra=()
    [ "$model" = resnet-tiny ] && extra=(--lr 0.01)
    for k in 1 2; do
        run "$dev" "$model" fp16 10 0 "$out/repeat-$model-$k.json" --peak-tflops 1 --parallel data "${extra[@]}"
    done
    repeat_rows+=("| repeatable: $model fp16, 10 steps, two runs | $(python3 - "$out/repeat-$model-1.json" \
        "$out/repeat-$model-2.json" <<'EOF'
import json, sys
try:
    a, b = ([float(x).hex() for x in json.load(open(p))["configurations"][0]["per_step"]
             ["loss_all_steps_including_warmup"]] for p in sys.argv[1:])
except (OSError, ValueError, KeyError, IndexError):
    print("a run failed |")
    sys.exit()
diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
print("yes: every loss the same bits |" if not diff and len(a) == len(b) == 10 else
      f"no: from step {diff[0] if diff else min(len(a), len(b))} on |")
EOF
)")
done

# with two or more GPUs: the NCCL communicator's collectives on GPU buffers, checked on exact data (#wrong)
links_row=""
if [ "${gpus:-0}" -ge 2 ] && [ "$dev" = cuda ]; then
    mpirun -np 2 --oversubscribe build/tfbench links --device cuda -e 64M -n 5 --output "$out/links.json" \
        >"$out/links.log" 2>&1
    links_row=$(python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))['collectives']
big = [x for x in r if x['size_bytes'] == max(y['size_bytes'] for y in r)]
print('links (NCCL, 2 GPUs): wrong elements', sum(x['wrong'] for x in r), '|', ', '.join(f\"{x['op']} {x['busbw_gb_s']:.0f} GB/s\" for x in big))
" "$out/links.json" 2>/dev/null) || { links_row="links (NCCL, 2 GPUs): FAIL, see $out/links.log"; status=1; }
    case $links_row in *"wrong elements 0 "*) ;; *) status=1 ;; esac
    # a peer that stalls at step 3 of a tensor-parallel run: the job must end (exit non-zero, no results file) with
    # rank 0's watchdog naming the all-reduce its GPU has not finished; where it is (expected: queued on the device,
    # as NCCL returns once it has queued; the host still inside the NCCL call where NCCL blocks) is shown in the row
    rm -f "$out/hang.json"
    timeout 120 mpirun -np 2 --oversubscribe build/tfbench --device cuda --model bert-tiny --parallel tensor \
        --steps 6 --warmup 0 --peak-tflops 1 --progress off --inject-hang 3 --timeout 20 --output "$out/hang.json" \
        >"$out/hang.log" 2>&1
    hang_rc=$?
    hang_named=$(grep -o 'rank 0\]: the device has not finished: all-reduce, operation [0-9]* [^;]*' "$out/hang.log" |
        head -1)
    # 124: the watchdog's exit, and timeout's (which leaves nothing named)
    if [ "$hang_rc" != 0 ] && [ ! -e "$out/hang.json" ] && [ -n "$hang_named" ]; then
        links_row+=$'\n'"| hung peer (2 GPUs, --inject-hang 3): ended, exit $hang_rc"
        links_row+=" | ${hang_named#*finished: } | PASS |"
    else
        links_row+=$'\n'"| hung peer (2 GPUs, --inject-hang 3): exit $hang_rc | ${hang_named:-nothing named}, see"
        links_row+=" $out/hang.log | FAIL |"
        status=1
    fi
fi

# PyTorch's samples/s for the same step (empty when PyTorch or its GPU is missing, or the reference failed)
torch_ok=0
[ "${GPU_CHECK_TORCH:-1}" != 0 ] && [ "$dev" = cuda ] &&
    python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && torch_ok=1
rm -f "$out"/torch-*.rate
torch_rate() { # model batch size precision: measured once per model and precision, then read back
    local script=scripts/torch_bert_step.py t cache="$out/torch-$1-$4.rate"
    [ $torch_ok = 1 ] && [ -n "$2" ] || return 0
    [ -s "$cache" ] && { cat "$cache"; return 0; }
    case $1 in resnet*) script=scripts/torch_resnet_step.py ;; esac
    t=$(python3 "$script" "$1" "$2" "$3" 1 20 5 "cuda:$4" 2>"$out/torch-$1-$4.log" | tail -1) || return 0
    python3 -c "import sys; print(f'{int(sys.argv[1]) / float(sys.argv[2]):.1f}')" "$2" "$t" 2>/dev/null |
        tee "$cache"
}

# The goals' shapes (batch, size, options); another model runs at its defaults, without PyTorch beside it.
goal_shape() {
    case $1 in
    resnet50) batch=256 size=224 shape="--batch 256" ;;
    bert-large) batch=32 size=128 shape="--batch 32 --seq-len 128" ;;
    *) batch="" size="" shape="" ;;
    esac
}

bench_rows=()
bench_models=${GPU_CHECK_BENCH:-bert-large resnet50}
[ "$bench_models" = none ] && bench_models=""
for model in $bench_models; do
    goal_shape "$model"
    variants="fp32 tf32 fp16"
    case $model in
    resnet*) variants="$variants fp16:nchw" ;; # FP16 runs NHWC on a GPU; NCHW for comparison
    bert*) variants="$variants fp16:fused" ;;  # the fused attention kernels beside the unfused default
    esac
    for variant in $variants; do
        prec=${variant%%:*} extra=()
        case $variant in
        *:fused) extra=(--attention fused) ;;
        *:*) extra=(--conv-layout "${variant#*:}") ;;
        esac
        json="$out/bench-$model-${variant/:/-}.json"
        # shellcheck disable=SC2086
        if run "$dev" "$model" "$prec" 20 5 "$json" --parallel data $shape "${extra[@]}"; then
            bench_rows+=("| $model | $variant | $(python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))['configurations'][0]
s = c['summary']
g = c['config']
peak, plan = g['memory_peak_bytes_per_rank'], g['memory_planned_bytes_per_rank']
fits = plan <= peak <= plan + 2**30  # the plan, plus what the estimate reserves for library workspaces
ours, torch = s['throughput_samples_per_s'], float(sys.argv[2]) if sys.argv[2] else None
vs = f'{torch:.1f} | {ours / torch:.2f}x' if torch else '- | -'
ps = c['per_step']
ms = lambda k: sorted(ps[k])[len(ps[k]) // 2] * 1e3  # median phase, where a slow step's time went
print(f\"{g['global_batch']} | {ours:.1f} | {100 * s['mfu']:.1f}% | {vs} | \"
      f\"{ms('forward'):.2f} / {ms('backward'):.2f} / {ms('optimizer'):.2f} | \"
      f\"{peak / 2**30:.2f} / {plan / 2**30:.2f} {'ok' if fits else 'FAIL'} | {s['peak_source']}\")" \
                "$json" "$(torch_rate "$model" "$batch" "$size" "$prec")") |")
            case ${bench_rows[-1]} in *FAIL*) status=1 ;; esac
        else
            bench_rows+=("| $model | $variant | - | failed: $(tail -1 "${json%.json}.log") | | | | | | |")
            status=1
        fi
        echo "gpu-check: $(( $(date +%s) - start )) s ${bench_rows[-1]}"
    done
done

# The fused ops against the separate ops they replace (bench_fused), when a benchmark was asked for
fused=""
if [ -n "$bench_models" ]; then
    fused_batch=32
    [ "$dev" = cpu ] && fused_batch=1
    build/bench_fused "$dev" "$fused_batch" fp16 >"$out/fused.txt" 2>&1 || status=1
    fused=$(cat "$out/fused.txt")
    echo "gpu-check: $(( $(date +%s) - start )) s fused ops timed"
fi

# The kernel profile of the FP16 goal runs (TFB_KERNEL_PROFILE, CUPTI): where the GPU time goes. Diagnostic only:
# it never fails the check. GPU_CHECK_PROFILE=0 leaves it out.
profiles=()
if [ "$dev" = cuda ] && [ "${GPU_CHECK_PROFILE:-1}" != 0 ]; then
    for model in $bench_models; do
        goal_shape "$model"
        json="$out/profile-$model-fp16.json"
        # shellcheck disable=SC2086
        TFB_KERNEL_PROFILE=15 run "$dev" "$model" fp16 5 2 "$json" --parallel data $shape
        profiles+=("$(awk '/^kernel profile/ {on = 1; print; next} on && /^\|/ {print; next} {on = 0}' "${json%.json}.log")")
    done
fi

echo
echo "gpu-check: $(grep -o '[0-9]* of [0-9]* checks passed' "$out/ops.txt")"
grep FAIL "$out/ops.txt"
echo "| model, layout | prec | last loss cpu vs gpu | max rel diff | tol | |"
printf '%s\n' "${steps_rows[@]}"
printf '%s\n' "${repeat_rows[@]}"
echo "| model | prec[:layout] | batch | samples/s | MFU | PyTorch samples/s | tfbench / PyTorch | fwd / bwd / opt ms | GiB peak / planned | peak TFLOP/s from |"
printf '%s\n' "${bench_rows[@]}"
[ -n "$fused" ] && echo "$fused"
[ -n "$links_row" ] && echo "$links_row"
[ ${#profiles[@]} -gt 0 ] && printf '%s\n' "${profiles[@]}"

# compute-sanitizer over tfbench's own kernels (gpu_check --only: no cuBLAS or cuDNN), what the emulator cannot see
# on real hardware: memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory hazards: the fused
# attention's tiles, the block reductions) and synccheck (barriers in divergent code). Last, after the table, each
# tool under a time limit, so the tools cost at most 150 s in all and a call cut off keeps the table.
# An error or hazard fails the check; a tool cut off by its limit is reported as such. Where compute-sanitizer is
# missing or refuses the device (some sandboxed machines do), the row says so and nothing fails.
# GPU_CHECK_SANITIZE=0 leaves it out (default: on with a GPU, off when the CPU stands in; 1 forces it).
san_rows=()
san=$(command -v compute-sanitizer || echo "$cuda_home/bin/compute-sanitizer")
sanitize=${GPU_CHECK_SANITIZE:-}
[ -z "$sanitize" ] && { [ "$dev" = cuda ] && sanitize=1 || sanitize=0; }
if [ "$sanitize" != 0 ] && [ ! -x "$san" ]; then
    san_rows+=("| compute-sanitizer | - | not found: skipped | |")
elif [ "$sanitize" != 0 ]; then
    own=embedding,layernorm,residual_ln,softmax,attn,elementwise,add_relu,bias,dropout,xent,copy_2d,permute
    own=$own,repeatable,typed,normal_fill,optimizers,cast,finite,batchnorm,pooling
    for spec in "memcheck 60 $own own-kernels,-no-cuBLAS-or-cuDNN" \
        "racecheck 60 attn,layernorm,residual_ln,softmax,xent,pooling,batchnorm shared-memory-kernels" \
        "synccheck 30 attn_fused,softmax attention-and-softmax"; do
        read -r tool limit list what <<<"$spec"
        log="$out/sanitize-$tool.log"
        echo "gpu-check: $tool over gpu_check --only $list" >"$log"
        timeout "$limit" "$san" --tool "$tool" --error-exitcode 9 build/tests/gpu_check --device "$dev" \
            --only "$list" >>"$log" 2>&1
        rc=$?
        summary=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -1 | sed 's/^=* *//')
        if [ $rc = 0 ] && grep -q 'checks passed' "$log"; then verdict=PASS
        elif [ $rc = 124 ]; then verdict="cut off after $limit s"
        elif [ $rc = 2 ] || grep -q 'Device not supported' "$log"; then
            san_rows+=("| compute-sanitizer $tool | - | refused this GPU: skipped ($(tail -1 "$log")) | |")
            break
        else verdict=FAIL; status=1
        fi
        san_rows+=("| compute-sanitizer $tool | ${what//-/ } | ${summary:-no summary} (exit $rc) | $verdict |")
        echo "gpu-check: $(( $(date +%s) - start )) s ${san_rows[-1]}"
    done
fi
if [ ${#san_rows[@]} -gt 0 ]; then
    echo "| tool | kernels (gpu_check --only, in the log) | summary | |"
    printf '%s\n' "${san_rows[@]}"
fi
echo "gpu-check: $(( $(date +%s) - start )) s in all"
[ "$ops" = 0 ] || status=1
exit $status
