#!/usr/bin/env bash
# A short CPU training run (bert-tiny and resnet-tiny, one rank) under valgrind memcheck; fails on any error.
# valgrind cannot execute AVX-512, so this build targets x86-64-v2 (build-valgrind/) and OpenBLAS is told to use
# its AVX2 kernels (OPENBLAS_CORETYPE=Haswell). No suppressions are needed: memcheck reports no errors, the MPI
# library included. Leak checking is left at valgrind's default summary (the MPI library keeps allocations).
set -u
cd "$(dirname "$0")/.."
make --no-print-directory BUILD=build-valgrind ARCH_FLAGS="-march=x86-64-v2" EXTRA_CFLAGS="-g" \
    build-valgrind/tfbench >/dev/null || exit 1
status=0
for model in bert-tiny resnet-tiny; do
    log=build-valgrind/memcheck-$model.log
    OPENBLAS_CORETYPE=Haswell valgrind --error-exitcode=9 --num-callers=30 --log-file="$log" \
        build-valgrind/tfbench --model "$model" --seq-len 16 --batch 2 --steps 2 --warmup 1 --peak-tflops 1 \
        --threads 1 --progress off --output build-valgrind/memcheck-$model.json >/dev/null
    rc=$?
    echo "valgrind $model: exit $rc, $(grep -o 'ERROR SUMMARY: [0-9]* errors' "$log")"
    [ $rc = 0 ] || { status=1; tail -40 "$log"; }
done
exit $status
