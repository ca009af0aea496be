"""PyTorch's SDPA on the GPU at issue #14's shape (B=8, H=16, T=2048, dh=128, causal, bf16), forward and
backward, timed with CUDA events (median of `reps` after 2 warm-up calls), FLOPs counted as
bench/bench_attention_gpu.cpp counts them. Prints one line in its format (kernel=torch_sdpa). torch_sigmoid_eager_gpu.py shares its timer.
Usage: python torch_sdpa_gpu.py [reps] [dh]   (dh 128 by default)"""
import sys

import torch
import torch.nn.functional as F


def median_ms(fn, reps):
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


B, H, T = 8, 16, 2048


def inputs(dh):
    """q, k, v (requiring gradients) and d_out, bf16 [B, H, T, dh], seeded."""
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, go = (torch.randn(B, H, T, dh, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    return q, k, v, go


def time_and_print(kernel, sim, fwd, go, reps, dh):
    """Times fwd() and its backward (median of reps after 2 warm-up calls) and prints bench_attention_gpu's line."""
    for _ in range(2):
        fwd().backward(go)
    fwd_ms = median_ms(fwd, reps)
    outs = [fwd() for _ in range(reps)]  # each backward gets its own graph
    it = iter(outs)
    bwd_ms = median_ms(lambda: next(it).backward(go), reps)
    flops = 4.0 * B * H * T * T * dh / 2.0
    print(f"attention_gpu kernel={kernel} sim={sim} B={B} H={H} T={T} dh={dh} fwd_ms={fwd_ms:.3f} "
          f"bwd_ms={bwd_ms:.3f} fwd_tflops={flops / (fwd_ms * 1e-3) / 1e12:.1f} "
          f"bwd_tflops={2.5 * flops / (bwd_ms * 1e-3) / 1e12:.1f} torch={torch.__version__}")


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    dh = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    q, k, v, go = inputs(dh)
    time_and_print("torch_sdpa", "softmax", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), go,
                   reps, dh)


if __name__ == "__main__":
    main()
