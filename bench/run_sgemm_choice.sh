#!/usr/bin/env bash
# The f32 GEMM of the CPU backend (SINKLAB_SGEMM, src/backend/cpu/blas.hpp) measured where it counts: the
# whole training step (bench_train_step: forward + backward + clipping + AdamW) built once with oneDNN's
# dnnl_sgemm (BUILD_DIR, the default build) and once with the BLAS's cblas_sgemm (BLAS_BUILD_DIR, built
# here with -DSINKLAB_SGEMM=blas when missing), at the emergence atlas's small and cheap scales, the tiny
# shape and a 60M-wide one; then the survey's forward (hf_forward, probe mode, batches of 20 x 64 tokens) on random
# Pythia-14M and -160M models (bench/peers/transformers_forward.py makes them once in MODELS_DIR, as
# run_hf_survey.sh does). The two builds alternate over ROUNDS rounds (a burst of foreign load hits both)
# and each keeps its best round; prints each side and the ratio (above 1: oneDNN is faster).
#   [ROUNDS=3] [BUILD_DIR=build] [BLAS_BUILD_DIR=build-sgemm-blas] [MODELS_DIR=/tmp/sinklab-hf-bench]
#   bench/run_sgemm_choice.sh [threads=1]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-1}
rounds=${ROUNDS:-3}
onednn=${BUILD_DIR:-$root/build}
blas=${BLAS_BUILD_DIR:-$root/build-sgemm-blas}
for dir in "$onednn" "$blas"; do
  want=onednn
  [ "$dir" = "$blas" ] && want=blas
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$dir" -DSINKLAB_CUDA=OFF -DSINKLAB_TESTS=OFF -DSINKLAB_SGEMM=$want >/dev/null
  fi
  cmake --build "$dir" -j"$(nproc)" --target bench_train_step hf_forward >/dev/null  # a no-op when up to date
  got=$(sed -n 's/^SINKLAB_SGEMM:STRING=//p' "$dir/CMakeCache.txt")
  [ "$got" = "$want" ] || { echo "run_sgemm_choice.sh: $dir is built with SINKLAB_SGEMM=$got, not $want" >&2; exit 1; }
done
export OMP_NUM_THREADS=$threads
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), threads=$threads, rounds=$rounds," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg), sinklab $(git -C "$root" rev-parse --short HEAD)"
# best_of <min|max> <measure> <arg>: each build's best (least or most) of ROUNDS alternating rounds of
# `measure <build dir> <arg>`, as "onednn blas"
best_of() {
  local order=-g o=() b=() r
  [ "$1" = max ] && order=-gr
  for ((r = 0; r < rounds; ++r)); do
    o+=("$("$2" "$onednn" "$3")")
    b+=("$("$2" "$blas" "$3")")
  done
  echo "$(printf '%s\n' "${o[@]}" | sort $order | head -1) $(printf '%s\n' "${b[@]}" | sort $order | head -1)"
}
step_ms() { "$1/bin/bench_train_step" $2 --no-peak | awk '{print $NF}'; }  # the last field: step_ms
seqs_per_s() {
  "$1/bin/hf_forward" --model "$2" --ids "$2/ids.safetensors" --batch 20 --mode probe --repeat 2 --threads "$threads" |
    sed -n 's/.* seqs_per_s=\([^ ]*\).*/\1/p'
}

printf "%-7s %14s %12s %7s\n" shape onednn_step_ms blas_step_ms ratio
# name: bench_train_step arguments
while IFS=: read -r name args; do
  read -r o b <<<"$(best_of min step_ms "$args")"
  awk -v n="$name" -v o="$o" -v b="$b" 'BEGIN {printf "%-7s %14.1f %12.1f %7.2f\n", n, o, b, b / o}'
done <<SHAPES
small:--vocab 85 --d 64 --layers 1 --heads 1 --ffn 256 --seq 64 --rows 128 --set pos-emb=learned --set ffn=relu --steps 20 --warmup 1
cheap:--vocab 85 --d 256 --layers 1 --heads 1 --ffn 1024 --seq 256 --rows 128 --set pos-emb=learned --set ffn=relu --steps 3 --warmup 1
tiny:--vocab 4096 --d 128 --layers 4 --heads 4 --ffn 384 --seq 256 --rows 16 --steps 10 --warmup 2
60M-r4:--vocab 50432 --d 768 --layers 10 --heads 8 --ffn 1536 --seq 256 --rows 4 --steps 2 --warmup 1
SHAPES

py="$root/.venv-oracle/bin/python"
models=${MODELS_DIR:-/tmp/sinklab-hf-bench}
bash "$root/env/oracle.sh"
printf "%-16s %13s %11s %7s\n" survey onednn_seqs/s blas_seqs/s ratio
for shape in pythia-14m pythia-160m; do
  dir="$models/$shape"
  [ -f "$dir/ids.safetensors" ] || "$py" "$root/bench/peers/transformers_forward.py" make "$shape" "$dir" >/dev/null 2>&1
  read -r o b <<<"$(best_of max seqs_per_s "$dir")"
  awk -v n="$shape" -v o="$o" -v b="$b" 'BEGIN {printf "%-16s %13.2f %11.2f %7.2f\n", n, o, b, o / b}'
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
