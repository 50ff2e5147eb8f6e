#!/usr/bin/env bash
# Installs the Debian packages tfbench builds and tests with (clang for fuzzing, clang-tidy and cppcheck for static analysis, valgrind, gnuplot for scripts/plot), when they are missing. As root it runs apt-get;
# otherwise it prints the exact apt-get line and fails. The CUDA toolkit is optional and never installed here.
set -euo pipefail
pkgs=(build-essential libopenmpi-dev openmpi-bin libopenblas-dev libopenblas-openmp-dev libcjson-dev libhwloc-dev python3
      clang libclang-rt-14-dev clang-tidy cppcheck valgrind gnuplot-nox)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
line="apt-get install -y ${missing[*]}"
if [ "$(id -u)" != 0 ]; then
    echo "tfbench needs: ${missing[*]}" >&2
    echo "run as root:  apt-get update && $line" >&2
    exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
