"""Golden file for AdamW and gradient-norm clipping, float64 PyTorch as the reference.
Usage: python gen_adamw.py <golden dir>

AdamW cases ("adamw_*"): p0 and grads g1..g5 (f32-exact); torch.optim.AdamW (foreach=False) runs 5
steps and param/m/v (exp_avg, exp_avg_sq) are stored after each step t as p<t>, m<t>, v<t>.
Clip cases ("clip_*"): grads g0, g1, g2 of different shapes, param max_norm; expected total norm
(param norm) and the grads after torch.nn.utils.clip_grad_norm_ as c0, c1, c2.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import f32_input, save_golden  # noqa: E402

STEPS = 5


def main(out_dir):
    rng = np.random.default_rng(99173)
    tensors, params = {}, {}

    def adamw_case(name, shape, lr, betas, eps, wd, grad_scale=1.0):
        p0 = f32_input(rng, *shape)
        p = torch.nn.Parameter(torch.tensor(p0, dtype=torch.float64))
        opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
        tensors[f"{name}/p0"] = p0
        for t in range(1, STEPS + 1):
            g = f32_input(rng, *shape, scale=grad_scale)
            p.grad = torch.tensor(g, dtype=torch.float64)
            opt.step()
            st = opt.state[p]
            tensors[f"{name}/g{t}"] = g
            tensors[f"{name}/p{t}"] = p.detach().numpy().copy()
            tensors[f"{name}/m{t}"] = st["exp_avg"].numpy().copy()
            tensors[f"{name}/v{t}"] = st["exp_avg_sq"].numpy().copy()
        params.update({f"{name}/lr": lr, f"{name}/beta1": betas[0], f"{name}/beta2": betas[1],
                       f"{name}/eps": eps, f"{name}/weight_decay": wd, f"{name}/steps": STEPS})

    adamw_case("adamw_wd0", (7, 13), 1e-3, (0.9, 0.999), 1e-8, 0.0)
    adamw_case("adamw_wd01", (91,), 3e-3, (0.8, 0.95), 1e-6, 0.1)
    adamw_case("adamw_tiny_grads", (5, 3), 1e-2, (0.9, 0.999), 1e-8, 0.1, grad_scale=1e-7)  # eps matters

    def clip_case(name, max_norm, scale):
        shapes = [(5, 7), (13,), (2, 3, 4)]
        gs = [f32_input(rng, *s, scale=scale) for s in shapes]
        ts = [torch.nn.Parameter(torch.zeros(s, dtype=torch.float64)) for s in shapes]
        for t, g in zip(ts, gs):
            t.grad = torch.tensor(g, dtype=torch.float64)
        norm = torch.nn.utils.clip_grad_norm_(ts, max_norm)
        for i, (g, t) in enumerate(zip(gs, ts)):
            tensors[f"{name}/g{i}"] = g
            tensors[f"{name}/c{i}"] = t.grad.numpy().copy()
        params[f"{name}/max_norm"] = max_norm
        params[f"{name}/norm"] = float(norm)

    clip_case("clip_on", 1.0, 0.5)    # norm ~4: clipped
    clip_case("clip_off", 10.0, 0.5)  # below max_norm: untouched

    path = os.path.join(out_dir, "adamw.safetensors")
    save_golden(path, tensors, params)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
