"""Golden file for the mask-relative sink probe (tests/cpp/test_probe_masks.cpp, issue #17): a tiny
sliding-window model and a tiny prefix LM (gen_model_variants.py's float64 reference module, its
weights and dimensions) run on a few random sequences; every layer's attention probabilities give

  window w (sink_metrics.hpp, window_importance_scores): per sample, layer and head
      alpha_k^win = 1/(T-w+1) sum_{i=w-1}^{T-1} A[i, i-w+k]          k = 1..K (0-based i, 1-based k)
  prefix p (prefix_importance_scores): per sample, layer and head, every key position j (0-based)
      alpha_j = mean of A[i, j] over the rows i that see key j (all T rows for j < p, rows i >= j else)

written from those formulas here with the reference's own probabilities (no sinklab code). Stored: the
weights ("w/<name>/<shape>", f32, as model_variants_*.safetensors holds them), per case its inputs
(i32 [B,T]), the sample-mean scores (f64 [L,H,K]), the thresholds (f64 [E]) and Sink (f64 [K,E], percent: the share of (sample,
layer, head) whose score exceeds eps, the reference code's per-sample averaging), with the
window / prefix / K in the metadata. Every per-sample score is asserted to lie >= 1e-4 from every eps,
so the f32 C++ probe must reproduce the Sink percentages exactly.

Usage: python gen_probe_masks.py OUT_DIR
"""
import os
import sys
import zlib

import numpy as np
import torch

from gen_model_variants import DIMS, Cfg, forward, weight_values
from golden_io import save_golden

torch.set_num_threads(1)
EPS = (0.2, 0.3, 0.4)
BATCH = 3
CASES = {  # name: (axes, T, max K)
    "window4": ({"attn-window": "4"}, 11, 4),
    "window3_k2": ({"attn-window": "3"}, 10, 2),
    "prefix3": ({"prefix-length": "3"}, 11, 0),
}


def window_scores(P, w, K):
    """P [B,L,H,T,T] -> per-sample alpha^win [B,L,H,K]."""
    T = P.shape[-1]
    rows = range(w - 1, T)
    return np.stack([np.mean([P[..., i, i - w + 1 + k] for i in rows], axis=0) for k in range(K)], axis=-1)


def prefix_scores(P, p):
    """P [B,L,H,T,T] -> per-sample per-position alpha [B,L,H,T]."""
    T = P.shape[-1]
    out = []
    for j in range(T):
        seers = [i for i in range(T) if i >= j or j < p]
        out.append(np.mean([P[..., i, j] for i in seers], axis=0))
    return np.stack(out, axis=-1)


def main(out_dir):
    tensors, weights, meta = {}, {}, {}
    for name, (axes, T, K) in CASES.items():
        cfg = Cfg(dict(DIMS), axes)
        params = {}
        for pname, shape in cfg.param_shapes():
            key = f"w/{pname}/{'x'.join(map(str, shape))}"
            if key not in weights:
                weights[key] = weight_values(pname, shape)
            params[pname] = torch.from_numpy(weights[key].astype(np.float64))
        rng = np.random.default_rng(zlib.crc32(("probe_masks/" + name).encode()))
        ids = rng.integers(0, cfg.V, size=(BATCH, T)).astype(np.int32)
        probs = []
        with torch.no_grad():
            forward(cfg, params, torch.from_numpy(ids).long(), torch.zeros(BATCH, T, dtype=torch.long), probs,
                    all_layers=True)
        P = torch.stack(probs, dim=1).numpy()  # [B,L,H,T,T]
        assert np.allclose(P.sum(-1), 1.0), "rows of a softmax model sum to one"
        if cfg.window:
            scores = window_scores(P, cfg.window, K)
            meta[f"{name}/window"], meta[f"{name}/K"] = cfg.window, K
        else:
            scores = prefix_scores(P, cfg.prefix)
            meta[f"{name}/prefix"], meta[f"{name}/K"] = cfg.prefix, T
        margin = min(float(np.abs(scores - e).min()) for e in EPS)
        assert margin >= 1e-4, f"{name}: a score lies {margin:.1e} from a threshold"
        sink = np.stack([[100.0 * float((scores[..., k] > e).mean()) for e in EPS]
                         for k in range(scores.shape[-1])])  # [K,E]
        tensors[f"{name}/inputs"] = ids
        tensors[f"{name}/alpha"] = scores.mean(axis=0)  # [L,H,K]
        tensors[f"{name}/sink"] = sink
        tensors[f"{name}/eps"] = np.array(EPS, dtype=np.float64)
        print(f"  {name}: T={T}, scores in [{scores.min():.3f}, {scores.max():.3f}], Sink {sink[:, 1].tolist()}"
              f" at eps {EPS[1]}, margin {margin:.1e}")
    path = os.path.join(out_dir, "probe_masks.safetensors")
    save_golden(path, {**weights, **tensors}, meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
