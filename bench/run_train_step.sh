#!/usr/bin/env bash
# Training-step throughput, sinklab (bench_train_step) against PyTorch eager (peers/torch_train_step.py)
# on the same machine, thread count and shapes, in one run; prints tokens/s of each, the ratio, and
# sinklab's MFU against one sgemm peak for the whole run: bench_train_step --peak-only (warmed up, the
# best of >= 20 products over >= 3 s, the same threads as the step) at the start and again at the end,
# the larger of the two (the peak is the machine's best). Both sides run ROUNDS times alternately and keep
# their best pass (as run_hf_survey.sh does), so a burst of foreign load on this shared machine hits them
# alike; the min-max columns show each side's spread over the rounds. An MFU above 1 is refused
# (bench_train_step exits 3 naming the peak; this script exits 3 too), and the two peak measurements are
# compared: more than 10 % apart means the machine's speed moved during the run (rerun).
#   [ROUNDS=3] [BUILD_DIR=build] bench/run_train_step.sh [threads=2] [tiny_steps=20] [60m_steps=4]
# (timed steps per pass, after 2 warm-up steps for tiny and 1 for 60M, whose step takes ~20 s on 2 cores)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2}
tiny_steps=${2:-20}
steps_60m=${3:-4}
build=${BUILD_DIR:-$root/build}
bash "$root/env/oracle.sh"
if [ ! -x "$build/bin/bench_train_step" ]; then
  cmake -S "$root" -B "$build" >/dev/null
  make -C "$build" -j"$threads" bench_train_step >/dev/null
fi
export OMP_NUM_THREADS=$threads
rounds=${ROUNDS:-3}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), threads=$threads, steps=$tiny_steps/$steps_60m, rounds=$rounds," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg), torch $("$root/.venv-oracle/bin/python" -c 'import torch; print(torch.__version__)')," \
     "sinklab $(git -C "$root" rev-parse --short HEAD)"
tokens() { awk '{print $3}'; }  # tokens/s, the third field of both programs' line
best() { sort -g | tail -1; }
least() { sort -g | head -1; }
peak() { "$build/bin/bench_train_step" --peak-only | awk '{print $2}'; }
peak_start=$(peak)
shape_rows=()
printf "%-6s %13s %13s %6s %15s %15s %7s %9s\n" shape sinklab_tok/s torch_tok/s ratio sinklab_min-max torch_min-max mfu peak_GF/s
# name vocab d layers heads ffn seq rows timed-steps warm-up-steps
while read -r name vocab d layers heads ffn seq rows steps warmup; do
  args="--vocab $vocab --d $d --layers $layers --heads $heads --ffn $ffn --seq $seq --rows $rows --steps $steps --warmup $warmup"
  ours=() theirs=()
  for ((r = 0; r < rounds; ++r)); do
    ours+=("$("$build/bin/bench_train_step" $args --peak-gflops "$peak_start")")  # exits 3 on an MFU above 1
    theirs+=("$("$root/.venv-oracle/bin/python" "$root/bench/peers/torch_train_step.py" $args --threads "$threads")")
  done
  # best and least pass of each side (as run_hf_survey.sh); the best pass's model GFLOP/s, for its MFU
  o=$(printf "%s\n" "${ours[@]}" | tokens | best) ol=$(printf "%s\n" "${ours[@]}" | tokens | least)
  t=$(printf "%s\n" "${theirs[@]}" | tokens | best) tl=$(printf "%s\n" "${theirs[@]}" | tokens | least)
  gflops=$(printf "%s\n" "${ours[@]}" | awk -v o="$o" '$3 == o {print $5; exit}')
  shape_rows+=("$name $o $t $ol $tl $gflops")
done <<SHAPES
tiny 4096 128 4 4 384 256 16 $tiny_steps 2
60M 50432 768 10 8 1536 256 16 $steps_60m 1
SHAPES
peak_end=$(peak)
peak_best=$(awk -v a="$peak_start" -v b="$peak_end" 'BEGIN {print (a > b) ? a : b}')
for row in "${shape_rows[@]}"; do
  read -r name o t ol tl gflops <<<"$row"
  awk -v n="$name" -v o="$o" -v ol="$ol" -v t="$t" -v tl="$tl" -v g="$gflops" -v peak="$peak_best" \
    'BEGIN {printf "%-6s %13.0f %13.0f %6.2f %7.0f-%-7.0f %7.0f-%-7.0f %7.3f %9.1f\n", n, o, t, o / t, ol, o, tl, t,
            g / peak, peak}'
done
awk -v a="$peak_start" -v b="$peak_end" 'BEGIN {
  lo = (a < b) ? a : b; hi = (a < b) ? b : a; apart = 100 * (hi / lo - 1)
  printf "# sgemm peak measured at the start %.1f and at the end %.1f GFLOP/s (%.1f %% apart)%s\n", a, b, apart,
         (apart > 10) ? ": more than 10 %, the speed of the machine moved during the run; rerun" : ""}'
printf "%s\n" "${shape_rows[@]}" | awk -v peak="$peak_best" '$6 > peak {
  printf "run_train_step.sh: MFU %.3f > 1 refused for %s: the peak %.1f GFLOP/s was measured low\n", $6 / peak, $1, peak
  bad = 1} END {exit bad ? 3 : 0}' >&2
