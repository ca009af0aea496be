#!/usr/bin/env bash
# The step ledger of a real job's CUDA training step, counted on the CPU
# (issue #53; docs/DESIGN.md, "The step ledger"): sinklab-pretrain built over the CUDA emulation (tests/gpu/emu, target emu_sinklab_pretrain)
# runs the job's model at its real shape and micro-batch for 2 optimizer steps of 2 micro-steps each under
# SINKLAB_EMU_COUNT_ONLY=1 (every launch, library call, copy and host synchronisation counted, none run:
# seconds, and no memory touched) with SINKLAB_LEDGER on; bench/step_model.py then models the second step
# on a GPU and checks issue #53's limits.
#
#   bench/run_step_ledger.sh [--check] [--gpu h200] [--out DIR] [job.ini ...]
#       default jobs: jobs/pretrain/60m_default.ini (checked as "60m") and jobs/pretrain/1b_default.ini ("1b")
#       --check: exit 1 when a job misses a limit (tests/gpu/emulate.sh runs it so in CI)
#
# Needs the CPU build with the emulated binary (SINKLAB_BUILD_DIR, default build/:
# cmake --build build --target emu_sinklab_pretrain). Writes DIR/<job>.jsonl (the ledger), DIR/<job>.json
# (the model) and prints the model's table. DIR defaults to <build>/ledger.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SINKLAB_BUILD_DIR:-$root/build}
python=${PYTHON:-$root/.venv/bin/python}
check=0 gpu=h200 out=""
jobs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1; shift ;;
    --gpu) gpu=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) jobs+=("$1"); shift ;;
  esac
done
[ ${#jobs[@]} -gt 0 ] || jobs=("$root/jobs/pretrain/60m_default.ini" "$root/jobs/pretrain/1b_default.ini")
out=${out:-$build/ledger}
exe="$build/emu/bin/emu_sinklab_pretrain"
[ -x "$exe" ] || { echo "run_step_ledger: $exe not built (cmake --build $build --target emu_sinklab_pretrain)" >&2; exit 2; }
mkdir -p "$out"

key() { sed -nE "s/^$1 *= *([^ #]+).*/\1/p" "$2" | head -n1; }
rc=0
for config in "${jobs[@]}"; do
  name=$(basename "$config" .ini)
  vocab=$(key vocab-size "$config"); ctx=$(key context "$config"); rows=$(key micro-batch-rows "$config")
  # Token ids of the job's vocabulary (the count does not read them; the data loader does).
  "$python" "$root/bench/random_shards.py" "$out/data-$vocab" "$vocab"
  rm -rf "$out/$name.run"
  SINKLAB_EMU_COUNT_ONLY=1 SINKLAB_LEDGER="$out/$name.jsonl" SINKLAB_LEDGER_LAST=step1 OMP_NUM_THREADS=1 \
    "$exe" --config "$config" --device cuda --steps 3 --global-batch-tokens $(( 2 * rows * ctx )) \
    --train-data "$out/data-$vocab/train.bin" --valid-data "$out/data-$vocab/valid.bin" --out-dir "$out/$name.run" \
    --eval-every 0 --eval-rows 8 --probe-sequences 8 --log-every 1 --checkpoint-every 0 > "$out/$name.log" 2>&1 \
    || { echo "run_step_ledger: the counted run of $config failed: $out/$name.log" >&2; tail -n 5 "$out/$name.log" >&2; exit 1; }
  case "$name" in 60m_default) job=60m ;; 1b_default) job=1b ;; *) job="" ;; esac
  echo "== $name ($config): 2 micro-steps of $rows x $ctx tokens"
  args=("$out/$name.jsonl" --gpu "$gpu" --json "$out/$name.json")
  [ "$check" = 1 ] && [ -n "$job" ] && args+=(--check "$job")
  "$python" "$root/bench/step_model.py" "${args[@]}" || rc=1
done
exit $rc
