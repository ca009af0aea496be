"""PyTorch's eager sigmoid attention on the GPU, the paper's way (the T x T scores in memory), at
bench/bench_attention_gpu.cpp's shape (B=8, H=16, T=2048, causal, bf16): s = q k^T / sqrt(dh) - log T, the
causal mask, P = sigmoid(s) (norm one: no normalisation), o = P v; forward and backward (autograd), timed with
CUDA events (median of `reps` after 2 warm-up calls), FLOPs counted as bench_attention_gpu counts them. Prints
one line in its format (kernel=torch_eager_sigmoid). The GEMM path's target is >= 2x this.
Usage: python torch_sigmoid_eager_gpu.py [reps] [dh]   (dh 128 by default)"""
import math
import sys

import torch

from torch_sdpa_gpu import median_ms


def sigmoid_attention(q, k, v, mask, bias):
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1])) + bias
    p = torch.sigmoid(s.masked_fill(~mask, float("-inf")))
    return torch.matmul(p, v)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    dh = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    B, H, T = 8, 16, 2048
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, go = (torch.randn(B, H, T, dh, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    mask = torch.ones(T, T, device="cuda", dtype=torch.bool).tril()
    bias = -math.log(T)
    fwd = lambda: sigmoid_attention(q, k, v, mask, bias)
    for _ in range(2):
        fwd().backward(go)
    fwd_ms = median_ms(fwd, reps)
    outs = [fwd() for _ in range(reps)]  # each backward gets its own graph
    it = iter(outs)
    bwd_ms = median_ms(lambda: next(it).backward(go), reps)
    flops = 4.0 * B * H * T * T * dh / 2.0
    print(f"attention_gpu kernel=torch_eager_sigmoid sim=sigmoid B={B} H={H} T={T} dh={dh} fwd_ms={fwd_ms:.3f} "
          f"bwd_ms={bwd_ms:.3f} fwd_tflops={flops / (fwd_ms * 1e-3) / 1e12:.1f} "
          f"bwd_tflops={2.5 * flops / (bwd_ms * 1e-3) / 1e12:.1f} torch={torch.__version__}")


if __name__ == "__main__":
    main()
