"""Golden file for the attention op tests (tests/cpp/test_ops_attention.cpp).

Reference: explicit causal softmax attention in torch float64 with autograd, written out rather than
F.scaled_dot_product_attention so the oracle is the textbook formula:
    s = scale * q k^T + causal mask (-inf above the diagonal),  P = softmax(s),  o = P v
Grouped-query attention repeats each key/value head over its group of query heads
(repeat_interleave: query head h reads kv head h // (H / Hkv)). Backward: autograd of sum(o * dout)
for a random upstream gradient dout.

Per case "<c>": inputs q [B,T,H,dh], k/v [B,T,Hkv,dh], dout [B,T,H,dh] (f32, exactly representable);
outputs out, probs [B,H,T,T], lse [B,H,T] (the log-normaliser, what stats holds), dq, dk, dv (f64).
Parameters: B, T, H, Hkv, dh, scale (the value passed to the op: 0 means 1/sqrt(dh)).

Usage: python gen_attention.py OUT_DIR
"""
import math
import os
import sys
import zlib

import numpy as np
import torch

from golden_io import f32_input, save_golden

CASES = {
    # name: (B, T, H, Hkv, dh, scale)
    "t1": (1, 1, 2, 2, 8, 0.0),        # a single position: P = 1, o = v
    "t67": (1, 67, 1, 1, 8, 0.0),      # more than one 64-row query block, odd length
    "h1": (1, 16, 1, 1, 8, 0.0),      # one head
    "gqa": (1, 18, 4, 2, 8, 0.0),      # grouped-query attention, 2 query heads per kv head
    "mqa": (1, 14, 3, 1, 8, 0.0),      # multi-query: every head shares one kv head
    "dh12": (1, 15, 2, 1, 12, 0.0),    # head dim not a multiple of 8
    "b2": (2, 12, 4, 2, 8, 0.0),       # two sequences
    "scale": (1, 12, 2, 2, 8, 0.37),   # custom scale
}


def reference(q, k, v, dout, scale):
    B, T, H, dh = q.shape
    Hkv = k.shape[2]
    q = torch.from_numpy(q).double().requires_grad_(True)
    k = torch.from_numpy(k).double().requires_grad_(True)
    v = torch.from_numpy(v).double().requires_grad_(True)
    s_eff = scale if scale > 0 else 1.0 / math.sqrt(dh)
    kr = k.repeat_interleave(H // Hkv, dim=2)
    vr = v.repeat_interleave(H // Hkv, dim=2)
    qh, kh, vh = q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2)  # [B,H,T,dh]
    s = s_eff * qh @ kh.transpose(-1, -2)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    s = s.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)
    o = (p @ vh).transpose(1, 2)  # [B,T,H,dh]
    (o * torch.from_numpy(dout).double()).sum().backward()
    return {"out": o, "probs": p, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}


def main(out_dir):
    tensors, params = {}, {}
    for name, (B, T, H, Hkv, dh, scale) in CASES.items():
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        q = f32_input(rng, B, T, H, dh)
        k = f32_input(rng, B, T, Hkv, dh)
        v = f32_input(rng, B, T, Hkv, dh)
        dout = f32_input(rng, B, T, H, dh)
        ref = reference(q, k, v, dout, scale)
        for key, arr in (("q", q), ("k", k), ("v", v), ("dout", dout)):
            tensors[f"{name}/{key}"] = arr
        for key, t in ref.items():
            tensors[f"{name}/{key}"] = t.detach().contiguous().numpy().astype(np.float64)
        for key, val in (("B", B), ("T", T), ("H", H), ("Hkv", Hkv), ("dh", dh), ("scale", scale)):
            params[f"{name}/{key}"] = val
    path = os.path.join(out_dir, "attention.safetensors")
    save_golden(path, tensors, params)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(CASES)} cases)")


if __name__ == "__main__":
    torch.manual_seed(0)
    main(sys.argv[1])
