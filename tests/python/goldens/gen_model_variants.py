"""Golden files for the model-variant test (tests/cpp/test_model_variants.cpp): every value of every
variant axis of sinklab's trainable model (issue #5), on a tiny 2-layer model.

Reference: an explicit float64 torch module written from the paper's formulas (Gu et al., ICLR 2025:
App. A for the positional embeddings, Eq. 3 for post-norm, Sec. 7.2-7.4 with Tables 4-6 and App. C
Tables 11-15, Eq. 43-44) and the semantics in the project's notes; it shares no code with sinklab.
Only the default model has an outside check: its logits must equal Hugging Face's LlamaForCausalLM
(eager, float64) on the same weights, and the T5 buckets must equal transformers'
T5Attention._relative_position_bucket. Every case's gradient is also checked against finite
differences (torch.autograd.gradcheck, float64, fast mode) before anything is written.

The model, per layer l (pre-norm; the positions t = 0..T'-1 are those of the sequence the model runs
on, T' = T + 1 with a sink token x*):
    h0 = W_E[x] (+ P[t]: sinusoidal sin/cos interleaved, w_i = 10000^(-2i/d); learned E_pos[t])
    a = RMSNorm(x) g1  (post-norm: a = x)          rstd = 1/sqrt(mean(x^2) + eps)
    q, k, v = a Wq^T, a Wk^T, a Wv^T -> heads; rope: HF "rotate half", theta, positions t
    kernel: q, k := elu(q)+1, elu(k)+1 | relu(q W1^T) W2^T, relu(k W1^T) W2^T (after RoPE)
    kv/k biases: a lead key k*_h = [k_bias_h (d_a dims), 0...] and value v*_h (kv: v_bias_h; k: fixed
      zero | m e1 | m [1..1]/sqrt(dh)) every query sees; no RoPE, no position bias, never masked
    s_ij = <q_i, k_j>/sqrt(dh) + bias_h(i - j)     alibi: -m_h (i-j), m_h = 2^(-8h/H) (Eq. 7, h = 1..H)
      relative learned: table[h, bucket(i-j)]; bucket-index: bucket(i-j) itself (Eq. 6); T5 buckets
      (bidirectional=False): n < B/2 -> n, else min(B/2 + floor(log(n/(B/2))/log(D/(B/2)) (B/2)), B-1)
    visible j: causal j <= i | window i-w < j <= i | prefix j <= i or j < p
    w_ij = exp(s) | sigmoid(s + b) (b = -log C with sigmoid-bias-log-n) | elu(s) + 1 | s | e^s - 1 (softpick)
    Z_i = (sum_j w_ij + w_sink)/alpha | 1 | max(|sum_j w_ij|, 1) | (sum_j w_ij^p)^(1/p)
      sink-logit: w_sink = e^{S_h} (learned per head); softmax-plus-one: e^0 = 1
      softpick (Zuhri et al. 2025): Z_i = (sum_j |w_ij| + 1e-6)/alpha and the numerator is relu(w_ij)
    o_i = sum_j (w_ij / Z_i) v_j  (+ v_bias_h for attn-bias v); gate: o_h *= sigmoid(a Wg^T) (per head
      or per element); concat -> Wo (head-combine add: (sum_h o_h) Wo^T with Wo [d, dh])
    pre:  x_mid = x + o Wo^T;           x_out = x_mid + FFN(RMSNorm(x_mid) g2)
    post: x_mid = RMSNorm(x + o Wo^T) g1; x_out = RMSNorm(x_mid + FFN(x_mid)) g2; no final norm
    FFN gated: (act(f Wgate^T) * f Wup^T) Wdown^T (swiglu silu, geglu erf-gelu, reglu relu);
        plain: act(f Wup^T) Wdown^T (swish, gelu, relu)
final: RMSNorm(x) g_final (pre-norm only) -> logits = x W_head^T; the sink token's row is dropped;
loss = SUM of cross-entropy over the counted targets: target >= 0 and, for prefix-length p > 1, input
position >= p - 1.

--precision bf16 (the "precision" cases; their index entry says "precision": "bf16"): the same model with
bf16 storage of every activation (round to nearest even) where sinklab stores one (model/transformer.hpp,
Precision): the embedding rows (and the sink token's row, and again after learned positions are added),
every norm's output, every product's output (q|k|v one product with [Wq; Wk; Wv], a gated FFN's gate|up
one with [W_gate; W_up], the logits), q and k after RoPE and after a kernel feature map, k* and v*, the
attention output (and after the V bias, the gate, each step of the head sum), the gated MLP's product,
and the residual stream after every add; each stored activation's gradient is rounded too (the value
and its gradient rounded by two autograd functions, `stored`). Products multiply the rounded weights in
float64 (d_W is not rounded); norms, attention and the loss compute in float64 on the rounded values; the
attention's backward reads its row sums D_i = dO_i . o_i from the stored output, as sinklab's kernels do
(AttendStored).
Where sinklab's backward rounds a gradient before adding it to another (each product's d_x, the d_x of a
norm it does not fuse with the residual add), the reference rounds that branch's gradient too (`branch`). No gradcheck for these
(rounding is not differentiable); their fp32 loss and gradients are stored beside ("<case>/loss_fp32",
"<case>/grad_fp32") so the test can show the bf16 result is nearer the bf16 reference than the fp32 one.

Layout: one JSON index model_variants.json (per case: its golden file, the dimensions, the axis flags
that differ from the default as flag -> text, batch and sequence length, and the parameter list
[name, shape] the model must have) and four safetensors files (model_variants_{arch,bias,attn,precision}).
Weights are shared by the cases of a file: "w/<name>/<shape>" (f32, drawn from a seed of the name and
shape). Per case: "<case>/inputs", "<case>/targets" (i32 [B,T]), "<case>/loss" (f64 [1], the sum),
"<case>/counted" (i32 [1]), "<case>/grad" (f32, rounded from float64: every parameter's gradient,
flattened, concatenated in the order of the case's parameter list) and "<case>/probs0" (f32
[1,H,T',S'], layer 0's w/Z of batch row 0, S' = lead keys + T'). The sizes (d = 16, ffn = 12, vocab
17) keep the ~70 cases' gradients within the golden-size budget (< 1.5 MB in all).

Usage: python gen_model_variants.py OUT_DIR
"""
import json
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from golden_io import save_golden

torch.set_num_threads(1)  # a fixed reduction order: byte-reproducible goldens
f64 = torch.float64

DIMS = dict(vocab=17, d=16, layers=2, heads=4, kv_heads=0, ffn=12, context=11, norm_eps=1e-5, rope_theta=10000.0)
BATCH, SEQ = 2, 11
# Softpick's eps (Zuhri et al. 2025: relu(e^s - 1) / (sum_j |e^s - 1| + eps)), in unshifted units.
SOFTPICK_EPS = 1e-6
# T5 buckets small enough that T = 11 reaches the exact, the logarithmic and the saturated buckets.
REL = {"relative-buckets": "8", "relative-max-distance": "10"}

# Every variant axis with its default (the paper's default model), as flag -> text value.
DEFAULT_AXES = {
    "pos-emb": "rope", "relative-bias": "learned", "relative-buckets": "32", "relative-max-distance": "128",
    "norm-placement": "pre", "ffn": "swiglu", "head-combine": "concat", "attn-bias": "none",
    "bias-per-head": "true", "k-bias-dims": "0", "fixed-value": "zero", "fixed-value-scale": "1",
    "attn-sim": "exp", "attn-norm": "sum", "qk-kernel": "identity", "attn-alpha": "1", "attn-p": "1",
    "sigmoid-bias": "0", "sigmoid-bias-log-n": "false", "sink-logit": "false", "sink-logit-init": "0",
    "softmax-plus-one": "false", "attn-gate": "none", "attn-window": "0", "prefix-length": "1", "norm-type": "rms", "embed-init-std": "0",
    "matrix-init": "lit-gpt",
}


def case(axes=None, seq=SEQ, precision="fp32", **dims):
    spec = dict(axes=dict(axes or {}), seq=seq, dims=dict(DIMS, **dims))
    if precision != "fp32":
        spec["precision"] = precision
    return spec


def attn(sim, norm, **more):
    return {"attn-sim": sim, "attn-norm": norm, **more}


FILES = {
    "arch": {
        "default": case(),
        "default_t1": case(seq=1),
        "pos_none": case({"pos-emb": "none"}),
        "pos_sinusoidal": case({"pos-emb": "sinusoidal"}),
        "pos_learned": case({"pos-emb": "learned"}),
        "pos_relative_learned": case({"pos-emb": "relative", **REL}),  # relative-bias learned is the default
        "pos_relative_bucket": case({"pos-emb": "relative", "relative-bias": "bucket-index", **REL}),
        "pos_alibi": case({"pos-emb": "alibi"}),
        "norm_post": case({"norm-placement": "post"}),
        "ffn_relu": case({"ffn": "relu"}),
        "ffn_gelu": case({"ffn": "gelu"}),
        "ffn_swish": case({"ffn": "swish"}),
        "ffn_reglu": case({"ffn": "reglu"}),
        "ffn_geglu": case({"ffn": "geglu"}),
        "heads1": case(heads=1),
        "heads2": case(heads=2),
        "heads8": case(heads=8),
        "head_add": case({"head-combine": "add"}),
        "head_add_h2": case({"head-combine": "add"}, heads=2),
        "gqa_alibi": case({"pos-emb": "alibi"}, kv_heads=2),
        "post_gelu": case({"norm-placement": "post", "ffn": "gelu"}),
        "post_gate": case({"norm-placement": "post", "attn-gate": "elementwise"}),  # the gate reads x_in
        "relative_learned_t1": case({"pos-emb": "relative", **REL}, seq=1),
        "norm_layer": case({"norm-type": "layer"}),
        "norm_layer_post": case({"norm-type": "layer", "norm-placement": "post"}),
        # Guo et al.'s Bigram-Backcopy model: LayerNorm, learned positions, ReLU MLP, one head
        "norm_layer_bbm": case({"norm-type": "layer", "pos-emb": "learned", "ffn": "relu"}, heads=1),
        # only the starting point moves: the forward and gradients of given weights are pos_learned's
        "embed_init_std": case({"embed-init-std": "1", "pos-emb": "learned"}),
        # the same: nn.Linear's uniform starting matrices (Guo et al.) leave the forward of given weights alone
        "matrix_init_torch_linear": case({"matrix-init": "torch-linear", "norm-type": "layer"}),
    },
    "bias": {
        "sink_token": case({"attn-bias": "sink-token"}),
        "sink_token_t1": case({"attn-bias": "sink-token"}, seq=1),
        "sink_token_learned_pe": case({"attn-bias": "sink-token", "pos-emb": "learned"}),
        "alibi_sink_token": case({"attn-bias": "sink-token", "pos-emb": "alibi"}),
        "kv": case({"attn-bias": "kv"}),
        "kv_t1": case({"attn-bias": "kv"}, seq=1),
        "kv_shared": case({"attn-bias": "kv", "bias-per-head": "false"}),
        "kv_dims1": case({"attn-bias": "kv", "k-bias-dims": "1"}),
        "k_zero": case({"attn-bias": "k"}),
        "k_e1_m5": case({"attn-bias": "k", "fixed-value": "e1", "fixed-value-scale": "5"}),
        "k_ones_m5": case({"attn-bias": "k", "fixed-value": "ones", "fixed-value-scale": "5"}),
        "k_shared": case({"attn-bias": "k", "bias-per-head": "false"}),
        "k_dims3": case({"attn-bias": "k", "k-bias-dims": "3"}),
        "v": case({"attn-bias": "v"}),
        "v_shared": case({"attn-bias": "v", "bias-per-head": "false"}),
        "kv_alibi": case({"attn-bias": "kv", "pos-emb": "alibi"}),
        "kv_gate": case({"attn-bias": "kv", "attn-gate": "elementwise"}),
        "kv_window4": case({"attn-bias": "kv", "attn-window": "4"}),
        "v_gate": case({"attn-bias": "v", "attn-gate": "headwise"}),  # gate after the v bias
    },
    "attn": {
        # Table 15, row by row (the first row, exp + sum, is the default case)
        "sigmoid_one": case(attn("sigmoid", "one")),
        "sigmoid_sum": case(attn("sigmoid", "sum")),
        "elu_one": case(attn("elu-plus-one", "one")),
        "elu_sum": case(attn("elu-plus-one", "sum")),
        "kernel_elu_sum": case(attn("identity", "sum", **{"qk-kernel": "elu-plus-one"})),
        "kernel_elu_one": case(attn("identity", "one", **{"qk-kernel": "elu-plus-one"})),
        "identity_maxabs": case(attn("identity", "max-abs-sum-one")),
        "identity_one": case(attn("identity", "one")),
        "kernel_mlp_maxabs": case(attn("identity", "max-abs-sum-one", **{"qk-kernel": "mlp"})),
        "kernel_mlp_one": case(attn("identity", "one", **{"qk-kernel": "mlp"})),
        # Table 14 left
        "alpha_0.2": case({"attn-alpha": "0.2"}),
        "alpha_2": case({"attn-alpha": "2"}),
        # Eq. 43-44
        **{f"pnorm_exp_{p}": case(attn("exp", "p-norm", **{"attn-p": p})) for p in ("0.25", "0.5", "2", "3")},
        **{f"pnorm_sigmoid_{p}": case(attn("sigmoid", "p-norm", **{"attn-p": p})) for p in ("0.25", "0.5", "2", "3")},
        "sigmoid_log_n": case(attn("sigmoid", "one", **{"sigmoid-bias-log-n": "true"})),
        "sigmoid_bias": case(attn("sigmoid", "sum", **{"sigmoid-bias": "-1.5"})),
        "sink_logit": case({"sink-logit": "true"}),
        # the sink logits' starting value only (init_weights): the weights here are the golden's, as for
        # embed_init_std; the case checks that the flag parses and leaves the model's arithmetic alone
        "sink_logit_init": case({"sink-logit": "true", "sink-logit-init": "2.4"}),
        "softmax_plus_one": case({"softmax-plus-one": "true"}),
        "gate_headwise": case({"attn-gate": "headwise"}),
        "gate_elementwise": case({"attn-gate": "elementwise"}),
        "softpick": case({"attn-sim": "softpick"}),
        "window4": case({"attn-window": "4"}),
        "prefix3": case({"prefix-length": "3"}),
    },
    "precision": {
        "bf16_default": case(precision="bf16"),
        "bf16_default_t1": case(seq=1, precision="bf16"),
        # Guo et al.'s Bigram-Backcopy model (LayerNorm, learned positions, ReLU MLP, one head)
        "bf16_bbm": case({"norm-type": "layer", "pos-emb": "learned", "ffn": "relu"}, heads=1, precision="bf16"),
        "bf16_kv_gate": case({"attn-bias": "kv", "attn-gate": "elementwise"}, precision="bf16"),
        "bf16_v_headwise": case({"attn-bias": "v", "attn-gate": "headwise"}, precision="bf16"),
        "bf16_kernel_mlp": case(attn("identity", "one", **{"qk-kernel": "mlp"}), precision="bf16"),
        "bf16_sink_token_post": case({"attn-bias": "sink-token", "norm-placement": "post"}, precision="bf16"),
    },
}


class Cfg:
    """The case's configuration in typed form (from the flag texts, as the C++ set_axis reads them)."""

    def __init__(self, dims, axes, precision="fp32"):
        self.bf16 = precision == "bf16"
        a = dict(DEFAULT_AXES, **axes)
        assert set(a) == set(DEFAULT_AXES), f"unknown axis in {axes}"
        self.V, self.d, self.L = dims["vocab"], dims["d"], dims["layers"]
        self.H = dims["heads"]
        self.Hkv = dims["kv_heads"] or self.H
        self.F, self.C = dims["ffn"], dims["context"]
        self.eps, self.theta = dims["norm_eps"], dims["rope_theta"]
        self.dh = self.d // self.H
        self.pos = a["pos-emb"]
        self.rel_mode, self.buckets, self.max_dist = a["relative-bias"], int(a["relative-buckets"]), int(
            a["relative-max-distance"])
        self.post = a["norm-placement"] == "post"
        self.layer_norm = a["norm-type"] == "layer"  # LayerNorm with a bias after each gain; else RMSNorm
        self.ffn = a["ffn"]
        self.add_heads = a["head-combine"] == "add"
        self.bias = a["attn-bias"]
        self.per_head = a["bias-per-head"] == "true"
        self.d_a = int(a["k-bias-dims"]) or self.dh
        self.fixed, self.m = a["fixed-value"], float(a["fixed-value-scale"])
        self.sim, self.norm, self.kernel = a["attn-sim"], a["attn-norm"], a["qk-kernel"]
        self.alpha, self.p = float(a["attn-alpha"]), float(a["attn-p"])
        self.sig_b = -math.log(self.C) if a["sigmoid-bias-log-n"] == "true" else float(a["sigmoid-bias"])
        self.sink_logit = a["sink-logit"] == "true"
        self.plus_one = a["softmax-plus-one"] == "true"
        self.gate = a["attn-gate"]
        self.window, self.prefix = int(a["attn-window"]), int(a["prefix-length"])
        self.lead_pos = 1 if self.bias == "sink-token" else 0
        self.lead_keys = 1 if self.bias in ("kv", "k") else 0
        if self.sink_logit or self.plus_one:
            assert self.sim == "exp" and self.norm == "sum", "sink logits are written for softmax only"

    def param_shapes(self):
        """[(name, shape)] of the model's parameters, from the notes' names."""
        d, V, F_, H, Hkv, dh = self.d, self.V, self.F, self.H, self.Hkv, self.dh
        out = [("model.embed_tokens.weight", (V, d))]
        if self.pos == "learned":
            out.append(("model.embed_positions.weight", (self.C + self.lead_pos, d)))
        if self.bias == "sink-token":
            out.append(("model.sink_token", (d,)))
        if self.pos == "relative" and self.rel_mode == "learned":
            out.append(("model.relative_attention_bias.weight", (H, self.buckets)))
        nb = H if self.per_head else 1
        for l in range(self.L):
            p = f"model.layers.{l}."
            out.append((p + "input_layernorm.weight", (d,)))
            if self.layer_norm:
                out.append((p + "input_layernorm.bias", (d,)))
            out += [(p + "self_attn.q_proj.weight", (H * dh, d)),
                    (p + "self_attn.k_proj.weight", (Hkv * dh, d)), (p + "self_attn.v_proj.weight", (Hkv * dh, d))]
            if self.kernel == "mlp":
                out += [(p + "self_attn.kernel_mlp1.weight", (dh, dh)), (p + "self_attn.kernel_mlp2.weight", (dh, dh))]
            if self.lead_keys:
                out.append((p + "self_attn.k_bias", (nb, self.d_a)))
            if self.bias in ("kv", "v"):
                out.append((p + "self_attn.v_bias", (nb, dh)))
            if self.sink_logit:
                out.append((p + "self_attn.sinks", (H,)))
            if self.gate != "none":
                out.append((p + "self_attn.gate_proj.weight", (H if self.gate == "headwise" else H * dh, d)))
            out += [(p + "self_attn.o_proj.weight", (d, dh if self.add_heads else H * dh)),
                    (p + "post_attention_layernorm.weight", (d,))]
            if self.layer_norm:
                out.append((p + "post_attention_layernorm.bias", (d,)))
            if self.ffn in ("swiglu", "geglu", "reglu"):
                out.append((p + "mlp.gate_proj.weight", (F_, d)))
            out += [(p + "mlp.up_proj.weight", (F_, d)), (p + "mlp.down_proj.weight", (d, F_))]
        if not self.post:
            out.append(("model.norm.weight", (d,)))
            if self.layer_norm:
                out.append(("model.norm.bias", (d,)))
        out.append(("lm_head.weight", (V, d)))
        return out


def weight_values(name, shape):
    """f32-representable weights drawn from a seed of (name, shape): the same in every case."""
    rng = np.random.default_rng(zlib.crc32(f"{name}/{shape}".encode()))
    n = rng.standard_normal(shape)
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        w = 1.0 + 0.1 * n  # RMSNorm gains
    elif name.endswith("self_attn.sinks") or name.endswith("relative_attention_bias.weight"):
        w = 1.0 * n  # logits / score biases: large enough to matter against ~T keys
    else:
        w = 0.3 * n
    return w.astype(np.float32)


# ------------------------------------------------------------------------------------------------
# Reference pieces


class RoundValues(torch.autograd.Function):
    """bf16 rounding of the values (round to nearest even); the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


class RoundGrad(torch.autograd.Function):
    """The values pass unchanged; the gradient flowing back is rounded to bf16."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.bfloat16).to(g.dtype)


def rv(cfg, x):
    return RoundValues.apply(x) if cfg.bf16 else x


def stored(cfg, x):
    """x as sinklab stores an activation under bf16: its values rounded, and the gradient flowing back to
    what made it rounded."""
    return RoundValues.apply(RoundGrad.apply(x)) if cfg.bf16 else x


class AttendStored(torch.autograd.Function):
    """o = (numer / Z) v with the backward sinklab's attention kernels run: the row sums D_i = dO_i . o_i that
    the normaliser's gradient needs (dL/dZ_i = -D_i / Z_i) are read from the output as stored (rounded to
    bf16 under bf16), as a flash-style kernel reads its output, not from the exact product."""

    @staticmethod
    def forward(ctx, numer, Z, v, bf16):
        P = numer / Z[..., None]
        o = P @ v
        ctx.save_for_backward(P, Z, v, o.to(torch.bfloat16).to(o.dtype) if bf16 else o)
        return o

    @staticmethod
    def backward(ctx, d_o):
        P, Z, v, o_stored = ctx.saved_tensors
        d_p = d_o @ v.transpose(-1, -2)
        return d_p / Z[..., None], -(d_o * o_stored).sum(-1) / Z, P.transpose(-1, -2) @ d_o, None


def branch(cfg, x):
    """x read by one of several consumers whose gradients sinklab rounds apart before adding them (each
    product's d_in, an unfused norm's d_in): the gradient of this reading rounded on its own."""
    return RoundGrad.apply(x) if cfg.bf16 else x


def fused_residual_norm(cfg):
    """sinklab's --fused-ops for this model (model::choose_step_fusions): a pre-norm RMSNorm adds its
    backward into the residual's gradient with one rounding; otherwise the norm's d_in is rounded first."""
    return not cfg.post and not cfg.layer_norm


def lin(cfg, x, w):
    """x W^T (x a stored activation); bf16: the rounded weights, the output stored, d_x rounded."""
    return stored(cfg, branch(cfg, x) @ rv(cfg, w).T)


def rmsnorm(x, g, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def norm(cfg, params, prefix, x):
    """The model's norm named prefix (e.g. model.norm): RMSNorm, or LayerNorm with its bias (--norm-type layer)."""
    g = params[prefix + ".weight"]
    if not cfg.layer_norm:
        return rmsnorm(x, g, cfg.eps)
    centred = x - x.mean(-1, keepdim=True)
    return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + cfg.eps) * g + params[prefix + ".bias"]


def rope(x, theta):
    """HF Llama rotate-half RoPE on x [B,T,heads,dh], positions 0..T-1: feature i pairs with i + dh/2."""
    T, dh = x.shape[1], x.shape[-1]
    half = dh // 2
    inv_freq = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=f64) / dh)
    ang = torch.arange(T, dtype=f64)[:, None] * inv_freq[None, :]  # [T, dh/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def sinusoidal(T, d):
    """App. A Eq. 5 (0-based i): P[t, 2i] = sin(t w_i), P[t, 2i+1] = cos(t w_i), w_i = 1/10000^(2i/d)."""
    P = torch.zeros(T, d, dtype=f64)
    for t in range(T):
        for i in range(d // 2):
            w = 1.0 / 10000.0 ** (2.0 * i / d)
            P[t, 2 * i] = math.sin(t * w)
            P[t, 2 * i + 1] = math.cos(t * w)
    return P


def t5_bucket(n, buckets, max_distance):
    """Paper Eq. 6 / T5 (bidirectional=False) bucket of the distance n = i - j >= 0."""
    half = buckets // 2
    if n < half:
        return n
    big = half + int(math.log(n / half) / math.log(max_distance / half) * (buckets - half))
    return min(big, buckets - 1)


def alibi_slopes(H):
    """Paper Eq. 7: m_h = 2^(-h * 2^(3 - log2 H)), h = 1..H (H a power of two here)."""
    assert H & (H - 1) == 0
    return [2.0 ** (-h * 2.0 ** (3 - math.log2(H))) for h in range(1, H + 1)]


def position_bias(cfg, Tp, params):
    """[H, Tp, Tp] additive score bias of query i and real key j (or None)."""
    if cfg.pos == "alibi":
        i = torch.arange(Tp, dtype=f64)[:, None]
        j = torch.arange(Tp, dtype=f64)[None, :]
        m = torch.tensor(alibi_slopes(cfg.H), dtype=f64)[:, None, None]
        return -m * (i - j)[None]
    if cfg.pos == "relative":
        idx = torch.tensor([[t5_bucket(max(i - j, 0), cfg.buckets, cfg.max_dist) for j in range(Tp)]
                            for i in range(Tp)])  # [Tp, Tp]
        if cfg.rel_mode == "bucket-index":
            return idx.to(f64)[None].expand(cfg.H, Tp, Tp)
        table = params["model.relative_attention_bias.weight"]  # [H, buckets]
        return table[:, idx]
    return None


def visible(cfg, Tp):
    i = torch.arange(Tp)[:, None]
    j = torch.arange(Tp)[None, :]
    if cfg.window > 0:
        return (j <= i) & (j > i - cfg.window)
    if cfg.prefix > 1:
        return (j <= i) | (j < cfg.prefix + cfg.lead_pos)
    return j <= i


def act(name, x):
    if name in ("swiglu", "swish"):
        return x * torch.sigmoid(x)
    if name in ("geglu", "gelu"):
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    return torch.clamp(x, min=0.0)  # relu, reglu


def attention(cfg, params, l, a, Tp, probs_out):
    """One attention block on its input a [B,Tp,d] -> [B,Tp,d] (after Wo)."""
    B = a.shape[0]
    H, Hkv, dh = cfg.H, cfg.Hkv, cfg.dh
    p = f"model.layers.{l}.self_attn."
    Wq, Wk, Wv = params[p + "q_proj.weight"], params[p + "k_proj.weight"], params[p + "v_proj.weight"]
    if cfg.bf16:  # one fused product, as sinklab's [Wq; Wk; Wv]: d_a is rounded once, not per projection
        q, k, v = lin(cfg, a, torch.cat([Wq, Wk, Wv])).split([H * dh, Hkv * dh, Hkv * dh], dim=-1)
        q, k, v = q.reshape(B, Tp, H, dh), k.reshape(B, Tp, Hkv, dh), v.reshape(B, Tp, Hkv, dh)
    else:
        q = (a @ Wq.T).view(B, Tp, H, dh)
        k = (a @ Wk.T).view(B, Tp, Hkv, dh)
        v = (a @ Wv.T).view(B, Tp, Hkv, dh)
    if cfg.pos == "rope":
        q, k = stored(cfg, rope(q, cfg.theta)), stored(cfg, rope(k, cfg.theta))
    if cfg.kernel == "elu-plus-one":
        q, k = stored(cfg, F.elu(q) + 1.0), stored(cfg, F.elu(k) + 1.0)
    elif cfg.kernel == "mlp":
        W1, W2 = params[p + "kernel_mlp1.weight"], params[p + "kernel_mlp2.weight"]
        q = lin(cfg, stored(cfg, torch.clamp(lin(cfg, q, W1), min=0.0)), W2)
        k = lin(cfg, stored(cfg, torch.clamp(lin(cfg, k, W1), min=0.0)), W2)
    # query head h reads kv head h // (H / Hkv); [B,H,Tp,dh]
    qh = q.transpose(1, 2)
    kh = k.repeat_interleave(H // Hkv, dim=2).transpose(1, 2)
    vh = v.repeat_interleave(H // Hkv, dim=2).transpose(1, 2)
    scale = 1.0 / math.sqrt(dh)
    s = scale * (qh @ kh.transpose(-1, -2))  # [B,H,Tp,Tp]
    bias = position_bias(cfg, Tp, params)
    if bias is not None:
        s = s + bias[None]
    vis = visible(cfg, Tp)[None, None].expand(B, H, Tp, Tp)
    if cfg.lead_keys:
        kb = params[p + "k_bias"].expand(H, cfg.d_a)  # shared: [1, d_a] broadcast to every head
        kstar = torch.cat([kb, torch.zeros(H, dh - cfg.d_a, dtype=f64)], dim=1)  # [H, dh]
        if cfg.bias == "kv":
            vstar = params[p + "v_bias"].expand(H, dh)
        elif cfg.fixed == "zero":
            vstar = torch.zeros(H, dh, dtype=f64)
        elif cfg.fixed == "e1":
            vstar = torch.zeros(H, dh, dtype=f64)
            vstar[:, 0] = cfg.m
        else:  # ones
            vstar = torch.full((H, dh), cfg.m / math.sqrt(dh), dtype=f64)
        # sinklab stores k*, v* once per batch row (its lead key of k, v [B,S,H,dh]): each row's gradient rounded
        kstar = stored(cfg, kstar[None].expand(B, H, dh))
        vstar = stored(cfg, vstar[None].expand(B, H, dh))
        s_lead = scale * (qh * kstar[:, :, None, :]).sum(-1, keepdim=True)  # [B,H,Tp,1]
        s = torch.cat([s_lead, s], dim=-1)
        vis = torch.cat([torch.ones(B, H, Tp, 1, dtype=torch.bool), vis], dim=-1)
        vh = torch.cat([vstar[:, :, None, :], vh], dim=2)
    # similarity; masked entries are exactly 0 (computed on a harmless stand-in so no inf/nan reaches
    # the gradient through torch.where)
    s_safe = torch.where(vis, s, torch.zeros_like(s))
    if cfg.sim == "exp":
        w = torch.exp(s_safe)
    elif cfg.sim == "sigmoid":
        w = torch.sigmoid(s_safe + cfg.sig_b)
    elif cfg.sim == "elu-plus-one":
        w = F.elu(s_safe) + 1.0
    elif cfg.sim == "softpick":
        gap = float(s.detach()[vis].abs().min())
        assert gap > 1e-4, f"softpick score {gap} too close to the kinks of relu / abs at 0"
        w = torch.exp(s_safe) - 1.0
    else:
        w = s_safe
    w = torch.where(vis, w, torch.zeros_like(w))
    numer = w
    if cfg.sim == "softpick":  # P = relu(e^s - 1) / ((sum_j |e^s - 1| + eps) / alpha), visible j only
        assert cfg.norm == "sum" and not (cfg.sink_logit or cfg.plus_one)
        numer = torch.clamp(w, min=0.0)
        Z = (w.abs().sum(-1) + SOFTPICK_EPS) / cfg.alpha
    elif cfg.norm == "sum":
        R = w.sum(-1)
        if cfg.sink_logit:
            R = R + torch.exp(params[p + "sinks"])[None, :, None]
        elif cfg.plus_one:
            R = R + 1.0
        Z = R / cfg.alpha
    elif cfg.norm == "one":
        Z = torch.ones(B, H, Tp, dtype=f64)
    elif cfg.norm == "max-abs-sum-one":
        R = w.sum(-1)
        gap = float((R.detach().abs() - 1.0).abs().min())
        assert gap > 1e-4, f"|R| = 1 +- {gap}: too close to the kink of max(|R|, 1)"
        Z = torch.clamp(R.abs(), min=1.0)
    else:  # p-norm
        wp = torch.where(vis, torch.where(vis, w, torch.ones_like(w)) ** cfg.p, torch.zeros_like(w))
        Z = wp.sum(-1) ** (1.0 / cfg.p)
    if probs_out is not None:
        probs_out.append((numer / Z[..., None]).detach())
    o = stored(cfg, AttendStored.apply(numer, Z, vh, cfg.bf16).transpose(1, 2))  # [B,Tp,H,dh]
    if cfg.bias == "v":
        o = stored(cfg, o + params[p + "v_bias"].expand(H, dh)[None, None])
    if cfg.gate == "headwise":  # the [B,Tp,H] gate logits expanded to every feature of its head, stored
        logits = stored(cfg, lin(cfg, a, params[p + "gate_proj.weight"])[..., None].expand(B, Tp, H, dh))
        o = stored(cfg, o * torch.sigmoid(logits))
    elif cfg.gate == "elementwise":
        o = stored(cfg, o * torch.sigmoid(lin(cfg, a, params[p + "gate_proj.weight"])).view(B, Tp, H, dh))
    if cfg.add_heads:  # sinklab adds the heads one at a time into a stored sum
        total = stored(cfg, o[:, :, 0])
        for h in range(1, H):
            total = stored(cfg, total + o[:, :, h])
        o = total
    else:
        o = o.reshape(B, Tp, H * dh)
    return lin(cfg, o, params[p + "o_proj.weight"])


def ffn(cfg, params, l, f):
    p = f"model.layers.{l}.mlp."
    up = lin(cfg, f, params[p + "up_proj.weight"])
    if cfg.ffn in ("swiglu", "geglu", "reglu") and cfg.bf16:  # fused [W_gate; W_up], as sinklab's
        gate, up = lin(cfg, f, torch.cat([params[p + "gate_proj.weight"], params[p + "up_proj.weight"]])).split(
            cfg.F, dim=-1)
        h = act(cfg.ffn, gate) * up
    elif cfg.ffn in ("swiglu", "geglu", "reglu"):
        h = act(cfg.ffn, lin(cfg, f, params[p + "gate_proj.weight"])) * up
    else:
        h = act(cfg.ffn, up)
    return lin(cfg, stored(cfg, h), params[p + "down_proj.weight"])


def forward(cfg, params, ids, targets, probs_out=None, return_logits=False, all_layers=False):
    """Sum of the counted cross-entropies (float64 scalar) and their count. probs_out: layer 0's
    attention probabilities [B,H,Tp,S'] are appended (every layer's, in order, with all_layers)."""
    B, T = ids.shape
    h = stored(cfg, params["model.embed_tokens.weight"][ids])  # [B,T,d]
    if cfg.bias == "sink-token":
        h = torch.cat([stored(cfg, params["model.sink_token"].expand(B, 1, cfg.d)), h], dim=1)
    Tp = T + cfg.lead_pos
    if cfg.pos == "sinusoidal":
        h = stored(cfg, h + sinusoidal(Tp, cfg.d)[None])
    elif cfg.pos == "learned":
        h = stored(cfg, h + params["model.embed_positions.weight"][:Tp][None])
    x = h
    for l in range(cfg.L):
        read = (lambda v: v) if fused_residual_norm(cfg) else (lambda v: branch(cfg, v))

        def norm1(v, l=l):
            return stored(cfg, norm(cfg, params, f"model.layers.{l}.input_layernorm", read(v)))

        def norm2(v, l=l):
            return stored(cfg, norm(cfg, params, f"model.layers.{l}.post_attention_layernorm", read(v)))

        out = probs_out if (l == 0 or all_layers) else None
        if cfg.post:
            x_mid = norm1(stored(cfg, x + attention(cfg, params, l, x, Tp, out)))
            x = norm2(stored(cfg, x_mid + ffn(cfg, params, l, x_mid)))
        else:
            x_mid = stored(cfg, x + attention(cfg, params, l, norm1(x), Tp, out))
            x = stored(cfg, x_mid + ffn(cfg, params, l, norm2(x_mid)))
    if not cfg.post:
        x = stored(cfg, norm(cfg, params, "model.norm", x))
    logits = lin(cfg, x, params["lm_head.weight"])[:, cfg.lead_pos:]  # [B,T,V]
    if return_logits:
        return logits
    counted = targets >= 0
    if cfg.prefix > 1:
        counted = counted & (torch.arange(T)[None, :] >= cfg.prefix - 1)
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return -(picked * counted).sum(), int(counted.sum())


# ------------------------------------------------------------------------------------------------
# Outside checks of the reference


def check_default_against_hf(cfg, params, ids):
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = LlamaConfig(vocab_size=cfg.V, hidden_size=cfg.d, intermediate_size=cfg.F, num_hidden_layers=cfg.L,
                         num_attention_heads=cfg.H, num_key_value_heads=cfg.Hkv, max_position_embeddings=cfg.C,
                         rms_norm_eps=cfg.eps, rope_theta=cfg.theta, attention_bias=False, mlp_bias=False,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    model = LlamaForCausalLM(hf_cfg).double()
    # transformers runs RMSNorm, the RoPE angles and eager attention's softmax in float32 even in a
    # float64 model; for an exact comparison they run in float64 here: SDPA attention (float64 math),
    # and RMSNorm / RoPE tables with the same formulas without the downcasts.
    rms_cls, rot_cls = type(model.model.norm), type(model.model.rotary_emb)
    saved = rms_cls.forward, rot_cls.forward

    def rms_f64(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rot_f64(self, x, position_ids):
        dim = cfg.dh
        inv_freq = 1.0 / (cfg.theta ** (torch.arange(0, dim, 2, dtype=f64) / dim))
        freqs = position_ids[..., None].to(f64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    rms_cls.forward, rot_cls.forward = rms_f64, rot_f64
    try:
        with torch.no_grad():
            hf_params = dict(model.named_parameters())
            assert set(hf_params) == set(params), "default parameter names differ from HF Llama's"
            for name, t in params.items():
                hf_params[name].copy_(t)
            ref = model(input_ids=ids).logits
    finally:
        rms_cls.forward, rot_cls.forward = saved
    mine = forward(cfg, {n: t.detach() for n, t in params.items()}, ids, None, return_logits=True)
    err = float((mine - ref).abs().max() / ref.abs().max())
    assert err < 1e-12, f"explicit default model vs HF Llama: rel. diff {err}"
    return err


def check_buckets_against_t5():
    from transformers.models.t5.modeling_t5 import T5Attention

    for buckets, max_distance in ((8, 10), (32, 128), (8, 16)):
        n = torch.arange(0, 300)
        hf = T5Attention._relative_position_bucket(-n, bidirectional=False, num_buckets=buckets,
                                                   max_distance=max_distance)
        mine = torch.tensor([t5_bucket(int(i), buckets, max_distance) for i in n])
        assert torch.equal(hf, mine), f"T5 buckets differ for B={buckets} D={max_distance}"


def make_batch(name, cfg, T):
    rng = np.random.default_rng(zlib.crc32(("batch/" + name).encode()))
    ids = rng.integers(0, cfg.V, size=(BATCH, T)).astype(np.int32)
    targets = rng.integers(0, cfg.V, size=(BATCH, T)).astype(np.int32)
    # Not-counted targets: the last of row 0, and (T > 2) an early one of row 1.
    targets[0, T - 1] = -1
    if T > 2:
        targets[1, 1] = -1
    return ids, targets


def run_case(name, spec, tensors, weights):
    precision = spec.get("precision", "fp32")
    cfg = Cfg(spec["dims"], spec["axes"], precision)
    shapes = cfg.param_shapes()
    params = {}
    for pname, shape in shapes:
        key = f"w/{pname}/{'x'.join(map(str, shape))}"
        if key not in weights:
            weights[key] = weight_values(pname, shape)
        params[pname] = torch.from_numpy(weights[key].astype(np.float64)).requires_grad_(True)
    ids_np, tgt_np = make_batch(name, cfg, spec["seq"])
    ids, tgt = torch.from_numpy(ids_np).long(), torch.from_numpy(tgt_np).long()
    probs = []
    loss, counted = forward(cfg, params, ids, tgt, probs)
    loss.backward()
    assert counted > 0
    names = [n for n, _ in shapes]
    if cfg.bf16:
        # The same case without rounding, for the test's "nearer bf16 than fp32" check.
        cfg32 = Cfg(spec["dims"], spec["axes"])
        params32 = {n: t.detach().clone().requires_grad_(True) for n, t in params.items()}
        loss32, _ = forward(cfg32, params32, ids, tgt)
        loss32.backward()
        tensors[f"{name}/loss_fp32"] = np.array([float(loss32.detach())], dtype=np.float64)
        tensors[f"{name}/grad_fp32"] = np.concatenate([params32[n].grad.numpy().ravel() for n in names]).astype(
            np.float32)
    else:
        # The reference's own gradient, by finite differences (float64, random directions).
        def loss_of(*ts):
            return forward(cfg, dict(zip(names, ts)), ids, tgt)[0]

        inputs = tuple(params[n].detach().clone().requires_grad_(True) for n in names)
        assert torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True), name
    tensors[f"{name}/inputs"] = ids_np
    tensors[f"{name}/targets"] = tgt_np
    tensors[f"{name}/loss"] = np.array([float(loss.detach())], dtype=np.float64)
    tensors[f"{name}/counted"] = np.array([counted], dtype=np.int32)
    # every gradient, flattened and concatenated in the order of the index's parameter list
    tensors[f"{name}/grad"] = np.concatenate([params[n].grad.numpy().ravel() for n in names]).astype(np.float32)
    tensors[f"{name}/probs0"] = probs[0][:1].numpy().astype(np.float32)  # batch row 0 (file size)
    if name == "default":
        err = check_default_against_hf(cfg, params, ids)
        print(f"  default model vs HF LlamaForCausalLM logits: rel. diff {err:.1e}")
    entry = dict(dims=spec["dims"], axes=spec["axes"], batch=BATCH, seq=spec["seq"],
                 params=[[n, list(s)] for n, s in shapes])
    if precision != "fp32":
        entry["precision"] = precision
    return entry


def main(out_dir):
    check_buckets_against_t5()
    index = {"cases": {}}
    total = 0
    for file_key, cases in FILES.items():
        fname = f"model_variants_{file_key}.safetensors"
        tensors, weights = {}, {}
        for name, spec in cases.items():
            entry = run_case(name, spec, tensors, weights)
            entry["file"] = fname
            index["cases"][name] = entry
        path = os.path.join(out_dir, fname)
        save_golden(path, {**weights, **tensors}, {})
        size = os.path.getsize(path)
        total += size
        print(f"wrote {path} ({size} bytes, {len(cases)} cases)")
    path = os.path.join(out_dir, "model_variants.json")
    with open(path, "w") as f:  # one line per case
        f.write('{"cases": {\n')
        f.write(",\n".join(json.dumps(n) + ": " + json.dumps(e, sort_keys=True, separators=(",", ":"))
                           for n, e in index["cases"].items()))
        f.write("\n}}\n")
    with open(path) as f:
        assert json.load(f) == index
    print(f"wrote {path}; {len(index['cases'])} cases, {total} bytes of safetensors")


if __name__ == "__main__":
    main(sys.argv[1])
