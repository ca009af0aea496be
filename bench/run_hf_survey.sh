#!/usr/bin/env bash
# Survey forward throughput: sinklab (bench/hf_forward.cpp: the HF family forward plus the survey's
# probe, probe::SurveyProbe, on every layer's taps) against transformers eager with
# output_attentions=True (bench/peers/transformers_forward.py), on the same randomly initialised
# Pythia-shaped model directory (saved once by transformers), the same 100 x 64 token ids, the same
# number of cores. sinklab runs two ways: one process with `threads` OpenMP threads, and `threads` MPI
# ranks of one thread each sharing the sequences (how sinklab-survey runs on a node: mpirun -np <cores>);
# transformers runs one process with torch.set_num_threads(threads). All three run ROUNDS times
# alternately and keep their best pass, so a burst of foreign load hits them alike.
# Prints sequences/s of each (wall clock and CPU time of all threads), the ratio sinklab/transformers
# (> 1: sinklab faster) and each side's peak RSS (summed over ranks).
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
     "rounds=$rounds, load average $(cut -d' ' -f1-3 /proc/loadavg), torch $("$py" -c 'import torch; print(torch.__version__)')," \
     "sinklab $(git -C "$root" rev-parse --short HEAD)"
printf "%-12s %-10s %10s %10s %7s %12s %12s %7s %10s %10s\n" shape sinklab sinklab/s torch/s ratio sinklab/cpu-s \
  torch/cpu-s ratio sl_peakMiB th_peakMiB
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
best() { sort -g | tail -1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args() { echo --model "$1" --ids "$1/ids.safetensors" --batch "$batch" --mode "$mode" --repeat 2; }
for shape in pythia-14m pythia-160m; do
  dir="$models/$shape"
  [ -f "$dir/ids.safetensors" ] || "$py" "$peer" make "$shape" "$dir" >/dev/null 2>&1
  threaded=() ranked=() theirs=()
  for ((r = 0; r < rounds; ++r)); do
    threaded+=("$("$build/bin/hf_forward" $(args "$dir") --threads "$threads")")
    ranked+=("$(OMP_NUM_THREADS=1 mpirun -np "$threads" --oversubscribe --bind-to none \
                 "$build/bin/hf_forward" $(args "$dir") --threads 1)")
    theirs+=("$("$py" "$peer" run "$dir" --threads "$threads" --batch "$batch" --mode "$mode" --repeat 2 2>/dev/null \
                | grep '^transformers')")
  done
  t=$(printf "%s\n" "${theirs[@]}" | field seqs_per_s | best)
  tc=$(printf "%s\n" "${theirs[@]}" | field seqs_per_cpu_s | best)
  tm=$(printf "%s\n" "${theirs[@]}" | field peak_mib | sort -g | head -1)
  for kind in threaded ranked; do
    declare -n runs=$kind
    label=$([ $kind = threaded ] && echo "1x$threads" || echo "${threads}x1 ranks")
    o=$(printf "%s\n" "${runs[@]}" | field seqs_per_s | best)
    oc=$(printf "%s\n" "${runs[@]}" | field seqs_per_cpu_s | best)
    om=$(printf "%s\n" "${runs[@]}" | field peak_mib | sort -g | head -1)
    awk -v s="$shape" -v k="$label" -v o="$o" -v t="$t" -v oc="$oc" -v tc="$tc" -v om="$om" -v tm="$tm" \
      'BEGIN {printf "%-12s %-10s %10.2f %10.2f %7.2f %12.2f %12.2f %7.2f %10.1f %10.1f\n", s, k, o, t, o / t, oc, tc, oc / tc, om, tm}'
    unset -n runs
  done
done
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
