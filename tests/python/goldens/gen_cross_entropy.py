"""Golden file for the fused softmax cross-entropy: F.cross_entropy(reduction='none', ignore_index=...)
in float64 with autograd. Usage: python gen_cross_entropy.py <golden dir>

Each case: logits [N,V] (f32-exact), targets i32 [N], params ignore_index and grad_scale; expected
losses [N] and d_logits = d(grad_scale * sum(losses)) / d logits.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import f32_input, save_golden  # noqa: E402


def main(out_dir):
    rng = np.random.default_rng(7011)
    tensors, params = {}, {}

    def case(name, N, V, scale=1.0, ignore_index=-100, ignored=(), grad_scale=None):
        logits = f32_input(rng, N, V, scale=scale)
        targets = rng.integers(0, V, size=N).astype(np.int32)
        for i in ignored:
            targets[i] = ignore_index
        if ignore_index >= 0:  # an in-vocabulary ignore id (a pad token): make sure some rows hit it
            targets[::4] = ignore_index
        counted = int((targets != ignore_index).sum())
        if grad_scale is None:
            grad_scale = 1.0 / counted if counted else 1.0
        x = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
        t = torch.tensor(targets, dtype=torch.int64)
        losses = F.cross_entropy(x, t, reduction="none", ignore_index=ignore_index)
        (losses.sum() * grad_scale).backward()
        if counted and grad_scale == 1.0 / counted:  # the same gradient as the mean reduction
            x2 = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
            F.cross_entropy(x2, t, ignore_index=ignore_index).backward()
            assert torch.allclose(x2.grad, x.grad, rtol=1e-12, atol=1e-15)
        tensors[f"{name}/logits"] = logits
        tensors[f"{name}/targets"] = targets
        tensors[f"{name}/losses"] = losses.detach().numpy()
        tensors[f"{name}/d_logits"] = x.grad.numpy()
        params[f"{name}/ignore_index"] = ignore_index
        params[f"{name}/grad_scale"] = grad_scale

    case("basic", 6, 37, ignored=(2,))
    case("single_row", 1, 5)
    case("all_ignored", 4, 11, ignored=(0, 1, 2, 3))
    case("pad_ignore", 12, 9, ignore_index=3, grad_scale=0.37)       # in-vocabulary ignore id
    case("large_logits", 33, 203, scale=40.0, ignored=(0, 5, 32))    # exp overflows without max shift
    case("wide", 3, 1000, scale=2.0)                                   # vocab not a multiple of 8

    path = os.path.join(out_dir, "cross_entropy.safetensors")
    save_golden(path, tensors, params)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
