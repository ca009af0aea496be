"""PyTorch's eager sigmoid attention on the GPU, the paper's way (the T x T scores in memory), at
bench/bench_attention_gpu.cpp's shape (B=8, H=16, T=2048, causal, bf16): s = q k^T / sqrt(dh) - log T, the
causal mask, P = sigmoid(s) (norm one: no normalisation), o = P v; forward and backward (autograd), timed with
CUDA events (median of `reps` after 2 warm-up calls), FLOPs counted as bench_attention_gpu counts them. Prints
one line in its format (kernel=torch_eager_sigmoid). The GEMM path's target is >= 2x this.
Usage: python torch_sigmoid_eager_gpu.py [reps] [dh]   (dh 128 by default)"""
import math
import sys

import torch

from torch_sdpa_gpu import T, inputs, time_and_print


def sigmoid_attention(q, k, v, mask, bias):
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1])) + bias
    p = torch.sigmoid(s.masked_fill(~mask, float("-inf")))
    return torch.matmul(p, v)


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    dh = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    q, k, v, go = inputs(dh)
    mask = torch.ones(T, T, device="cuda", dtype=torch.bool).tril()
    time_and_print("torch_eager_sigmoid", "sigmoid", lambda: sigmoid_attention(q, k, v, mask, -math.log(T)), go, reps,
                   dh)


if __name__ == "__main__":
    main()
