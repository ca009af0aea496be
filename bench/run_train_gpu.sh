#!/usr/bin/env bash
# Training throughput on a GPU (issue #45 steps 2 and 4): `sinklab-pretrain --device cuda --precision bf16`
# on a job's model shape for N steps, beside PyTorch on the same shape in the same run (bench/peers/
# torch_train_step.py: bf16 autocast, SDPA, fused AdamW, torch.compile; eager when compile fails).
#
#   bench/run_train_gpu.sh [build_dir] [config] [steps] [global_batch_tokens]
#       defaults: build-gpu, jobs/pretrain/60m_default.ini, 50, 262144
#
# Data: uniform random token ids in a shard written here (data_prep.shards): throughput depends on the
# shapes only, and a GPU machine has no corpus. The global batch is smaller than the job's 1M tokens so
# that 50 steps fit a short GPU slot; the micro-batch (rows x context per forward) is the job's, so each
# micro-step is the job's. Figures: the median over steps after the first 10 (a third of the steps when fewer than 30) of the per-step tok/s and MFU
# sinklab logs (SINKLAB_PROFILE=1 adds its per-op time table), and the peak of nvidia-smi's memory.used (sampled every 0.5 s) during each run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
config=${2:-$root/jobs/pretrain/60m_default.ini}
steps=${3:-50}
gbt=${4:-262144}
python=${PYTHON:-python3}
device=${DEVICE:-cuda}        # DEVICE=cpu PRECISION=f32 PEER=0 checks the script on a machine without a GPU
precision=${PRECISION:-bf16}
smi() { command -v nvidia-smi > /dev/null && nvidia-smi "$@" || echo 0; }
[[ -x "$build/bin/sinklab-pretrain" ]] || { echo "run_train_gpu: $build/bin/sinklab-pretrain not built" >&2; exit 1; }
key() { sed -nE "s/^$1 *= *([^ #]+).*/\1/p" "$config" | head -n1; }
vocab=$(key vocab-size); d=$(key d-model); layers=$(key n-layers); heads=$(key n-heads); ffn=$(key ffn-hidden)
ctx=$(key context); rows=$(key micro-batch-rows)
accum=$(( gbt / (rows * ctx) ))
[ "$accum" -ge 1 ] && [ $(( accum * rows * ctx )) -eq "$gbt" ] || { echo "run_train_gpu: $gbt tokens is not a multiple of $rows x $ctx" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ) $(smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"
echo "# shape of $(basename "$config"): vocab $vocab, d $d, layers $layers, heads $heads, ffn $ffn, context $ctx;" \
     "$rows rows x $ctx per micro-step, $accum micro-steps, $gbt tokens per step, $steps steps"

"$python" "$root/bench/random_shards.py" "$work" "$vocab" --train-docs 2048 --valid-docs 64

peak_mem() {  # peak_mem <pid>: max memory.used (MiB) while the process runs
  local pid=$1 peak=0 m
  while kill -0 "$pid" 2> /dev/null; do
    m=$(smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n1)
    [ "${m:-0}" -gt "$peak" ] && peak=$m
    sleep 0.5
  done
  echo "$peak"
}

"$build/bin/sinklab-pretrain" --config "$config" --device "$device" --precision "$precision" --steps "$steps" ${PRETRAIN_ARGS:-} \
  --global-batch-tokens "$gbt" --train-data "$work/train.bin" --valid-data "$work/valid.bin" --out-dir "$work/run" \
  --eval-every 0 --eval-rows 8 --probe-sequences 8 --log-every 1 --checkpoint-every 0 \
  > >(tee "$work/sinklab.log") 2>&1 &  # shown as it runs: a run stopped by a time limit still says how far it got
pid=$!
mem=$(peak_mem "$pid")
wait "$pid" || { echo "run_train_gpu: sinklab-pretrain failed" >&2; exit 1; }
skip=$(( steps >= 30 ? 10 : steps / 3 ))  # warm-up steps left out of the medians
sed -nE 's/.*step ([0-9]+)\/[0-9]+ .* ([0-9.]+) tok\/s \| MFU ([0-9.]+)%.*/\1 \2 \3/p' "$work/sinklab.log" |
  awk -v skip="$skip" '$1 > skip' > "$work/steps.txt"
n=$(wc -l < "$work/steps.txt")
[ "$n" -gt 0 ] || { echo "run_train_gpu: no steps after the first $skip logged" >&2; exit 1; }
median() { cut -d' ' -f"$1" "$work/steps.txt" | sort -g | sed -n "$(( (n + 1) / 2 ))p"; }
printf 'sinklab tokens_per_s %.0f mfu_pct %s peak_mem_gib %.2f (median of %d steps after the first %d)\n' \
  "$(median 2)" "$(median 3)" "$(echo "$mem" | awk '{print $1 / 1024}')" "$n" "$skip"

peer_steps=$(( steps < 20 ? steps : 20 ))
[ "${PEER:-1}" = 1 ] || exit 0
for mode in --compile ""; do
  timeout "${PEER_TIMEOUT:-180}" "$python" "$root/bench/peers/torch_train_step.py" --vocab "$vocab" --d "$d" --layers "$layers" --heads "$heads" \
    --ffn "$ffn" --seq "$ctx" --rows "$rows" --accum "$accum" --threads 8 --device cuda --bf16 $mode \
    --steps "$peer_steps" --warmup 3 > "$work/torch.log" 2>&1 && { tail -n 1 "$work/torch.log"; break; }
  echo "# PyTorch ${mode:-eager} failed: $(tail -n 1 "$work/torch.log")"
done
