"""Golden file for linear_forward/backward and matmul: PyTorch autograd in float64 is the reference.
Usage: python gen_linear.py <golden dir>  (writes linear.safetensors)

linear cases ("lin_*"): x [*, K], w [N, K], b [N] (absent = no bias), dy like y; expected y, dx, dw, db.
  lin_strided stores x_full [M, K_full]; the op input is x_full[:, off:off+K] (row stride K_full > K).
matmul cases ("mm_*"): a, b, c0 (initial out), params ta, tb, alpha, beta; expected out =
  alpha * op(a) @ op(b) + beta * c0 (2-D or 3-D batched).
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_io import f32_input, save_golden  # noqa: E402


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), dtype=torch.float64, requires_grad=grad)


def main(out_dir):
    rng = np.random.default_rng(20240611)
    tensors, params = {}, {}

    def linear_case(name, lead, K, N, bias=True, k_full=None, off=0):
        M = int(np.prod(lead))
        if k_full is None:
            x = f32_input(rng, *lead, K)
            x_op = x
        else:
            x_full = f32_input(rng, M, k_full)
            tensors[f"{name}/x_full"] = x_full
            params[f"{name}/offset"] = off
            x_op = x_full[:, off:off + K]
        w = f32_input(rng, N, K, scale=0.5)
        b = f32_input(rng, N) if bias else None
        dy = f32_input(rng, *lead, N)
        xt, wt = t64(x_op, True), t64(w, True)
        bt = t64(b, True) if bias else None
        y = F.linear(xt, wt, bt)
        y.backward(t64(dy))
        if k_full is None:
            tensors[f"{name}/x"] = x
        tensors[f"{name}/w"] = w
        if bias:
            tensors[f"{name}/b"] = b
            tensors[f"{name}/db"] = bt.grad.numpy()
        tensors[f"{name}/dy"] = dy
        tensors[f"{name}/y"] = y.detach().numpy()
        tensors[f"{name}/dx"] = xt.grad.numpy()
        tensors[f"{name}/dw"] = wt.grad.numpy()

    linear_case("lin_m1", (1,), 13, 7)                      # a single row
    linear_case("lin_m67", (67,), 23, 19)                   # M, K, N not multiples of 8
    linear_case("lin_nobias3d", (3, 7), 19, 11, bias=False)  # [B,T,K] input, no bias
    linear_case("lin_strided", (9,), 20, 12, k_full=45, off=5)  # a slice of a fused buffer
    linear_case("lin_wide", (16,), 40, 48)                  # BLAS blocked path

    def matmul_case(name, batch, M, K, N, ta, tb, alpha, beta):
        lead = (batch,) if batch else ()
        a = f32_input(rng, *lead, *((K, M) if ta else (M, K)))
        b = f32_input(rng, *lead, *((N, K) if tb else (K, N)))
        c0 = f32_input(rng, *lead, M, N)
        at, bt = t64(a), t64(b)
        opa = at.transpose(-1, -2) if ta else at
        opb = bt.transpose(-1, -2) if tb else bt
        out = alpha * torch.matmul(opa, opb) + beta * t64(c0)
        tensors[f"{name}/a"], tensors[f"{name}/b"], tensors[f"{name}/c0"] = a, b, c0
        tensors[f"{name}/out"] = out.numpy()
        params.update({f"{name}/ta": int(ta), f"{name}/tb": int(tb), f"{name}/alpha": alpha,
                       f"{name}/beta": beta})

    matmul_case("mm_nn", 0, 5, 7, 3, False, False, 1.0, 0.0)
    matmul_case("mm_nt", 0, 6, 9, 4, False, True, 1.0, 0.0)
    matmul_case("mm_tn", 0, 1, 11, 13, True, False, 0.5, 0.0)
    matmul_case("mm_tt_beta", 0, 7, 5, 10, True, True, -1.25, 0.75)
    matmul_case("mm_b3_nt", 3, 4, 6, 5, False, True, 0.125, 0.0)   # attention-style q k^T
    matmul_case("mm_b2_tn_beta", 2, 9, 3, 17, True, False, 2.0, 1.0)

    # bf16 operand cases ("bf16_*", --precision bf16): x, w, dy are f32; torch rounds them to bf16
    # (x_r, w_r, dy_r: round to nearest even) and float64 products of the rounded values give y, dx, dw
    # (a bf16 product is exact, so only the accumulation order differs from the op's f32 sums). Ties and
    # values that round up a binade are planted in x.
    def bf16_case(name, M, K, N):
        x = f32_input(rng, M, K)
        x[0, :4] = np.array([1.00390625, 1.01171875, -1.00390625, 255.5], dtype=np.float32)  # ties to even
        x[0, 4:6] = np.array([1.99951171875, 3.4e38], dtype=np.float32)                   # rounds up to 2, inf
        w = f32_input(rng, N, K, scale=0.5)
        dy = f32_input(rng, M, N)
        x_r, w_r, dy_r = (torch.from_numpy(a).bfloat16().double() for a in (x, w, dy))
        x[0, 5] = 0.5  # the inf case only for the rounding check below, not in the products
        x_r[0, 5] = 0.5
        tensors[f"{name}/x"], tensors[f"{name}/w"], tensors[f"{name}/dy"] = x, w, dy
        tensors[f"{name}/x_r"], tensors[f"{name}/w_r"], tensors[f"{name}/dy_r"] = (  # bf16 values: exact in f32
            x_r.float().numpy(), w_r.float().numpy(), dy_r.float().numpy())
        tensors[f"{name}/y"] = (x_r @ w_r.T).numpy()
        tensors[f"{name}/dx"] = (dy_r @ w_r).numpy()
        tensors[f"{name}/dw"] = (dy_r.T @ x_r).numpy()
        tensors[f"{name}/round_probe"] = np.array([1.00390625, 1.01171875, -1.00390625, 255.5, 1.99951171875,
                                                   3.4e38, 1e-40, -0.0], dtype=np.float32)
        tensors[f"{name}/round_probe_r"] = torch.tensor(tensors[f"{name}/round_probe"]).bfloat16().float().numpy()

    bf16_case("bf16_m1", 1, 13, 7)
    bf16_case("bf16_m37", 37, 70, 29)

    path = os.path.join(out_dir, "linear.safetensors")
    save_golden(path, tensors, params)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
