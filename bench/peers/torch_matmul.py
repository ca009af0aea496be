"""PyTorch peer of bench/bench_sgemm.cpp: the same f32 products on the CPU with the same thread count.
Reads the shapes ("name kind M N K", from `bench_sgemm --list`) on stdin and prints
"name kind M N K GFLOP/s" per shape. kind: linear = F.linear(x[M,K], W[N,K]); nn = a[M,K] @ b[K,N];
tn = a[K,M].T @ b[K,N].   Usage: bench_sgemm --list | python torch_matmul.py --threads 2 [--reps 3]
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for line in sys.stdin:
        if not line.strip():
            continue
        name, kind, M, N, K = line.split()
        M, N, K = int(M), int(N), int(K)
        if kind == "linear":
            a, b = torch.randn(M, K), torch.randn(N, K) * 0.02
            run = lambda: F.linear(a, b)  # noqa: E731
        elif kind == "nn":
            a, b = torch.randn(M, K), torch.randn(K, N) * 0.02
            run = lambda: torch.matmul(a, b)  # noqa: E731
        elif kind == "tn":
            a, b = torch.randn(K, M), torch.randn(K, N) * 0.02
            run = lambda: torch.matmul(a.t(), b)  # noqa: E731
        else:
            raise SystemExit(f"unknown kind {kind}")
        flops = 2.0 * M * N * K
        n = min(args.reps, 2) if flops > 1e11 else 20 * args.reps if flops < 1e9 else args.reps
        with torch.no_grad():
            run()  # warm-up
            best = float("inf")
            for _ in range(n):
                t0 = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - t0)
        print(f"{name} {kind} {M} {N} {K} {flops / best * 1e-9:.1f}", flush=True)


if __name__ == "__main__":
    main()
