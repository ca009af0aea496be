"""Golden file for rmsnorm/layernorm forward and backward: torch's F.rms_norm / F.layer_norm in float64
with autograd. Saved statistics (rstd, mean) use the textbook formulas (torch does not return them).
Usage: python gen_norms.py tests/golden"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from golden_io import f32_input, save_golden


def t64(a, grad=False):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def main(outdir):
    rng = np.random.default_rng(202)
    tensors, params = {}, {}
    # (case, kind, shape, has_weight, has_bias, eps, input scale, input offset)
    cases = [
        ("rms_w", "rms", (2, 67, 12), True, False, 1e-6, 1.0, 0.0),        # T = 67, d = 12
        ("rms_now", "rms", (1, 1, 20), False, False, 1e-5, 1.0, 0.0),      # T = 1, no weight
        ("rms_big", "rms", (3, 5, 40), True, False, 1e-5, 30.0, 0.0),      # large activations
        ("rms_tiny", "rms", (4, 20), True, False, 1e-2, 0.05, 0.0),        # eps comparable to mean(x^2)
        ("ln_wb", "ln", (2, 67, 20), True, True, 1e-5, 1.0, 0.0),          # T = 67, d = 20
        ("ln_none", "ln", (3, 12), False, False, 1e-5, 1.0, 0.0),          # no weight, no bias
        ("ln_w", "ln", (1, 1, 20), True, False, 1e-6, 1.0, 0.0),           # T = 1, weight only
        ("ln_offset", "ln", (5, 36), True, True, 1e-5, 0.5, 40.0),         # large mean: needs two passes
    ]
    for name, kind, shape, has_w, has_b, eps, scale, offset in cases:
        d = shape[-1]
        x = (f32_input(rng, *shape, scale=scale) + np.float32(offset)).astype(np.float32)
        r = f32_input(rng, *shape)
        w = (1.0 + f32_input(rng, d, scale=0.5)).astype(np.float32) if has_w else None
        b = f32_input(rng, d, scale=0.5) if has_b else None
        xt = t64(x, True)
        wt = t64(w, True) if has_w else None
        bt = t64(b, True) if has_b else None
        if kind == "rms":
            out = F.rms_norm(xt, (d,), wt, eps)
            xd = xt.detach()
            stats = {"rstd": 1.0 / torch.sqrt(xd.pow(2).mean(-1) + eps)}
        else:
            out = F.layer_norm(xt, (d,), wt, bt, eps)
            xd = xt.detach()
            stats = {"mean": xd.mean(-1), "rstd": 1.0 / torch.sqrt(xd.var(-1, unbiased=False) + eps)}
        (out * t64(r)).sum().backward()
        p = f"{name}/"
        tensors.update({p + "in": x, p + "d_out": r, p + "out": out.detach().numpy(), p + "d_in": xt.grad.numpy()})
        for k, v in stats.items():
            tensors[p + k] = v.numpy()
        if has_w:
            tensors[p + "weight"] = w
            tensors[p + "d_weight"] = wt.grad.numpy()
        if has_b:
            tensors[p + "bias"] = b
            tensors[p + "d_bias"] = bt.grad.numpy()
        params[p + "eps"] = eps
        params[p + "layernorm"] = 1.0 if kind == "ln" else 0.0
    save_golden(os.path.join(outdir, "norms.safetensors"), tensors, params)


if __name__ == "__main__":
    main(sys.argv[1])
