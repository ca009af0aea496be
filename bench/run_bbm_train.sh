#!/usr/bin/env bash
# Training throughput at the Bigram-Backcopy shape (issue #25): sinklab (bench_train_step) against
# PyTorch eager (peers/torch_train_step.py) on the same machine, thread count and model -- vocabulary 85,
# d 256, 1 head, T 256, learned positions, FFN relu 1024 (Guo et al. 2024's model), L = 1 and 3 -- for a
# range of batch rows. One optimizer step = forward + backward + global-norm clipping + AdamW on both
# sides. The two alternate over ROUNDS rounds (so a burst of foreign load on a shared machine hits both)
# and each keeps its best round; prints tokens/s of each and the ratio sinklab / torch.
#   [ROUNDS=3] [BUILD_DIR=build] [SHAPES="L:rows ..."] [D=256 SEQ=256 FFN=1024] bench/run_bbm_train.sh [threads=2] [steps=5]
# D / SEQ / FFN give another width, context and FFN size: the emergence atlas's small scale
# (jobs/atlas/bbm_small.ini) is D=64 SEQ=64 FFN=256 SHAPES=1:128 with one thread (its runs go two at a time).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2}
steps=${2:-5}
rounds=${ROUNDS:-3}
build=${BUILD_DIR:-$root/build}
shapes=${SHAPES:-"1:32 1:64 1:128 1:256 1:512 3:32 3:64 3:128 3:256 3:512"}
d=${D:-256}
seq=${SEQ:-256}
ffn=${FFN:-1024}
bash "$root/env/oracle.sh"
if [ ! -x "$build/bin/bench_train_step" ]; then
  cmake -S "$root" -B "$build" >/dev/null
  make -C "$build" -j"$threads" bench_train_step >/dev/null
fi
py="$root/.venv-oracle/bin/python"
export OMP_NUM_THREADS=$threads
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores visible, threads=$threads," \
  "rounds=$rounds, steps=$steps, d=$d, T=$seq, ffn=$ffn, torch $("$py" -c 'import torch; print(torch.__version__)'), sinklab $(git -C "$root" rev-parse --short HEAD)"
echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-4s %5s %13s %12s %7s %9s %9s\n" L rows sinklab_tok/s torch_tok/s ratio sl_step_ms th_step_ms
for shape in $shapes; do
  L=${shape%%:*}
  rows=${shape##*:}
  common="--vocab 85 --d $d --layers $L --heads 1 --ffn $ffn --seq $seq --rows $rows"
  best_s=0
  best_t=0
  for ((r = 0; r < rounds; ++r)); do
    s=$("$build/bin/bench_train_step" $common --set pos-emb=learned --set ffn=relu --steps "$steps" --warmup 1 --no-peak |
      awk '{print $3}')
    t=$("$py" "$root/bench/peers/torch_train_step.py" $common --pos-emb learned --ffn-act relu --threads "$threads" \
      --steps "$steps" --warmup 1 | awk '{print $3}')
    best_s=$(awk -v a="$best_s" -v b="$s" 'BEGIN {print (b > a ? b : a)}')
    best_t=$(awk -v a="$best_t" -v b="$t" 'BEGIN {print (b > a ? b : a)}')
  done
  awk -v L="$L" -v rows="$rows" -v s="$best_s" -v t="$best_t" -v seq="$seq" 'BEGIN {
    printf "%-4s %5s %13.0f %12.0f %7.2f %9.1f %9.1f\n", L, rows, s, t, s / t, 1e3 * rows * seq / s, 1e3 * rows * seq / t }'
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
