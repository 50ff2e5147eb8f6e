#!/usr/bin/env bash
# Probes tfbench's dependencies by compiling a small program against each, writes BUILD/config.h (HAVE_X 0/1)
# and BUILD/config.mk (flags), and prints a summary. Required: MPI, OpenBLAS, cJSON, hwloc. Optional: CUDA
# (nvcc), cuBLAS, cuDNN, NCCL. CUDA=0 skips the CUDA probes. Files are rewritten only when their content changes.
set -u
build=${1:-build}
cuda_mode=${CUDA:-auto}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$build/probe"
cc=${MPICC:-mpicc}
ok=1
summary=()
h=()
libs=()

probe() { # name header code link-flags [compiler]
    local name=$1 header=$2 code=$3 flags=$4 compiler=${5:-$cc} src="$build/probe/$1.c"
    case $compiler in nvcc*) src="$build/probe/$1.cu" ;; esac
    printf '#include <%s>\nint main(void) { %s; return 0; }\n' "$header" "$code" >"$src"
    $compiler "$src" -o "$build/probe/$name" $flags >"$build/probe/$name.log" 2>&1
}

record() { # NAME required(0/1) result(0=ok) detail
    if [ "$3" = 0 ]; then summary+=("  ✓ $1 $4"); h+=("#define HAVE_$1 1")
    else
        summary+=("  ✗ $1 $4"); h+=("#define HAVE_$1 0")
        [ "$2" = 1 ] && ok=0
    fi
}

command -v "$cc" >/dev/null 2>&1; have_cc=$?
if [ $have_cc = 0 ]; then probe MPI mpi.h 'MPI_Init(0, 0); MPI_Finalize()' ''; r=$?; else r=1; fi
record MPI 1 $r "(required: $cc)"
# OpenBLAS built on OpenMP shares one thread pool with tfbench's own OpenMP loops; the pthread build's spinning
# threads and OpenMP's contend for the same cores (measured: bert-mini step 616 ms vs 430 ms with passive waits).
# Debian keeps it in an openblas-openmp folder beside libc (or beside a LIBRARY_PATH entry: scripts/offline-deps.sh).
blas_flags="-lopenblas"
IFS=: read -ra lib_dirs <<<"$(dirname "$(gcc -print-file-name=libc.so)"):${LIBRARY_PATH:-}"
for d in "${lib_dirs[@]}"; do
    blas_dir=$(realpath -m "$d/openblas-openmp")
    [ -n "$d" ] && [ -f "$blas_dir/libopenblas.so" ] && blas_flags="-L$blas_dir -Wl,-rpath,$blas_dir -lopenblas" && break
done
probe OPENBLAS cblas.h 'openblas_set_num_threads(1)' "$blas_flags"; r=$?
record OPENBLAS 1 $r "(required; $([ "$blas_flags" = -lopenblas ] && echo default build || echo OpenMP build))"
probe CJSON cjson/cJSON.h 'cJSON_Delete(cJSON_CreateObject())' '-lcjson'; record CJSON 1 $? "(required)"
probe HWLOC hwloc.h 'hwloc_topology_t t; hwloc_topology_init(&t)' '-lhwloc'; r=$?
record HWLOC 1 $r "(required: topology, binding)"; [ $r = 0 ] && libs+=(-lhwloc)

# cuDNN and NCCL may live outside the toolkit: CUDNN_HOME and NCCL_HOME each name a folder with include/ and lib/
# (or lib64/) holding libcudnn.so / libnccl.so.
ext_lib() { local d; for d in "$1/lib64" "$1/lib"; do [ -d "$d" ] && echo "$d" && return; done; echo "$1/lib"; }
ext_flags() { [ -n "$1" ] && echo "-I$1/include -L$(ext_lib "$1")"; }
ext_link() { [ -n "$1" ] && echo "-L$(ext_lib "$1") -Wl,-rpath,$(ext_lib "$1")"; }
cuda_r=1 cublas_r=1 cudnn_r=1 nccl_r=1 cupti_r=1
if [ "$cuda_mode" != 0 ] && [ -x "$cuda_home/bin/nvcc" ]; then
    nv="$cuda_home/bin/nvcc"
    probe CUDA cuda_runtime.h 'cudaFree(0)' '-lcudart' "$nv"; cuda_r=$?
    probe CUBLAS cublas_v2.h 'cublasHandle_t x; cublasCreate(&x)' '-lcublas' "$nv"; cublas_r=$?
    probe CUDNN cudnn.h 'cudnnGetVersion()' "$(ext_flags "${CUDNN_HOME:-}") -lcudnn" "$nv"; cudnn_r=$?
    probe NCCL nccl.h 'int v; ncclGetVersion(&v)' "$(ext_flags "${NCCL_HOME:-}") -lnccl" "$nv"; nccl_r=$?
    # CUPTI sits beside the toolkit's own headers and libraries, or under extras/CUPTI in older layouts
    cupti_home=$([ -f "$cuda_home/include/cupti.h" ] || [ ! -d "$cuda_home/extras/CUPTI" ] || echo "$cuda_home/extras/CUPTI")
    probe CUPTI cupti.h 'uint32_t v; cuptiGetVersion(&v)' "$(ext_flags "$cupti_home") -lcupti" "$nv"; cupti_r=$?
    note="(optional: $nv)"
else
    note=$([ "$cuda_mode" = 0 ] && echo "(disabled with CUDA=0)" || echo "(optional: no nvcc in $cuda_home)")
fi
# Machine code for each architecture in CUDA_ARCHS that this nvcc can target, PTX for the newest (so newer GPUs
# JIT-compile it). CUDA 13 dropped sm_70 (Volta): it is listed as skipped, not silently lost.
sass="" skipped="" ptx=0 gencode=""
if [ $cuda_r = 0 ]; then
    can=$("$nv" --list-gpu-arch 2>/dev/null | tr '\n' ' ')
    for a in ${CUDA_ARCHS:-70 75 80 86 89 90}; do
        case " $can " in
            *" compute_$a "*) sass="$sass${sass:+ }$a"; gencode="$gencode -gencode arch=compute_$a,code=sm_$a"; ptx=$a ;;
            *) skipped="$skipped sm_$a" ;;
        esac
    done
    [ -z "$sass" ] && cuda_r=1 && note="(optional: $nv targets none of CUDA_ARCHS='${CUDA_ARCHS:-}')"
    [ $ptx != 0 ] && gencode="$gencode -gencode arch=compute_$ptx,code=compute_$ptx"
fi
[ $cuda_r != 0 ] && cublas_r=1 cudnn_r=1 nccl_r=1 cupti_r=1
cuda_ready=$([ $cuda_r = 0 ] && [ $cublas_r = 0 ] && [ $cudnn_r = 0 ] && [ $nccl_r = 0 ] && echo 1 || echo 0)
if [ $cuda_r = 0 ]; then
    note="$note: sm_${sass// /, sm_} + PTX $ptx${skipped:+ (not supported by this nvcc:$skipped)}"
    [ $cuda_ready = 0 ] && note="$note; the CUDA backend needs cuBLAS, cuDNN and NCCL too"
fi
record CUDA 0 $cuda_r "$note"
record CUBLAS 0 $cublas_r "(optional)"
record CUDNN 0 $cudnn_r "(optional)"
record NCCL 0 $nccl_r "(optional)"
record CUPTI 0 $cupti_r "(optional: the kernel profile, TFB_KERNEL_PROFILE)"
# The CUDA backend's kernels compiled for the CPU (tests/emu/, gpu_check_emu) need only the toolkit's headers and a
# C++ compiler, not nvcc or a GPU: built whenever those compile, CUDA=0 included (it is a CPU program).
emu_inc="-I$cuda_home/include${CUDNN_HOME:+ -I$CUDNN_HOME/include}${NCCL_HOME:+ -I$NCCL_HOME/include}"
printf '#include <%s>\n' cuda_runtime.h cuda_fp16.h cuda_bf16.h cublas_v2.h cudnn.h >"$build/probe/CUDA_EMU.cpp"
printf 'int main(void) { return 0; }\n' >>"$build/probe/CUDA_EMU.cpp"
${CXX:-g++} -std=c++17 $emu_inc "$build/probe/CUDA_EMU.cpp" -o "$build/probe/CUDA_EMU" >"$build/probe/CUDA_EMU.log" 2>&1
emu_r=$?
record CUDA_EMU 0 $emu_r "(optional: tests run the CUDA kernels on the CPU; needs the toolkit's headers and g++)"
# ... and with NCCL's header, the CUDA backend's communicator too, over a stand-in for NCCL that calls MPI
# (tests/emu/emu_nccl.c), so several emulated ranks talk through cuda_comm.cu
emu_nccl_r=1
if [ $emu_r = 0 ] && [ $have_cc = 0 ]; then
    printf '#include <nccl.h>\n#include <mpi.h>\nint main(void) { ncclUniqueId id; (void)id; return 0; }\n' \
        >"$build/probe/EMU_NCCL.c"
    # shellcheck disable=SC2086
    $cc $emu_inc "$build/probe/EMU_NCCL.c" -o "$build/probe/EMU_NCCL" >"$build/probe/EMU_NCCL.log" 2>&1
    emu_nccl_r=$?
fi
record EMU_NCCL 0 $emu_nccl_r "(optional: the emulated ranks communicate through cuda_comm.cu; needs nccl.h)"
h+=("#define TFB_CUDA_BACKEND $cuda_ready")
if [ $cuda_ready = 1 ]; then
    h+=("#define TFB_CUDA_SASS \"$sass\"" "#define TFB_CUDA_PTX $ptx")
fi

# The toolkit this build was made with (major * 1000 + minor * 10, as cudaRuntimeGetVersion reports it) and where
# its libraries are, for `tfbench doctor`; 0 and empty without nvcc.
toolkit=0
if [ $cuda_r = 0 ]; then
    rel=$("$nv" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
    [ -n "$rel" ] && toolkit=$(( ${rel% *} * 1000 + ${rel#* } * 10 ))
fi
h+=("#define TFB_CUDA_TOOLKIT_VERSION $toolkit" "#define TFB_CUDA_HOME \"$([ $cuda_r = 0 ] && echo "$cuda_home")\"")
tmp_h="$build/config.h.new"
{ echo "/* generated by scripts/configure.sh */"; printf '%s\n' "${h[@]}"; } >"$tmp_h"
cmp -s "$tmp_h" "$build/config.h" 2>/dev/null && rm "$tmp_h" || mv "$tmp_h" "$build/config.h"
tmp_mk="$build/config.mk.new"
cuda_libs="" nvcc_inc=""
if [ $cuda_ready = 1 ]; then
    lib="$cuda_home/lib64"
    cuda_libs="$(ext_link "${CUDNN_HOME:-}") $(ext_link "${NCCL_HOME:-}") -L$lib -Wl,-rpath,$lib"
    [ $cupti_r = 0 ] && [ -n "$cupti_home" ] && cuda_libs="$cuda_libs $(ext_link "$cupti_home")"
    cuda_libs="$cuda_libs -lcublas -lcudnn -lnccl$([ $cupti_r = 0 ] && echo " -lcupti") -lcudart_static -ldl -lrt -lstdc++"
    for home in "${CUDNN_HOME:-}" "${NCCL_HOME:-}" "$([ $cupti_r = 0 ] && echo "$cupti_home")"; do
        [ -n "$home" ] && nvcc_inc="$nvcc_inc -I$home/include"
    done
fi
{
    echo "CONFIG_LIBS := $blas_flags -lcjson ${libs[*]:-} $cuda_libs -lm"
    echo "CUDA_BACKEND := $cuda_ready"
    echo "NVCC := ${nv:-}"
    echo "NVCC_GENCODE :=$gencode"
    echo "NVCC_INCLUDES :=$nvcc_inc"
    echo "CUDA_EMU := $([ $emu_r = 0 ] && echo 1 || echo 0)"
    echo "CUDA_EMU_INCLUDES := $emu_inc"
    echo "EMU_NCCL := $([ $emu_nccl_r = 0 ] && echo 1 || echo 0)"
} >"$tmp_mk"
cmp -s "$tmp_mk" "$build/config.mk" 2>/dev/null && rm "$tmp_mk" || mv "$tmp_mk" "$build/config.mk"

echo "tfbench configuration:"
printf '%s\n' "${summary[@]}"
if [ $ok = 0 ]; then
    echo "a required dependency is missing: run 'make deps' (or see README.md); probe logs in $build/probe/" >&2
    exit 1
fi
