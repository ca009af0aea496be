"""Golden file for the state-space (Mamba) and mixture-of-experts ops (tests/cpp/test_ops_mamba.cpp).

Reference: the formulas of ops.hpp written out in torch float64, independently of the C++ pieces:
    causal conv   out[b,t,c] = bias[c] + sum_{k<K} w[c,k] x[b, t-(K-1)+k, c]      (x = 0 before t = 0)
    scan          A = -exp(A_log),  delta = softplus(dt + dt_bias)   (softplus(u) = u above 20, as torch)
                  h_t = exp(delta A) h_{t-1} + delta B_t x_t,  h_{-1} = 0
                  y_t = C_t . h_t + D x_t
    router        p = softmax(logits), the k largest p in descending order, not renormalised
    index_add     out[index[m]] += scale[m] src[m]
As a check that the formulas are the ones Jamba runs, the script also asserts that they agree with
torch.nn.functional.conv1d (Mamba's conv1d: groups = C, padding K-1, first T outputs), with
transformers' own slow-path `mamba_selective_scan` (modeling_jamba.py) and with JambaTopKRouter's
softmax + torch.topk.

Layout: per case "<case>/<name>"; inputs f32 (exactly representable), references f64 (router experts
i32); optional operands are simply absent; flags and sizes as parameters "<case>/<name>".

Usage: python gen_mamba.py OUT_DIR
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from golden_io import f32_input, save_golden

CONV = {
    # name: (B, T, C, K, bias)
    "conv_t1": (2, 1, 5, 4, True),      # a single position: only the last tap sees data
    "conv_t67": (1, 67, 13, 4, True),   # long sequence, C not a multiple of 8
    "conv_k3_nobias": (2, 9, 6, 3, False),
    "conv_k1": (3, 5, 3, 1, True),      # a 1-tap filter is a per-channel affine map
}

SCAN = {
    # name: (B, T, Di, N, D skip, dt_bias, softplus)
    "scan_t1": (2, 1, 5, 3, True, True, True),
    "scan_t67": (1, 67, 13, 4, True, True, True),
    "scan_n1": (2, 10, 7, 1, False, False, True),            # one state, no skip, no bias
    "scan_nosoftplus": (2, 6, 9, 2, True, False, False),     # delta used as given (dt > 0)
    "scan_threshold": (1, 8, 3, 2, True, True, True),        # some dt + bias above softplus' threshold 20
}

ROUTER = {
    # name: (N, E, k)
    "router_e4k2": (26, 4, 2),
    "router_e16k2": (7, 16, 2),
    "router_e5k5": (3, 5, 5),   # k = E: a full sort
    "router_e1k1": (3, 1, 1),   # one expert: weight 1
}

INDEX_ADD = {
    # name: (N, d, M, scale)
    "iadd_repeat": (7, 5, 12, True),    # repeated indices
    "iadd_noscale": (4, 3, 4, False),
}


def conv_reference(x, w, bias):
    B, T, C = x.shape
    K = w.shape[1]
    out = torch.zeros(B, T, C, dtype=torch.float64) + (bias if bias is not None else 0.0)
    for k in range(K):
        shift = K - 1 - k  # tap k reads time t - shift
        if shift < T:
            out[:, shift:, :] += w[:, k] * x[:, : T - shift, :]
    return out


def softplus(u):
    return torch.where(u > 20.0, u, torch.log1p(torch.exp(u)))


def scan_reference(x, dt, A, Bm, Cm, D, dt_bias, use_softplus):
    Bn, T, Di = x.shape
    N = A.shape[1]
    u = dt + (dt_bias if dt_bias is not None else 0.0)
    delta = softplus(u) if use_softplus else u
    h = torch.zeros(Bn, Di, N, dtype=torch.float64)
    ys = []
    for t in range(T):
        d = delta[:, t, :, None]  # [B,Di,1]
        h = torch.exp(d * A[None]) * h + d * Bm[:, t, None, :] * x[:, t, :, None]
        y = (h * Cm[:, t, None, :]).sum(-1)
        if D is not None:
            y = y + D * x[:, t, :]
        ys.append(y)
    return torch.stack(ys, dim=1)


def t64(a):
    return torch.from_numpy(a).double()


def main(out_dir):
    from transformers.models.jamba.modeling_jamba import mamba_selective_scan

    rng = np.random.default_rng(20260601)
    tensors, params = {}, {}

    for name, (B, T, C, K, has_bias) in CONV.items():
        x, w = f32_input(rng, B, T, C), f32_input(rng, C, K, scale=0.5)
        bias = f32_input(rng, C) if has_bias else None
        out = conv_reference(t64(x), t64(w), t64(bias) if has_bias else None)
        ref_torch = F.conv1d(t64(x).transpose(1, 2), t64(w)[:, None, :], t64(bias) if has_bias else None,
                             padding=K - 1, groups=C)[:, :, :T].transpose(1, 2)
        assert torch.allclose(out, ref_torch, rtol=0, atol=1e-12), name
        tensors.update({f"{name}/x": x, f"{name}/weight": w, f"{name}/out": out.numpy()})
        if has_bias:
            tensors[f"{name}/bias"] = bias

    for name, (B, T, Di, N, has_d, has_bias, use_softplus) in SCAN.items():
        x = f32_input(rng, B, T, Di)
        if use_softplus:
            dt = f32_input(rng, B, T, Di)
        else:
            dt = rng.uniform(0.01, 0.5, (B, T, Di)).astype(np.float32)
        if name == "scan_threshold":
            dt[0, ::2, :] += np.float32(25.0)
        # A_log around log(1..N) (Mamba's S4D-real initialisation), perturbed so channels differ.
        A_log = (np.log(np.arange(1, N + 1))[None, :] + 0.3 * rng.standard_normal((Di, N))).astype(np.float32)
        A = -torch.exp(t64(A_log))
        Bm, Cm = f32_input(rng, B, T, N), f32_input(rng, B, T, N)
        D = f32_input(rng, Di) if has_d else None
        dt_bias = f32_input(rng, Di, scale=0.5) if has_bias else None
        y = scan_reference(t64(x), t64(dt), A, t64(Bm), t64(Cm), t64(D) if has_d else None,
                           t64(dt_bias) if has_bias else None, use_softplus)
        # transformers' slow path, layout [B,Di,T] / [B,N,T]: the same numbers.
        y_hf = mamba_selective_scan(t64(x).transpose(1, 2), t64(dt).transpose(1, 2), A,
                                    t64(Bm).transpose(1, 2), t64(Cm).transpose(1, 2),
                                    D=t64(D) if has_d else None,
                                    delta_bias=t64(dt_bias) if has_bias else None,
                                    delta_softplus=use_softplus).transpose(1, 2)
        assert torch.allclose(y, y_hf, rtol=0, atol=1e-10 * float(y.abs().max())), name
        tensors.update({f"{name}/x": x, f"{name}/dt": dt, f"{name}/A_log": A_log, f"{name}/B": Bm, f"{name}/C": Cm,
                        f"{name}/y": y.numpy()})
        if has_d:
            tensors[f"{name}/D"] = D
        if has_bias:
            tensors[f"{name}/dt_bias"] = dt_bias
        params[f"{name}/softplus"] = 1 if use_softplus else 0

    for name, (N, E, k) in ROUTER.items():
        logits = f32_input(rng, N, E, scale=2.0)
        p = torch.softmax(t64(logits), dim=-1)
        # No near-ties among the chosen: the k-th and (k+1)-th probabilities of a row are well apart.
        if k < E:
            srt = torch.sort(p, dim=-1, descending=True).values
            assert float((srt[:, k - 1] - srt[:, k]).min()) > 1e-4, name
        w, idx = torch.topk(p, k, dim=-1)
        w_hf, idx_hf = torch.topk(torch.softmax(torch.from_numpy(logits), dim=-1, dtype=torch.float), k, dim=-1)
        assert torch.equal(idx, idx_hf), name
        tensors.update({f"{name}/logits": logits, f"{name}/weights": w.numpy(),
                        f"{name}/experts": idx.numpy().astype(np.int32)})

    for name, (N, d, M, has_scale) in INDEX_ADD.items():
        out0, src = f32_input(rng, N, d), f32_input(rng, M, d)
        index = rng.integers(0, N, M).astype(np.int32)
        scale = f32_input(rng, M) if has_scale else None
        contrib = t64(src) * (t64(scale)[:, None] if has_scale else 1.0)
        out = t64(out0).index_add(0, torch.from_numpy(index).long(), contrib)
        tensors.update({f"{name}/out0": out0, f"{name}/src": src, f"{name}/index": index, f"{name}/out": out.numpy()})
        if has_scale:
            tensors[f"{name}/scale"] = scale

    save_golden(os.path.join(out_dir, "mamba.safetensors"), tensors, params)


if __name__ == "__main__":
    torch.manual_seed(0)
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../golden"))
