"""Golden file for activation_forward/backward and gated_forward/backward: torch's F.relu, F.gelu
(approximate 'none' and 'tanh'), F.silu, torch.sigmoid, F.elu + 1 in float64 with autograd.
Usage: python gen_activations.py tests/golden"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from golden_io import f32_input, save_golden

ACTS = {
    "relu": F.relu,
    "gelu_exact": lambda x: F.gelu(x, approximate="none"),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "elu_plus_one": lambda x: F.elu(x) + 1.0,
}
# Index of each activation in sinklab::ops::Activation.
ACT_INDEX = {"relu": 0, "gelu_exact": 1, "gelu_tanh": 2, "silu": 3, "sigmoid": 4, "elu_plus_one": 5}


def t64(a, grad=False):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def inputs(rng, *shape):
    """Normals of scale 2.5 plus exact zeros (relu'(0) = 0 as torch) and the tails +-8, +-20."""
    x = f32_input(rng, *shape, scale=2.5).reshape(-1)
    x[:6] = [0.0, 0.0, -8.0, 8.0, -20.0, 20.0]
    return x.reshape(shape)


def main(outdir):
    rng = np.random.default_rng(303)
    tensors, params = {}, {}
    for act, fn in ACTS.items():
        # Plain activation: [67, 12] (T = 67, width not a multiple of 8).
        x = inputs(rng, 67, 12)
        r = f32_input(rng, 67, 12)
        xt = t64(x, True)
        out = fn(xt)
        (out * t64(r)).sum().backward()
        p = f"act_{act}/"
        tensors.update({p + "in": x, p + "d_out": r, p + "out": out.detach().numpy(), p + "d_in": xt.grad.numpy()})
        params[p + "act"] = ACT_INDEX[act]
        # Gated product act(gate) * up: [2, 3, 20].
        g = inputs(rng, 2, 3, 20)
        u = f32_input(rng, 2, 3, 20, scale=1.5)
        r = f32_input(rng, 2, 3, 20)
        gt, ut = t64(g, True), t64(u, True)
        out = fn(gt) * ut
        (out * t64(r)).sum().backward()
        p = f"gated_{act}/"
        tensors.update({p + "gate": g, p + "up": u, p + "d_out": r, p + "out": out.detach().numpy(),
                        p + "d_gate": gt.grad.numpy(), p + "d_up": ut.grad.numpy()})
        params[p + "act"] = ACT_INDEX[act]
    save_golden(os.path.join(outdir, "activations.safetensors"), tensors, params)


if __name__ == "__main__":
    main(sys.argv[1])
