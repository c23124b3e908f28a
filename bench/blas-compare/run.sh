#!/bin/bash
# Single-threaded sgemm/ssyrk of the BLAS libraries Debian 12 ships, one
# binary for all (blas-compare.cpp loads each at run time). The installed
# OpenBLAS is used as it is; BLIS (serial build) and ATLAS are fetched with
# `apt-get download` and unpacked under a scratch directory, so nothing is
# installed system-wide.
#
#   bash bench/blas-compare/run.sh [REPEATS] [SCRATCH]
#
# Prints one JSON line per product and library. Figures: docs/performance.md.
set -euo pipefail
repeats=${1:-5}
scratch=${2:-${TMPDIR:-/tmp}/muon-blas-compare}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$scratch"
g++ -O2 -std=c++17 -o "$scratch/blas-compare" "$here/blas-compare.cpp" -ldl

libdir=/usr/lib/x86_64-linux-gnu
root=$scratch/root
if [ ! -e "$root/$libdir/blis-serial/libblis.so.4" ] ||
   [ ! -e "$root/$libdir/libcblas.so.3" ]; then
  (cd "$scratch" && apt-get download libblis4-serial libatlas3-base >/dev/null &&
   for deb in libblis4-serial_*.deb libatlas3-base_*.deb; do
     dpkg -x "$deb" root
   done)
fi

export OPENBLAS_NUM_THREADS=1 BLIS_NUM_THREADS=1 OMP_NUM_THREADS=1
openblas=$(ls $libdir/libopenblas.so.0 2>/dev/null || true)
if [ -z "$openblas" ]; then
  echo "run.sh: OpenBLAS not installed (make deps)" >&2
  exit 2
fi
"$scratch/blas-compare" "$openblas" "$repeats"
"$scratch/blas-compare" "$root/$libdir/blis-serial/libblis.so.4" "$repeats"
LD_LIBRARY_PATH=$root/$libdir "$scratch/blas-compare" \
  "$root/$libdir/libcblas.so.3" "$repeats"
