"""PyTorch eager peer of bench/bench_attention.cpp: F.scaled_dot_product_attention(is_causal=True),
forward + backward, f32 on the CPU, q/k/v as head views of one fused [B, T, 3d] QKV tensor (the layout
of an eager transformer: qkv(x).view(B, T, 3, H, dh) then transpose to [B, H, T, dh]).

Usage: python torch_attention.py [reps] [threads]   (threads default: OMP_NUM_THREADS or torch's default)
Output, one line per shape, same format as the C++ benchmark.
"""
import os
import sys
import time

import torch
import torch.nn.functional as F


def run(d, H, T, tokens, reps):
    B, dh = tokens // T, d // H
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(B, T, 3 * d, generator=g).requires_grad_(True)
    dout = torch.randn(B, H, T, dh, generator=g)

    def step():
        q, k, v = qkv.view(B, T, 3, H, dh).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        t0 = time.perf_counter()
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t1 = time.perf_counter()
        qkv.grad = None
        o.backward(dout)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    for _ in range(2):
        step()
    best_f = best_b = 1e30
    for _ in range(reps):
        f, b = step()
        best_f, best_b = min(best_f, f), min(best_b, b)
    print(f"attention d={d} H={H} T={T} B={B} fwd_ms={best_f * 1e3:.3f} bwd_ms={best_b * 1e3:.3f} "
          f"tokens_per_s={B * T / (best_f + best_b):.0f}")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    print(f"# torch {torch.__version__} F.scaled_dot_product_attention (cpu, f32, causal), "
          f"{torch.get_num_threads()} threads, best of {reps}")
    run(128, 4, 256, 4096, reps)
    run(768, 8, 256, 4096, reps)


if __name__ == "__main__":
    main()
