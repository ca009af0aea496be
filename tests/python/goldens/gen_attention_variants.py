"""Golden file for the attention variant tests (tests/cpp/test_ops_attention_variants.cpp).

Reference: the formulas of the paper (Gu et al., ICLR 2025, Sec. 7.3-7.4, Tables 14-15, Eq. 43-44)
written out in torch float64 with autograd, independently of the C++ pieces:
    s_ij = scale * q_i . k_j                 over the keys j that the mask lets query i see:
           causal j <= i;  sliding_window (w) i - w < j <= i;  prefix_lm (p) j < p or j <= i
    w_ij = sim(s_ij)       exp: e^s | sigmoid: 1 / (1 + e^-(s + b)) | elu_plus_one: elu(s) + 1 | identity: s
    Z_i  = norm(w_i.)      sum: (1/alpha) sum_j w_ij (Table 14 left: the scores sum to alpha)
                           one: 1 | max_abs_sum_one: max(|sum_j w_ij|, 1)
                           p_norm: (sum_j w_ij^p)^(1/p)   (Eq. 43; for exp it is Eq. 44)
    P_ij = w_ij / Z_i (0 where masked),  o_i = sum_j P_ij v_j
Learned per-head sink logit S_h (gpt-oss style; variants "sink_*"): Z_i = sim(S_h) + sum_j w_ij for
norm sum (softmax: e^{S_h} + sum_j e^{s_ij}); the sink has no value, P keeps only the real keys and
the backward also gives dL/dS_h (d_sink, summed over batch and queries).
Grouped-query attention: query head h reads kv head h // (H / Hkv). Backward: autograd of sum(o * dout).
The row statistic the op stores (stats): log Z_i for sim exp (the running-max variants), else the row
reduction R_i = sum_j term(w_ij) (term: w for sum / max_abs_sum_one, w^p for p_norm, 0 for one).

Layout: shared inputs per shape "in_<shape>/{q,k,v,dout}" (f32, exactly representable); per variant
and shape "<variant>@<shape>/{out,stats,probs,dq,dk,dv}" (f64), with a sink also the input
"sink_logit" [H] (f32) and "d_sink" [H] (f64); the spec of a variant as parameters
"<variant>/{sim,norm,mask,window,prefix,sigmoid_bias,norm_alpha,norm_p}" (enums by their index).
For the long shape t67, probs holds only the rows listed in in_t67/prow (int32) to keep the file small.

Usage: python gen_attention_variants.py OUT_DIR
"""
import math
import os
import sys
import zlib

import numpy as np
import torch

from golden_io import f32_input, save_golden

SHAPES = {
    # name: (B, T, H, Hkv, dh)
    "t1": (1, 1, 2, 2, 8),     # a single position
    "t67": (1, 67, 1, 1, 2),   # two query blocks (64 + 3), one head
    "gqa": (1, 6, 4, 2, 4),    # grouped-query attention, 2 query heads per kv head
}
PROW = [40, 64, 66]  # the t67 rows of probs that are stored

SIM = {"exp": 0, "sigmoid": 1, "elu_plus_one": 2, "identity": 3}
NORM = {"sum": 0, "one": 1, "max_abs_sum_one": 2, "p_norm": 3}
MASK = {"causal": 0, "sliding_window": 1, "prefix_lm": 2}

ALL = ("t1", "t67", "gqa")
SMALL = ("t1", "gqa")


def variant(sim, norm, mask="causal", shapes=ALL, window=0, prefix=0, bias=0.0, alpha=1.0, p=1.0, sink=False):
    return dict(sim=sim, norm=norm, mask=mask, shapes=shapes, window=window, prefix=prefix, bias=bias,
                alpha=alpha, p=p, sink=sink)


VARIANTS = {
    # 1. masks (softmax)
    "sliding_w5": variant("exp", "sum", "sliding_window", window=5),
    "sliding_w1": variant("exp", "sum", "sliding_window", shapes=SMALL, window=1),
    "prefix_p4": variant("exp", "sum", "prefix_lm", prefix=4),
    "prefix_p40": variant("exp", "sum", "prefix_lm", shapes=("t67",), prefix=40),
    # 2. sigmoid attention without / with normalisation (Table 15 rows 2-3)
    "sigmoid_one": variant("sigmoid", "one", bias=-math.log(16.0)),
    "sigmoid_sum": variant("sigmoid", "sum"),
    # 3. kernels of Table 15 with sum / one / max(|sum|, 1)
    "elu_sum": variant("elu_plus_one", "sum"),
    "elu_one": variant("elu_plus_one", "one"),
    "elu_maxabs": variant("elu_plus_one", "max_abs_sum_one"),
    "identity_sum": variant("identity", "sum", shapes=("t1",)),  # Z = sum s can cross 0: T = 1 only
    "identity_one": variant("identity", "one"),
    "identity_maxabs": variant("identity", "max_abs_sum_one"),
    # 4. alpha-scaled softmax (Table 14 left) and p-normalised softmax / sigmoid (Eq. 43-44)
    "alpha_0.5": variant("exp", "sum", alpha=0.5),
    "softmax_p0.25": variant("exp", "p_norm", p=0.25),
    "softmax_p0.333": variant("exp", "p_norm", shapes=SMALL, p=1.0 / 3.0),
    "softmax_p0.5": variant("exp", "p_norm", shapes=SMALL, p=0.5),
    "softmax_p2": variant("exp", "p_norm", shapes=SMALL, p=2.0),
    "softmax_p3": variant("exp", "p_norm", shapes=SMALL, p=3.0),
    "softmax_p4": variant("exp", "p_norm", p=4.0),
    "sigmoid_p0.5": variant("sigmoid", "p_norm", shapes=SMALL, p=0.5),
    "sigmoid_p2": variant("sigmoid", "p_norm", shapes=SMALL, p=2.0),
    "sigmoid_p3": variant("sigmoid", "p_norm", p=3.0),
    "sigmoid_p0.25": variant("sigmoid", "p_norm", shapes=SMALL, p=0.25),
    # 5. learned per-head sink logit in the denominator (gpt-oss style)
    "sink_softmax": variant("exp", "sum", sink=True),
    "sink_sigmoid_sum": variant("sigmoid", "sum", shapes=SMALL, sink=True),
}


def visible(mask, T, window, prefix):
    i = torch.arange(T).unsqueeze(1)
    j = torch.arange(T).unsqueeze(0)
    if mask == "causal":
        return j <= i
    if mask == "sliding_window":
        return (j <= i) & (j > i - window)
    if mask == "prefix_lm":
        return (j <= i) | (j < prefix)
    raise ValueError(mask)


def reference(q, k, v, dout, cfg, sink_logit=None):
    B, T, H, dh = q.shape
    Hkv = k.shape[2]
    q = torch.from_numpy(q).double().requires_grad_(True)
    k = torch.from_numpy(k).double().requires_grad_(True)
    v = torch.from_numpy(v).double().requires_grad_(True)
    scale = 1.0 / math.sqrt(dh)
    kr = k.repeat_interleave(H // Hkv, dim=2)
    vr = v.repeat_interleave(H // Hkv, dim=2)
    qh, kh, vh = q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2)  # [B,H,T,dh]
    s = scale * qh @ kh.transpose(-1, -2)
    vis = visible(cfg["mask"], T, cfg["window"], cfg["prefix"])
    sim = cfg["sim"]
    sink = None
    if sink_logit is not None:
        sink = torch.from_numpy(sink_logit).double().requires_grad_(True)
    if sim == "exp":
        w = torch.exp(s)
        sink_w = None if sink is None else torch.exp(sink)
    elif sim == "sigmoid":
        w = torch.sigmoid(s + cfg["bias"])
        sink_w = None if sink is None else torch.sigmoid(sink + cfg["bias"])
    elif sim == "elu_plus_one":
        w = torch.nn.functional.elu(s) + 1.0
    else:
        w = s
    w = torch.where(vis, w, torch.zeros_like(w))
    norm = cfg["norm"]
    if norm == "sum":
        R = w.sum(-1)
        if sink is not None:
            assert sim in ("exp", "sigmoid")
            R = R + sink_w.view(1, -1, 1)  # [B,H,T] + the head's sink weight
        Z = R / cfg["alpha"]
    elif norm == "one":
        R = torch.zeros_like(w.sum(-1))
        Z = torch.ones_like(R)
    elif norm == "max_abs_sum_one":
        R = w.sum(-1)
        Z = torch.clamp(R.abs(), min=1.0)
    else:
        R = (w ** cfg["p"]).sum(-1)
        Z = R ** (1.0 / cfg["p"])
    P = w / Z.unsqueeze(-1)
    o = (P @ vh).transpose(1, 2)  # [B,T,H,dh]
    (o * torch.from_numpy(dout).double()).sum().backward()
    stats = torch.log(Z) if sim == "exp" else R
    ref = {"out": o, "stats": stats, "probs": P, "dq": q.grad, "dk": k.grad, "dv": v.grad}
    if sink is not None:
        ref["d_sink"] = sink.grad
    return ref, R


def main(out_dir):
    tensors, params = {}, {}
    inputs = {}
    for name, (B, T, H, Hkv, dh) in SHAPES.items():
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        inputs[name] = tuple(f32_input(rng, *sh) for sh in ((B, T, H, dh), (B, T, Hkv, dh), (B, T, Hkv, dh),
                                                            (B, T, H, dh)))
        for key, arr in zip(("q", "k", "v", "dout"), inputs[name]):
            tensors[f"in_{name}/{key}"] = arr
        for key, val in (("B", B), ("T", T), ("H", H), ("Hkv", Hkv), ("dh", dh)):
            params[f"in_{name}/{key}"] = val
    tensors["in_t67/prow"] = np.array(PROW, dtype=np.int32)
    for vname, cfg in VARIANTS.items():
        for shape in cfg["shapes"]:
            c = f"{vname}@{shape}"
            sink_logit = None
            if cfg["sink"]:
                rng = np.random.default_rng(zlib.crc32(c.encode()))
                sink_logit = f32_input(rng, SHAPES[shape][2]) + np.float32(0.5)
                tensors[f"{c}/sink_logit"] = sink_logit
            ref, R = reference(*inputs[shape], cfg, sink_logit)
            if cfg["norm"] == "max_abs_sum_one":  # stay away from the kink |R| = 1
                assert float((R.detach().abs() - 1.0).abs().min()) > 1e-3, c
            for key, t in ref.items():
                arr = t.detach().contiguous().numpy().astype(np.float64)
                if key == "probs" and shape == "t67":
                    arr = np.ascontiguousarray(arr[:, :, PROW, :])
                tensors[f"{c}/{key}"] = arr
        for key, val in (("sim", SIM[cfg["sim"]]), ("norm", NORM[cfg["norm"]]), ("mask", MASK[cfg["mask"]]),
                         ("window", cfg["window"]), ("prefix", cfg["prefix"]), ("sigmoid_bias", cfg["bias"]),
                         ("norm_alpha", cfg["alpha"]), ("norm_p", cfg["p"])):
            params[f"{vname}/{key}"] = val
    path = os.path.join(out_dir, "attention_variants.safetensors")
    save_golden(path, tensors, params)
    n = sum(len(c["shapes"]) for c in VARIANTS.values())
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(VARIANTS)} variants, {n} cases)")


if __name__ == "__main__":
    torch.manual_seed(0)
    main(sys.argv[1])
