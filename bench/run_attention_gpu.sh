#!/usr/bin/env bash
# Issue #55's attention benchmark on a GPU, one run: every CUDA kernel through the op API with the bf16 step's
# tensors (bench_attention_gpu: cuDNN softmax, the flash kernel's sigmoid, the GEMM path's sigmoid and its
# softmax with a p-norm; the reference kernel in f32), PyTorch's SDPA (bench/peers/torch_sdpa_gpu.py) and
# PyTorch's eager sigmoid attention, the paper's way (bench/peers/torch_sigmoid_eager_gpu.py; both skipped
# without torch) at B=8, H=16, T=2048, dh=64 and 128 (DH="..." to choose), causal; then the ratios issue #55's
# targets name: cuDNN via the op >= 0.9x SDPA forward and backward; the flash sigmoid kernel >= 1.0x cuDNN
# softmax forward and >= 0.8x backward; the GEMM path >= 2x PyTorch's eager sigmoid attention.
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
peers=""
if [ "$have_torch" = 1 ]; then
  peers=$(cd "$root/bench/peers" && "$python" torch_sdpa_gpu.py "$reps" "$dh" && "$python" torch_sigmoid_eager_gpu.py "$reps" "$dh")
  echo "$peers"
else
  echo "# PyTorch with CUDA not found ($python): no SDPA or eager sigmoid line"
fi
printf '%s\n%s\n' "$ours" "$peers" | awk '
  /^attention_gpu/ { k = ""; s = ""; for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == "kernel") k = kv[2];
                     if (kv[1] == "sim") s = kv[2]; if (kv[1] == "fwd_tflops") f[k "/" s] = kv[2]; if (kv[1] == "bwd_tflops") b[k "/" s] = kv[2] } }
  function ratio(what, a, c, target_f, target_b) {
    if (f[a] > 0 && f[c] > 0)
      printf "ratio %s: forward %.2f (target >= %s), backward %.2f (target >= %s)\n", what, f[a] / f[c], target_f, b[a] / b[c], target_b }
  END {
    ratio("cudnn softmax / torch sdpa", "cudnn/softmax", "torch_sdpa/softmax", "0.9", "0.9")
    ratio("flash sigmoid / cudnn softmax", "flash/sigmoid", "cudnn/softmax", "1.0", "0.8")
    ratio("gemm sigmoid / torch eager sigmoid", "gemm/sigmoid", "torch_eager_sigmoid/sigmoid", "2", "2")
    ratio("reference softmax (f32) / cudnn softmax", "reference/softmax", "cudnn/softmax", "-", "-") }'
done
