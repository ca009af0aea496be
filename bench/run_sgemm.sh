#!/usr/bin/env bash
# sinklab CPU sgemm (bench_sgemm, through the op API) against PyTorch (bench/peers/torch_matmul.py) on
# the same shapes with the same thread count, in one run. One line per shape: GFLOP/s of each, ratio.
#   [ROUNDS=2] [BUILD_DIR=build] bench/run_sgemm.sh [threads=2] [reps=3]   (BUILD_DIR holds bin/bench_sgemm)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2}
reps=${2:-3}
build=${BUILD_DIR:-$root/build}
bash "$root/env/oracle.sh"
if [ ! -x "$build/bin/bench_sgemm" ]; then
  cmake -S "$root" -B "$build" >/dev/null
  make -C "$build" -j"$threads" bench_sgemm >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bin/bench_sgemm" --list > "$tmp/shapes"
export OMP_NUM_THREADS=$threads
# ROUNDS alternating runs of each side, best per shape: a burst of foreign load on a shared machine
# then hits both sides alike.
rounds=${ROUNDS:-2}
for ((r = 0; r < rounds; ++r)); do
  "$build/bin/bench_sgemm" --reps "$reps" >> "$tmp/sinklab.all"
  "$root/.venv-oracle/bin/python" "$root/bench/peers/torch_matmul.py" --threads "$threads" --reps "$reps" \
    < "$tmp/shapes" >> "$tmp/torch.all"
done
for side in sinklab torch; do
  awk '{ k = $1 " " $2 " " $3 " " $4 " " $5; if ($6 + 0 > best[k]) best[k] = $6 + 0 }
       END { for (k in best) print k, best[k] }' "$tmp/$side.all" > "$tmp/$side"
done
blas=$(sed -n 's/^SINKLAB_BLAS:STRING=//p' "$build/CMakeCache.txt" 2>/dev/null || echo "?")
echo "# $(date -u +%Y-%m-%d) $(lscpu | sed -n 's/^Model name: *//p'), threads=$threads, sinklab BLAS=$blas, torch $("$root/.venv-oracle/bin/python" -c 'import torch; print(torch.__version__)')"
printf "%-18s %-6s %5s %6s %5s %10s %10s %7s\n" shape kind M N K sinklab torch ratio
join <(sort "$tmp/sinklab") <(sort "$tmp/torch") > "$tmp/joined"
# keep the --list order
while read -r name _; do
  grep "^$name " "$tmp/joined" | awk '{printf "%-18s %-6s %5d %6d %5d %10.1f %10.1f %7.2f\n", $1, $2, $3, $4, $5, $6, $11, $6 / $11}'
done < "$tmp/shapes"
