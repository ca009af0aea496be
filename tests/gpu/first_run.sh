#!/usr/bin/env bash
# Issue #45's GPU check as one device-tool command, over the build env/gpu_prebuilt.sh packed here (no
# compiling on the GPU machine): the gpu tests, the cuBLASLt fallback check, the attention benchmark beside
# PyTorch's SDPA, the 60M training step beside PyTorch, and (time allowing) the 1B shape. Every part's output
# goes to $OUT (or ./gpu-first-run): first_run.log (everything), gpu_run.log and gpu_summary.txt (run.sh).
#
#   device run, carry [".gpu_bundle"]:  bash tests/gpu/first_run.sh [budget_s]     (default 420)
#
# The optional parts start only while budget_s has room for them (their sizes measured on a first try).
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

part "1. the gpu tests (tests/gpu/run.sh --prebuilt)"
SINKLAB_GEMM_FALLBACK_LOG="$out/gemm_fallbacks.txt" CTEST_JOBS=${CTEST_JOBS:-12} bash tests/gpu/run.sh --prebuilt
tests_rc=$?
build=$(sed -n 2p .gpu_prebuilt/ORIGIN)
echo "run.sh exit status $tests_rc"
# cuBLASLt's algorithms: every product that fell back to cuBLAS, by layout (the check of tests/cpp/gpu/README.md)
echo "cuBLAS fallbacks logged during the tests (distinct layouts):"
[ -f "$out/gemm_fallbacks.txt" ] && sed -E 's/^sinklab gemm fallback to cuBLAS //' "$out/gemm_fallbacks.txt" | sort | uniq -c | sort -rn | head -n 40
echo "(end of fallbacks)"
grep -E '\*\*\*(Failed|Exception|Timeout)|Failed +[0-9.]+ sec' "$build/gpu_ctest.log" | head -n 40
# run.sh's library path (its environment does not come back): for the binaries below
LD_LIBRARY_PATH=$(sed -n 's/^LD_LIBRARY_PATH=//p' "$build/gpu_ld_path" 2>/dev/null)
export LD_LIBRARY_PATH

part "2. attention: cuDNN softmax, flash sigmoid, reference vs PyTorch SDPA (bench/run_attention_gpu.sh)"
[ "$(left)" -gt 60 ] && timeout $(( $(left) - 30 )) bash bench/run_attention_gpu.sh "$build" 20

part "3. 60M training step, bf16, 50 steps, beside PyTorch (bench/run_train_gpu.sh)"
[ "$(left)" -gt 120 ] && timeout $(( $(left) - 20 )) bash bench/run_train_gpu.sh "$build" jobs/pretrain/60m_default.ini 50 262144

part "4. 1B shape, bf16, 15 steps of 131072 tokens (bench/run_train_gpu.sh; PyTorch only with time left)"
if [ "$(left)" -gt 150 ]; then
  PEER=$([ "$(left)" -gt 240 ] && echo 1 || echo 0) timeout $(( $(left) - 10 )) \
    bash bench/run_train_gpu.sh "$build" jobs/pretrain/1b_default.ini 15 131072
else
  echo "skipped: too little of the budget left"
fi
part "done (run.sh exit status $tests_rc)"
exit "$tests_rc"
