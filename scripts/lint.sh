#!/usr/bin/env bash
# Static analysis of every C file: cppcheck (warnings, portability, performance) and clang-tidy with the
# checked-in .clang-tidy; fails on any finding. Inline suppressions carry their reason next to the code.
set -u
cd "$(dirname "$0")/.."
[ -f build/config.h ] || CUDA=0 scripts/configure.sh build >/dev/null || exit 1
status=0
cppcheck --quiet --enable=warning,portability,performance --std=c11 --inline-suppr -I build -D_GNU_SOURCE \
    --suppress=missingIncludeSystem --error-exitcode=1 kernels bench results topology tests scripts/bench_conv.c \
    scripts/bench_fused.c scripts/bench_batch.c || status=1
mpi_inc=$(mpicc --showme:compile)
emu_inc=$(sed -n 's/^CUDA_EMU_INCLUDES := //p' build/config.mk) # nccl.h for tests/emu/emu_nccl.c
n=0
for f in $(git ls-files '*.c'); do
    # the NCCL stand-in is built (and so linted) only where nccl.h was found
    [ "$f" = tests/emu/emu_nccl.c ] && ! grep -q '^EMU_NCCL := 1' build/config.mk && continue
    # shellcheck disable=SC2086
    clang-tidy --quiet "$f" -- -std=c11 -D_GNU_SOURCE -DTFB_VERSION='"lint"' -Ibuild -fopenmp $mpi_inc $emu_inc \
        2>/dev/null || status=1
    n=$((n + 1))
done
echo "lint: cppcheck and clang-tidy over $n files: $([ $status = 0 ] && echo clean || echo FINDINGS)"
exit $status
