"""Golden file for embedding_forward/backward: F.embedding in float64 with autograd.
Usage: python gen_embedding.py tests/golden"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from golden_io import f32_input, save_golden


def main(outdir):
    rng = np.random.default_rng(101)
    tensors, params = {}, {}
    # (case, vocab, d, ids): repeated ids (the backward must sum them), the first and last id, N=1,
    # d not a multiple of 8.
    cases = [
        ("repeat", 50, 12, np.concatenate([[0, 49, 7, 7, 7], rng.integers(0, 50, 62)])),  # N = 67
        ("single", 7, 20, np.array([6])),                                                  # N = 1
        ("wide", 33, 36, rng.integers(0, 33, 40)),
    ]
    for name, vocab, d, ids in cases:
        ids = ids.astype(np.int32)
        table = f32_input(rng, vocab, d)
        r = f32_input(rng, len(ids), d)
        t = torch.tensor(table, dtype=torch.float64, requires_grad=True)
        out = F.embedding(torch.tensor(ids, dtype=torch.int64), t)
        (out * torch.tensor(r, dtype=torch.float64)).sum().backward()
        tensors.update({f"{name}/ids": ids, f"{name}/table": table, f"{name}/d_out": r,
                        f"{name}/out": out.detach().numpy(), f"{name}/d_table": t.grad.numpy()})
    save_golden(os.path.join(outdir, "embedding.safetensors"), tensors, params)


if __name__ == "__main__":
    main(sys.argv[1])
