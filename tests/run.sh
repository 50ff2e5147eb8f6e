#!/usr/bin/env bash
# Runs every tfbench test (C unit tests, then the end-to-end checks through the command line) from the repository
# root, counts each "ok"/"FAIL" line they print, and ends with "N passed, N failed". Exit status 1 on any failure.
# TFB_BUILD names the build folder under test (default build; `make sanitize` uses build-sanitize).
set -u -o pipefail  # a test program that crashes fails the run even when tee, last in the pipe, succeeds
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TFB_BUILD=${TFB_BUILD:-build}
b=$TFB_BUILD
log=$(mktemp)
status=0
for t in $b/tests/test_ops $b/tests/test_cnn_ops $b/tests/test_bert_layer $b/tests/test_model $b/tests/test_parallel $b/tests/test_topo $b/tests/test_catalog $b/tests/test_watchdog \
         $([ -x $b/tests/test_emu ] && echo $b/tests/test_emu) \
         "mpirun --oversubscribe -np 1 $b/tests/test_comm" "mpirun --oversubscribe -np 3 $b/tests/test_comm" \
         "mpirun --oversubscribe -np 4 $b/tests/test_comm" "python3 tests/test_training.py"; do
    echo "== $t"
    $t 2>&1 | tee -a "$log" || status=1
done
passed=$(grep -c '^ok ' "$log")
failed=$(grep -c '^FAIL ' "$log")
rm -f "$log"
[ "$failed" -gt 0 ] && status=1
[ "$passed" -eq 0 ] && status=1
echo "$passed passed, $failed failed"
exit $status
