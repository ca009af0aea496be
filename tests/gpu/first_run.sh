#!/usr/bin/env bash
# The GPU check as one device-tool command (issues #45, #56), over the build env/gpu_prebuilt.sh packed here
# (no compiling on the GPU machine): the gpu tests, the cuBLASLt fallback check, the attention benchmark beside
# PyTorch's SDPA, the 60M training step beside PyTorch, the 60M step's ledger with each op's measured time
# beside the step model's (bench/step_model.py; nsys's kernel table when nsys is there), and (time allowing)
# the 1B shape. Every part's output goes to $OUT (or ./gpu-first-run): first_run.log (everything), gpu_run.log
# and gpu_summary.txt (run.sh), ledger_60m/ (the ledger, its model, the run's log).
#
#   device run, carry [".gpu_bundle"]:  bash tests/gpu/first_run.sh [budget_s]     (default 420)
#
# PARTS (default "tests attention 60m model 1b") chooses the parts; TRAIN_60M (default "50 262144": steps, tokens
# per step) sizes the 60M run; PROFILE_60M=1 adds a short 60M run under SINKLAB_PROFILE (per-op times).
# The optional parts start only while budget_s has room for them.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
budget=${1:-420}
out=${OUT:-$root/gpu-first-run}
mkdir -p "$out"
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
exec > >(tee -a "$out/first_run.log") 2>&1
part() { echo; echo "==== $* ($(( $(date +%s) - start )) s in, $(left) s left)"; }

part "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
nproc; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.backends.cudnn.version())'

parts=" ${PARTS:-tests attention 60m model 1b} "
want() { [[ "$parts" == *" $1 "* ]]; }
if want tests; then
part "1. the gpu tests (tests/gpu/run.sh --prebuilt)"
SINKLAB_GEMM_FALLBACK_LOG="$out/gemm_fallbacks.txt" CTEST_JOBS=${CTEST_JOBS:-12} bash tests/gpu/run.sh --prebuilt
tests_rc=$?
echo "run.sh exit status $tests_rc"
# cuBLASLt's algorithms: every product that fell back to cuBLAS, by layout (the check of tests/cpp/gpu/README.md)
echo "cuBLAS fallbacks logged during the tests (distinct layouts):"
[ -f "$out/gemm_fallbacks.txt" ] && sed -E 's/^sinklab gemm fallback to cuBLAS //' "$out/gemm_fallbacks.txt" | sort | uniq -c | sort -rn | head -n 40
echo "(end of fallbacks)"
else
  bash tests/gpu/run.sh --prebuilt --unpack-only
  tests_rc=0
fi
build=$(sed -n 2p "${SINKLAB_GPU_PREBUILT_DIR:-.gpu_prebuilt}/ORIGIN")  # the build dir run.sh unpacked into
want tests && grep -E '\*\*\*(Failed|Exception|Timeout)|Failed +[0-9.]+ sec' "$build/gpu_ctest.log" | head -n 40
# run.sh's library path (its environment does not come back): for the binaries below
LD_LIBRARY_PATH=$(sed -n 's/^LD_LIBRARY_PATH=//p' "$build/gpu_ld_path" 2>/dev/null)
export LD_LIBRARY_PATH

if want attention; then
part "2. attention: cuDNN softmax, flash sigmoid, reference vs PyTorch SDPA (bench/run_attention_gpu.sh)"
[ "$(left)" -gt 60 ] && timeout $(( $(left) - 30 )) bash bench/run_attention_gpu.sh "$build" 20
fi

if want 60m; then
read -r steps_60m tokens_60m <<< "${TRAIN_60M:-50 262144}"
if [ "${PROFILE_60M:-0}" = 1 ] && [ "$(left)" -gt 120 ]; then
  part "3a. 60M under SINKLAB_PROFILE (per-op times, each op synchronised), 6 steps of $tokens_60m tokens"
  SINKLAB_PROFILE=1 PEER=0 timeout 90 bash bench/run_train_gpu.sh "$build" jobs/pretrain/60m_default.ini 6 "$tokens_60m" 2>&1 |
    grep -vE 'step [0-9]+/'
fi
part "3. 60M training step, bf16, $steps_60m steps of $tokens_60m tokens, beside PyTorch (bench/run_train_gpu.sh)"
[ "$(left)" -gt 120 ] && timeout $(( $(left) - 20 )) bash bench/run_train_gpu.sh "$build" jobs/pretrain/60m_default.ini "$steps_60m" "$tokens_60m"
fi

if want model; then
part "3b. the 60M step's ledger under SINKLAB_PROFILE beside its model (bench/step_model.py: op by op, measured / modelled)"
if [ "$(left)" -gt 90 ]; then
  ledger_dir="$out/ledger_60m"
  mkdir -p "$ledger_dir"
  python3 bench/random_shards.py "$ledger_dir" 50432
  # Steps 0-2 warm up (cuDNN graphs, cuBLASLt plans, allocations); step3 is the one modelled.
  SINKLAB_PROFILE=1 SINKLAB_LEDGER="$ledger_dir/60m_gpu.jsonl" SINKLAB_LEDGER_LAST=step3 timeout 120 \
    "$build/bin/sinklab-pretrain" --config jobs/pretrain/60m_default.ini --device cuda --steps 5 \
    --global-batch-tokens 32768 --train-data "$ledger_dir/train.bin" --valid-data "$ledger_dir/valid.bin" \
    --out-dir "$ledger_dir/run" --eval-every 0 --eval-rows 8 --probe-sequences 8 --checkpoint-every 0 \
    > "$ledger_dir/run.log" 2>&1
  python3 bench/step_model.py "$ledger_dir/60m_gpu.jsonl" --gpu h200 --json "$ledger_dir/60m_gpu_model.json"
  if command -v nsys > /dev/null && [ "$(left)" -gt 90 ]; then
    SINKLAB_LEDGER_LAST=step3 timeout 80 nsys profile -o "$ledger_dir/60m_nsys" --stats=true \
      "$build/bin/sinklab-pretrain" --config jobs/pretrain/60m_default.ini --device cuda --steps 5 \
      --global-batch-tokens 32768 --train-data "$ledger_dir/train.bin" --valid-data "$ledger_dir/valid.bin" \
      --out-dir "$ledger_dir/run_nsys" --eval-every 0 --eval-rows 8 --probe-sequences 8 --checkpoint-every 0 \
      > "$ledger_dir/nsys.log" 2>&1
    grep -A 40 "cuda_gpu_kern_sum" "$ledger_dir/nsys.log" | head -n 45
  fi
else
  echo "skipped: too little of the budget left"
fi
fi

if want 1b; then
part "4. 1B shape, bf16, 15 steps of 131072 tokens (bench/run_train_gpu.sh; PyTorch only with time left)"
if [ "$(left)" -gt 150 ]; then
  PEER=$([ "$(left)" -gt 240 ] && echo 1 || echo 0) timeout $(( $(left) - 10 )) \
    bash bench/run_train_gpu.sh "$build" jobs/pretrain/1b_default.ini 15 131072
else
  echo "skipped: too little of the budget left"
fi
fi
part "done (run.sh exit status $tests_rc)"
exit "$tests_rc"
