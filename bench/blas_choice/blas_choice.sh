#!/usr/bin/env bash
# Picks the CPU BLAS by measurement: builds blas_choice.cpp against OpenBLAS (openmp), BLIS (openmp) and
# oneDNN (dnnl_sgemm) and runs each with the same thread count. Usage: bench/blas_choice/blas_choice.sh [threads] [reps]
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
for lib in openblas blis onednn; do
  OMP_NUM_THREADS=$threads BLIS_NUM_THREADS=$threads OMP_PROC_BIND=false "$out/$lib" "$reps"
done
