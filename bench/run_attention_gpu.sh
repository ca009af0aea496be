#!/usr/bin/env bash
# Issue #14's attention benchmark on a GPU, one run: cuDNN softmax, the flash kernel's sigmoid, the reference
# kernel (bench_attention_gpu) and PyTorch's SDPA (bench/peers/torch_sdpa_gpu.py, skipped without torch) at
# B=8, H=16, T=2048, dh=64 and 128 (DH="..." to choose), causal; then the ratios the issue's targets name (on an H100: cuDNN forward
# >= 450 TFLOP/s, flash sigmoid forward >= 1.1x cuDNN softmax, backward >= 0.9x).
# Usage: bench/run_attention_gpu.sh [build_dir] [reps]   (e.g. after tests/gpu/run.sh: build-gpu)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
reps=${2:-20}
python=${PYTHON:-python3}
[[ -x "$build/bin/bench_attention_gpu" ]] || { echo "run_attention_gpu: $build/bin/bench_attention_gpu not built" >&2; exit 1; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1)"
have_torch=0
"$python" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && have_torch=1
for dh in ${DH:-64 128}; do
echo "# dh=$dh"
ours=$("$build/bin/bench_attention_gpu" "$reps" 1 "$dh")
echo "$ours"
peer=""
if [ "$have_torch" = 1 ]; then
  peer=$("$python" "$root/bench/peers/torch_sdpa_gpu.py" "$reps" "$dh")
  echo "$peer"
else
  echo "# PyTorch with CUDA not found ($python): no SDPA line"
fi
printf '%s\n%s\n' "$ours" "$peer" | awk '
  /^attention_gpu/ { k = ""; for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == "kernel") k = kv[2];
                     if (kv[1] == "fwd_tflops") f[k] = kv[2]; if (kv[1] == "bwd_tflops") b[k] = kv[2] } }
  END {
    if (f["cudnn"] > 0 && f["flash"] > 0) {
      printf "ratio flash sigmoid / cudnn softmax: forward %.2f (target >= 1.1), backward %.2f (target >= 0.9)\n",
             f["flash"] / f["cudnn"], b["flash"] / b["cudnn"] }
    if (f["cudnn"] > 0) printf "cudnn softmax forward %.1f TFLOP/s (H100 target >= 450)\n", f["cudnn"]
    if (f["torch_sdpa"] > 0 && f["cudnn"] > 0)
      printf "ratio cudnn / torch sdpa: forward %.2f, backward %.2f\n", f["cudnn"] / f["torch_sdpa"], b["cudnn"] / b["torch_sdpa"]
    if (f["reference"] > 0 && f["cudnn"] > 0)
      printf "ratio reference / cudnn: forward %.4f, backward %.4f\n", f["reference"] / f["cudnn"], b["reference"] / b["cudnn"] }'
done
