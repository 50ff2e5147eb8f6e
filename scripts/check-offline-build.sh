#!/usr/bin/env bash
# Checks scripts/offline-deps.sh end to end on a Debian 12 machine that has tfbench's dependencies installed: it
# fetches the packages, then, in a private mount namespace where every file of the installed MPI, OpenBLAS, cJSON
# and hwloc packages is hidden, shows that the build fails without them and works from the unpacked packages alone
# (configure, build, a one-rank run and a two-rank mpirun). With CUDA=1 it also hides cuDNN and NCCL in the toolkit
# and serves them from a folder laid out as Python's nvidia-cudnn / nvidia-nccl packages are, through
# scripts/gpu-check.sh's lookup (build only: no GPU is needed). Needs root (unshare, mount) and the network.
# Usage: scripts/check-offline-build.sh [WORKDIR]   (default: a fresh temporary folder; prints PASS or FAIL)
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "check-offline-build: needs root (unshare, mount)" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
rm -rf "$work/tfbench"
git clone -q "$repo" "$work/tfbench"
scripts_dir=$work/tfbench/scripts
"$scripts_dir/offline-deps.sh" fetch "$work/debs"
# Every package the bundle carries, and the other OpenBLAS builds: the offline machine has none of them.
mapfile -t hide < <("$scripts_dir/offline-deps.sh" list)
hide+=(libopenblas0 libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev libhwloc-plugins)
# Every installed file of those packages under /usr (directories stay: other packages share them).
for p in "${hide[@]}"; do dpkg-query -L "$p" 2>/dev/null || true; done | grep '^/usr/' | sort -u |
    while read -r f; do [ -e "$f" ] && [ ! -d "$f" ] && echo "$f"; done >"$work/hidden.txt"
# With CUDA=1: cuDNN's and NCCL's headers move from the toolkit to a pip-like tree (nvidia/NAME/{include,lib}, the
# libraries under their versioned names only, as links to the toolkit's files, which stay where they are).
cuda=${CUDA:-0} cuda_home=$(realpath "${CUDA_HOME:-/usr/local/cuda}") # real paths: a whiteout must not replace a link
if [ "$cuda" = 1 ]; then
    for n in cudnn nccl; do
        mkdir -p "$work/site/nvidia/$n/include" "$work/site/nvidia/$n/lib"
        cp -a "$cuda_home"/include/"$n"*.h "$work/site/nvidia/$n/include/"
        find "$cuda_home/lib64/" -maxdepth 1 -name "lib$n*.so.*" -exec ln -sf {} "$work/site/nvidia/$n/lib/" \;
        ls "$cuda_home"/include/"$n"*.h >>"$work/hidden.txt"
    done
    : >"$work/site/nvidia/__init__.py"
fi
# An overlay on /usr whose upper layer holds a whiteout (a 0/0 character device) for each: those files are absent.
rm -rf "$work/upper" "$work/overlay-work"
while read -r f; do mkdir -p "$work/upper$(dirname "$f")" && mknod "$work/upper$f" c 0 0; done <"$work/hidden.txt"
mkdir -p "$work/upper/usr" "$work/overlay-work"
echo "check-offline-build: hiding $(wc -l <"$work/hidden.txt") installed files"

# The steps inside the namespace (a string, not stdin: mpirun would read the rest of the script from stdin).
inner=$(cat <<'EOF'
set -euo pipefail
work=$1 cuda=$2
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$work/upper/usr,workdir=$work/overlay-work" /usr
cd "$work/tfbench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if mpicc --version >/dev/null 2>&1 || make --no-print-directory CUDA=0 configure >"$work/before.log" 2>&1; then
    echo "check-offline-build: FAIL: the installed packages are still visible"; exit 1
fi
echo "check-offline-build: without the packages, configure fails as it should:"
grep -E '^  ✗' "$work/before.log"
scripts/offline-deps.sh unpack "$work/debs" "$work/prefix"
. "$work/prefix/env.sh"
if [ "$cuda" = 1 ]; then
    export PYTHONPATH=$work/site CUDA_ARCHS=${CUDA_ARCHS:-90} GPU_CHECK_DEVICE=cpu GPU_CHECK_BENCH=bert-tiny
    # gpu-check.sh's own lookup and build; its run stops at "no usable GPU" (exit 2) on a machine without one
    set +e; OUT=$work/gpu-check scripts/gpu-check.sh >"$work/gpu-check.log" 2>&1; rc=$?; set -e
    head -3 "$work/gpu-check.log"
    grep -E '^  ✓ (CUDNN|NCCL)' "$work/gpu-check.log" >/dev/null ||
        { echo "check-offline-build: FAIL: cuDNN/NCCL not found from the pip layout"; exit 1; }
    ldd build/tfbench | grep -E 'libcudnn|libnccl|libmpi|libopenblas|libcjson|libhwloc'
    echo "check-offline-build: gpu-check.sh exited $rc"
    [ "$rc" = 0 ] || [ "$rc" = 2 ] || { echo "check-offline-build: FAIL"; exit 1; }
else
    make --no-print-directory CUDA=0 -j"$(nproc)" build/tfbench >"$work/build.log" 2>&1 ||
        { tail -20 "$work/build.log"; echo "check-offline-build: FAIL: build"; exit 1; }
    grep -E '^  [✓✗]' "$work/build.log" | sort -u
    ldd build/tfbench | grep -E 'libmpi|libopenblas|libcjson|libhwloc'
    build/tfbench --model bert-tiny --steps 3 --warmup 1 --progress off --output "$work/one.json" >"$work/one.log" 2>&1 ||
        { cat "$work/one.log"; echo "check-offline-build: FAIL: one rank"; exit 1; }
    mpirun -np 2 --oversubscribe build/tfbench --model bert-tiny --steps 3 --warmup 1 --progress off \
        --output "$work/two.json" >"$work/two.log" 2>&1 ||
        { cat "$work/two.log"; echo "check-offline-build: FAIL: two ranks"; exit 1; }
    grep -h -e '^| strategy' -e '^| single' -e '^| data' "$work/one.log" "$work/two.log"
    ! grep -i -B2 -A4 'sorry\|error\|warning' "$work/one.log" "$work/two.log" ||
        { echo "check-offline-build: FAIL: the runs complained"; exit 1; }
fi
echo "check-offline-build: PASS"
EOF
)
unshare --mount --fork bash -c "$inner" inner "$work" "$cuda"
