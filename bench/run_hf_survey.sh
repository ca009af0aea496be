#!/usr/bin/env bash
# Survey forward throughput: sinklab (bench/hf_forward.cpp: the HF family forward plus the sink probe on
# every layer's taps) against transformers eager with output_attentions=True
# (bench/peers/transformers_forward.py), on the same randomly initialised Pythia-shaped model directory
# (saved once by transformers), the same 100 x 64 token ids, the same thread count. Both sides run
# ROUNDS times alternately and keep their best pass, so a burst of foreign load hits both alike.
# Prints sequences/s of each (wall clock and CPU time of all threads), the ratio sinklab/transformers
# (> 1: sinklab faster) and each process's peak RSS.
#
#   [ROUNDS=3] [BUILD_DIR=build] [MODELS_DIR=/tmp/sinklab-hf-bench] bench/run_hf_survey.sh \
#       [threads=2] [batch=20] [mode=probe|logits]
#
# mode probe: no LM head on either side (transformers' base model), the survey's work; logits: the
# CausalLM / sinklab's head too. The model directories (56 MB and 650 MB) are made on first use.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2}
batch=${2:-20}
mode=${3:-probe}
rounds=${ROUNDS:-3}
build=${BUILD_DIR:-$root/build}
models=${MODELS_DIR:-/tmp/sinklab-hf-bench}
py="$root/.venv-oracle/bin/python"
peer="$root/bench/peers/transformers_forward.py"
bash "$root/env/oracle.sh"
if [ ! -x "$build/bin/hf_forward" ]; then
  cmake -S "$root" -B "$build" >/dev/null
  make -C "$build" -j"$threads" hf_forward >/dev/null
fi
export OMP_NUM_THREADS=$threads
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(lscpu | sed -n 's/^Model name: *//p'), threads=$threads, batch=$batch, mode=$mode," \
     "rounds=$rounds, load average $(cut -d' ' -f1-3 /proc/loadavg), torch $("$py" -c 'import torch; print(torch.__version__)')"
printf "%-12s %10s %10s %7s %12s %12s %7s %10s %10s\n" shape sinklab/s torch/s ratio sinklab/cpu-s torch/cpu-s \
  ratio sl_peakMiB th_peakMiB
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
best() { sort -g | tail -1; }
for shape in pythia-14m pythia-160m; do
  dir="$models/$shape"
  [ -f "$dir/ids.safetensors" ] || "$py" "$peer" make "$shape" "$dir" >/dev/null 2>&1
  ours=() theirs=()
  for ((r = 0; r < rounds; ++r)); do
    ours+=("$("$build/bin/hf_forward" --model "$dir" --ids "$dir/ids.safetensors" --threads "$threads" \
               --batch "$batch" --mode "$mode" --repeat 2)")
    theirs+=("$("$py" "$peer" run "$dir" --threads "$threads" --batch "$batch" --mode "$mode" --repeat 2 2>/dev/null \
                | grep '^transformers')")
  done
  o=$(printf "%s\n" "${ours[@]}" | field seqs_per_s | best)
  t=$(printf "%s\n" "${theirs[@]}" | field seqs_per_s | best)
  oc=$(printf "%s\n" "${ours[@]}" | field seqs_per_cpu_s | best)
  tc=$(printf "%s\n" "${theirs[@]}" | field seqs_per_cpu_s | best)
  om=$(printf "%s\n" "${ours[@]}" | field peak_mib | sort -g | head -1)
  tm=$(printf "%s\n" "${theirs[@]}" | field peak_mib | sort -g | head -1)
  awk -v s="$shape" -v o="$o" -v t="$t" -v oc="$oc" -v tc="$tc" -v om="$om" -v tm="$tm" \
    'BEGIN {printf "%-12s %10.2f %10.2f %7.2f %12.2f %12.2f %7.2f %10.1f %10.1f\n", s, o, t, o / t, oc, tc, oc / tc, om, tm}'
done
