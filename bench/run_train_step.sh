#!/usr/bin/env bash
# Training-step throughput, sinklab (bench_train_step) against PyTorch eager (peers/torch_train_step.py)
# on the same machine, thread count and shapes, in one run; prints tokens/s of each, the ratio, and
# sinklab's MFU against the sgemm peak it measured.
#   bench/run_train_step.sh [threads=2] [steps=10]       BUILD_DIR (default build) holds bin/bench_train_step
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2}
steps=${2:-10}
build=${BUILD_DIR:-$root/build}
bash "$root/env/oracle.sh"
if [ ! -x "$build/bin/bench_train_step" ]; then
  cmake -S "$root" -B "$build" >/dev/null
  make -C "$build" -j"$threads" bench_train_step >/dev/null
fi
export OMP_NUM_THREADS=$threads
echo "# $(date -u +%Y-%m-%d) $(lscpu | sed -n 's/^Model name: *//p'), threads=$threads, torch $("$root/.venv-oracle/bin/python" -c 'import torch; print(torch.__version__)')"
printf "%-10s %12s %12s %7s %8s %10s\n" shape sinklab_tok/s torch_tok/s ratio mfu peak_GF/s
# name vocab d layers heads ffn seq rows
while read -r name vocab d layers heads ffn seq rows; do
  args="--vocab $vocab --d $d --layers $layers --heads $heads --ffn $ffn --seq $seq --rows $rows"
  ours=$("$build/bin/bench_train_step" $args --steps "$steps")
  peer=$("$root/.venv-oracle/bin/python" "$root/bench/peers/torch_train_step.py" $args --threads "$threads" --steps "$steps")
  echo "$ours" | awk -v n="$name" -v p="$(echo "$peer" | awk '{print $3}')" \
    '{printf "%-10s %12.0f %12.0f %7.2f %8.3f %10.1f\n", n, $3, p, $3 / p, $9, $7}'
done <<'SHAPES'
tiny 4096 128 4 4 384 256 16
60M 50432 768 10 8 1536 256 16
SHAPES
