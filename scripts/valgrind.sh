#!/usr/bin/env bash
# Short CPU training runs under valgrind memcheck, failing on any error: bert-tiny and resnet-tiny on one rank,
# then bert-tiny on two ranks with tensor and with pipeline parallelism (every rank under memcheck).
# valgrind cannot execute AVX-512, so this build targets x86-64-v2 (build-valgrind/) and OpenBLAS is told to use
# its AVX2 kernels (OPENBLAS_CORETYPE=Haswell). Every run uses scripts/valgrind.supp: one report inside the
# MPI launcher's runtime and one inside the dynamic loader's dlopen (both explained there), nothing in tfbench.
# Leak checking is left at valgrind's default summary (the MPI library keeps allocations).
set -u
cd "$(dirname "$0")/.."
make --no-print-directory BUILD=build-valgrind ARCH_FLAGS="-march=x86-64-v2" EXTRA_CFLAGS="-g" \
    build-valgrind/tfbench >/dev/null || exit 1
status=0
for model in bert-tiny resnet-tiny; do
    log=build-valgrind/memcheck-$model.log
    OPENBLAS_CORETYPE=Haswell valgrind --error-exitcode=9 --num-callers=30 --suppressions=scripts/valgrind.supp \
        --log-file="$log" \
        build-valgrind/tfbench --model "$model" --seq-len 16 --batch 2 --steps 2 --warmup 1 --peak-tflops 1 \
        --threads 1 --progress off --output build-valgrind/memcheck-$model.json >/dev/null
    rc=$?
    echo "valgrind $model: exit $rc, $(grep -o 'ERROR SUMMARY: [0-9]* errors' "$log")"
    [ $rc = 0 ] || { status=1; tail -40 "$log"; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for par in tensor pipeline; do
    log=build-valgrind/memcheck-$par
    OPENBLAS_CORETYPE=Haswell mpirun --oversubscribe -np 2 valgrind --error-exitcode=9 --num-callers=30 \
        --suppressions=scripts/valgrind.supp \
        --log-file="$log.%q{OMPI_COMM_WORLD_RANK}.log" build-valgrind/tfbench --model bert-tiny --seq-len 16 --batch 2 \
        --steps 2 --warmup 1 --peak-tflops 1 --threads 1 --progress off --parallel "$par" \
        --output build-valgrind/memcheck-$par.json >/dev/null 2>&1
    rc=$?
    echo "valgrind bert-tiny --parallel $par, 2 ranks: exit $rc, $(cat "$log".*.log | grep -o 'ERROR SUMMARY: [0-9]* errors' | tr '\n' ' ')"
    [ $rc = 0 ] || { status=1; cat "$log".*.log | tail -n 60; }
done
exit $status
