"""Golden file for the survey measurements (tests/cpp/test_survey_metrics.cpp, probe::SurveyProbe).

Reference: the definitions of the paper (Gu et al., ICLR 2025, Sec. 3.1-3.2, App. B.3) and of
StreamingLLM's long-input figure, written out in numpy float64, independently of the C++ code:
    A^{l,h} = softmax(q_h k_g^T / sqrt(dh) + causal mask)          g = h // (H / Hkv)
    alpha_k = 1/(T-k+1) sum_{i>=k} A[i,k]          per sample;  alpha = mean over samples
    Sink_k^eps = 100 * mean over samples, attention layers and heads of [alpha_k > eps]
    hnorm_first = mean_b ||r_1||,  hnorm_rest = mean_b mean_{t>=2} ||r_t||,  massive = mean_b ||r_1|| / mean_{t>=2} ||r_t||
        with r = hidden_out; the *_pre_norm versions with r = hidden_pre_norm (0 for layers without one)
    knorm/vnorm: the same over k/v with all kv heads of a position concatenated
    last_to_first[a,h] = mean_b A[T, 1];  qk maps: mean_b cos(q_t, k_j), mean_b ||q_t|| ||k_j||;
    attention maps: mean_b A
One model of L = 3 layers whose layer 1 has no attention (as Jamba's Mamba layers), layer 2 is
post-norm (hidden_pre_norm given), grouped-query attention (H = 4, Hkv = 2), B = 3 sequences of T = 6.

Layout: inputs "in/hidden_out" [L,B,T,d], "in/hidden_pre_norm" [B,T,d] (layer 2), "in/q" [La,B,T,H,dh],
"in/k", "in/v" [La,B,T,Hkv,dh] (f32, exactly representable); expected outputs "out/<name>" (f64)
named as probe::SurveyResult; pairs "in/qk_pairs", "in/attention_pairs" (int32 [P,2]), "in/eps".

Usage: python gen_survey_metrics.py OUT_DIR
"""
import os
import sys

import numpy as np

from golden_io import f32_input, save_golden

L, ATT, B, T, H, HKV, DH, D, K = 3, (0, 2), 3, 6, 4, 2, 3, 5, 3
EPS = (0.2, 0.3, 0.4)
QK_PAIRS = ((0, 3), (2, 1))
ATTN_PAIRS = ((2, 2), (0, 0))


def probs(q, k):
    """q [T,dh], k [T,dh] -> causal softmax attention [T,T]."""
    s = q @ k.T / np.sqrt(q.shape[1])
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    s = np.exp(s - s.max(axis=1, keepdims=True))
    return s / s.sum(axis=1, keepdims=True)


def norms(x):
    """x [T, width] -> (||x_1||, mean_{t>=2} ||x_t||)."""
    n = np.sqrt((x.astype(np.float64) ** 2).sum(axis=1))
    return n[0], n[1:].mean()


def make(seed):
    rng = np.random.default_rng(seed)
    hidden = f32_input(rng, L, B, T, D)
    hidden[:, :, 0] *= 4  # a first token with a large norm (massive activation)
    pre_norm = f32_input(rng, B, T, D, scale=2.0)
    q = f32_input(rng, len(ATT), B, T, H, DH, scale=1.5)
    k = f32_input(rng, len(ATT), B, T, HKV, DH, scale=1.5)
    v = f32_input(rng, len(ATT), B, T, HKV, DH)
    return hidden, pre_norm, q, k, v


def reference(hidden, pre_norm, q, k, v):
    out = {}
    def hidden_norms(resid):
        hn = np.array([[norms(r[b]) for b in range(B)] for r in resid])  # [layers,B,2]
        return hn[:, :, 0].mean(axis=1), hn[:, :, 1].mean(axis=1), (hn[:, :, 0] / hn[:, :, 1]).mean(axis=1)

    out["hnorm_first"], out["hnorm_rest"], out["massive_ratio"] = hidden_norms([hidden[l] for l in range(L)])
    # Only layer 2 is post-norm: the pre-norm arrays are 0 elsewhere.
    pre = [np.zeros(L) for _ in range(3)]
    for p, value in zip(pre, hidden_norms([pre_norm])):
        p[2] = value[0]
    out["hnorm_first_pre_norm"], out["hnorm_rest_pre_norm"], out["massive_ratio_pre_norm"] = pre
    for name, x in (("knorm", k), ("vnorm", v)):
        n = np.array([[norms(x[a, b].reshape(T, HKV * DH)) for b in range(B)] for a in range(len(ATT))])
        out[name + "_first"] = n[:, :, 0].mean(axis=1)
        out[name + "_rest"] = n[:, :, 1].mean(axis=1)
    group = H // HKV
    A = np.zeros((len(ATT), B, H, T, T))
    for a in range(len(ATT)):
        for b in range(B):
            for h in range(H):
                A[a, b, h] = probs(q[a, b, :, h].astype(np.float64), k[a, b, :, h // group].astype(np.float64))
    alpha = np.zeros((len(ATT), B, H, K))
    for kk in range(K):
        alpha[..., kk] = A[..., kk:, kk].sum(axis=-1) / (T - kk)
    margin = np.abs(alpha[..., None] - np.array(EPS)).min()
    out["alpha"] = alpha.mean(axis=1)
    out["sink_k"] = np.array([[100.0 * (alpha[..., kk] > e).mean() for e in EPS] for kk in range(K)])
    out["last_to_first"] = A[:, :, :, T - 1, 0].mean(axis=1)
    cos, normprod = [], []
    for layer, h in QK_PAIRS:
        a = ATT.index(layer)
        qv = q[a, :, :, h].astype(np.float64)            # [B,T,dh]
        kv = k[a, :, :, h // group].astype(np.float64)   # [B,T,dh]
        np_ = np.linalg.norm(qv, axis=-1)[:, :, None] * np.linalg.norm(kv, axis=-1)[:, None, :]
        dot = np.einsum("btd,bjd->btj", qv, kv)
        cos.append((dot / np_).mean(axis=0))
        normprod.append(np_.mean(axis=0))
    out["qk_cos"] = np.array(cos)
    out["qk_normprod"] = np.array(normprod)
    out["attention_maps"] = np.array([A[ATT.index(layer), :, h].mean(axis=0) for layer, h in ATTN_PAIRS])
    return out, margin


def main(out_dir):
    # The first seed whose per-sample alphas all keep 1e-3 away from the thresholds, so that the f32
    # run counts exactly the same heads above eps as this float64 reference.
    for seed in range(100):
        inputs = make(seed)
        out, margin = reference(*inputs)
        if margin > 1e-3:
            break
    else:
        raise SystemExit("no seed keeps the alphas away from the thresholds")
    hidden, pre_norm, q, k, v = inputs
    tensors = {"in/hidden_out": hidden, "in/hidden_pre_norm": pre_norm, "in/q": q, "in/k": k, "in/v": v,
               "in/qk_pairs": np.array(QK_PAIRS, dtype=np.int32),
               "in/attention_pairs": np.array(ATTN_PAIRS, dtype=np.int32),
               "in/attention_layers": np.array(ATT, dtype=np.int32),
               "in/eps": np.array(EPS, dtype=np.float64)}
    for name, value in out.items():
        tensors["out/" + name] = np.asarray(value, dtype=np.float64)
    save_golden(os.path.join(out_dir, "survey_metrics.safetensors"), tensors,
                {"in/K": K, "in/seed": seed, "in/n_layers": L})


if __name__ == "__main__":
    main(sys.argv[1])
