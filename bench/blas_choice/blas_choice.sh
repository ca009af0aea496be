#!/usr/bin/env bash
# Picks the CPU BLAS by measurement: builds blas_choice.cpp against OpenBLAS (openmp), BLIS (openmp) and
# oneDNN (dnnl_sgemm) and runs each with the same thread count.
# Usage: [ROUNDS=2] bench/blas_choice/blas_choice.sh [threads=2] [reps=3]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
threads=${1:-2}
reps=${2:-3}
arch=$(gcc -print-multiarch)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cxx="g++ -O2 -std=c++20 -march=native"
$cxx -I/usr/include/$arch/openblas-openmp "$here/blas_choice.cpp" -o "$out/openblas" \
  -L/usr/lib/$arch/openblas-openmp -Wl,-rpath,/usr/lib/$arch/openblas-openmp -lopenblas -fopenmp
$cxx -DUSE_BLIS -I/usr/include/$arch/blis-openmp "$here/blas_choice.cpp" -o "$out/blis" \
  -L/usr/lib/$arch/blis-openmp -Wl,-rpath,/usr/lib/$arch/blis-openmp -lblis -fopenmp
$cxx -DUSE_DNNL "$here/blas_choice.cpp" -o "$out/onednn" -ldnnl -fopenmp
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores visible, OMP_NUM_THREADS=$threads"
# Several rounds, libraries interleaved, best per (library, shape): on a shared machine a burst of
# foreign load then hits every library alike instead of whichever ran at that moment.
rounds=${ROUNDS:-2}
for ((r = 0; r < rounds; ++r)); do
  for lib in openblas blis onednn; do
    OMP_NUM_THREADS=$threads BLIS_NUM_THREADS=$threads OMP_PROC_BIND=false "$out/$lib" "$reps" >> "$out/all.txt"
  done
done
awk '{ key = $0; sub(/ +[0-9.]+ GFLOP\/s$/, "", key); g = $(NF-1) + 0
       if (!(key in best)) order[n++] = key
       if (g > best[key]) best[key] = g }
     END { for (i = 0; i < n; ++i) printf "%s %8.1f GFLOP/s\n", order[i], best[order[i]] }' "$out/all.txt"
