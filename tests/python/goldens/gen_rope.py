"""Golden file for rope_forward/backward, in float64 with torch autograd.

The rotation is HF's own formula written in torch (transformers' `rotate_half` /
`apply_rotary_pos_emb`: q * cos + rotate_half(q) * sin, cos/sin = cat(freqs, freqs), partial rotary as
in GPT-NeoX: only the first rotary_dim features rotate). The inverse frequencies come from the
formula of transformers' ROPE_INIT_FUNCTIONS ("default", "llama3" = `_compute_llama3_parameters`)
evaluated in float64: HF itself computes them in float32, which is too coarse for an f64 reference, so
this script recomputes them in float64 and asserts they agree with HF's own function to float32
precision; HF's float32 values are stored too (`inv_freq_hf`) and the C++ test checks
sinklab's frequencies against them.
Usage: python gen_rope.py tests/golden"""
import math
import os
import sys

import numpy as np
import torch
from transformers import GPTNeoXConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

from golden_io import f32_input, save_golden


def hf_inv_freq(head_dim, rotary_dim, base, llama3):
    """inv_freq from transformers itself (float32): GPT-NeoX's default rotary (partial_rotary_factor
    aware) or ROPE_INIT_FUNCTIONS["llama3"]."""
    rp = {"rope_type": "llama3" if llama3 else "default", "rope_theta": base,
          "partial_rotary_factor": rotary_dim / head_dim}
    if llama3:
        rp.update(factor=llama3["factor"], low_freq_factor=llama3["low"], high_freq_factor=llama3["high"],
                  original_max_position_embeddings=llama3["orig"])
    if llama3:
        cfg = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                          max_position_embeddings=1 << 20, rope_parameters=rp)
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    else:
        cfg = GPTNeoXConfig(hidden_size=4 * head_dim, num_attention_heads=4, max_position_embeddings=1 << 20,
                            rope_parameters=rp)
        inv_freq, attention_factor = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(cfg, "cpu")
    assert attention_factor == 1.0
    return inv_freq


def inv_freq_f64(rotary_dim, base, llama3):
    """The same formulas as transformers' _compute_default_rope_parameters / _compute_llama3_parameters,
    line for line, in float64."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    if not llama3:
        return inv_freq
    factor, low_freq_factor, high_freq_factor = llama3["factor"], llama3["low"], llama3["high"]
    old_context_len = llama3["orig"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_reference(x, positions, inv_freq, rotary_dim):
    """x [B,T,H,dh] float64 -> rotated, HF formula (cos/sin broadcast over batch and heads)."""
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]      # [T, rd/2]
    emb = torch.cat((freqs, freqs), dim=-1)                              # [T, rd]
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)


def main(outdir):
    rng = np.random.default_rng(404)
    tensors, params = {}, {}
    l31 = {"factor": 8.0, "low": 1.0, "high": 4.0, "orig": 8192.0}      # Llama-3.1's published values
    l3s = {"factor": 32.0, "low": 1.0, "high": 4.0, "orig": 256.0}      # moves the medium band (see below)
    # (case, [B,T,H,dh], rotary_dim, base, llama3, positions or None)
    cases = [
        ("full", (1, 67, 2, 12), 12, 10000.0, None, None),                          # T = 67, d = 12
        ("partial_pos", (2, 7, 3, 20), 8, 10000.0, None, [5, 0, 4097, 3, 3, 100, 1]),
        # base 500000, rotary 16: pair wavelengths 6.3 .. 6.1e5 cover the high (< 2048), medium (4443)
        # and low (> 8192) bands of Llama-3.1's scaling; positions up to 131071 (its context).
        ("llama3", (1, 9, 1, 16), 16, 500000.0, l31, [0, 1, 2, 100, 2048, 8191, 8192, 65536, 131071]),
        ("llama3_partial", (2, 5, 2, 20), 16, 500000.0, l3s, None),                # partial + llama3, H = 2
        ("t1", (3, 1, 2, 12), 12, 10000.0, None, [777]),                            # T = 1
    ]
    for name, shape, rd, base, llama3, positions in cases:
        _, T, _, dh = shape
        x = f32_input(rng, *shape)
        r = f32_input(rng, *shape)
        inv64 = inv_freq_f64(rd, base, llama3)
        inv_hf = hf_inv_freq(dh, rd, base, llama3)
        err = ((inv64 - inv_hf.double()).abs() / inv64).max().item()
        assert err < 1e-6, f"{name}: float64 inverse frequencies differ from transformers' by {err}"
        pos = torch.arange(T) if positions is None else torch.tensor(positions)
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        out = rope_reference(xt, pos, inv64, rd)
        (out * torch.tensor(r, dtype=torch.float64)).sum().backward()
        p = f"{name}/"
        tensors.update({p + "x": x, p + "d_out": r, p + "out": out.detach().numpy(), p + "d_x": xt.grad.numpy(),
                        p + "inv_freq": inv64.numpy(), p + "inv_freq_hf": inv_hf.numpy().astype(np.float32)})
        if positions is not None:
            tensors[p + "positions"] = np.array(positions, dtype=np.int32)
        params.update({p + "rotary_dim": rd, p + "base": base})
        if llama3:
            params.update({p + "llama3_factor": llama3["factor"], p + "llama3_low": llama3["low"],
                           p + "llama3_high": llama3["high"], p + "llama3_orig": llama3["orig"]})
        else:
            params[p + "llama3_factor"] = 0.0
    save_golden(os.path.join(outdir, "rope.safetensors"), tensors, params)


if __name__ == "__main__":
    main(sys.argv[1])
