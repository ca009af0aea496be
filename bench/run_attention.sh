#!/usr/bin/env bash
# sinklab attention (forward + backward, f32, causal) against PyTorch eager SDPA with the same thread
# count; prints both results and the tokens/s ratio per shape (> 1: sinklab is faster).
# Usage: bench/run_attention.sh [build_dir] [threads] [reps]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
threads=${2:-$(nproc)}
reps=${3:-10}
python=${PYTHON:-$root/.venv-oracle/bin/python}
[[ -x "$build/bin/bench_attention" ]] || { echo "run_attention: $build/bin/bench_attention not built (make bench_attention)" >&2; exit 1; }
ours=$(OMP_NUM_THREADS=$threads OMP_PROC_BIND=false "$build/bin/bench_attention" "$reps")
peer=$(OMP_NUM_THREADS=$threads "$python" "$root/bench/peers/torch_attention.py" "$reps" "$threads")
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $threads threads"
echo "$ours"
echo "$peer"
paste <(echo "$ours" | grep '^attention') <(echo "$peer" | grep '^attention') | awk '{
  split($2, d, "="); split($3, h, "="); split($8, a, "="); split($16, b, "=");
  printf "ratio d=%s H=%s: sinklab/torch tokens/s = %.2f\n", d[2], h[2], a[2] / b[2] }'
