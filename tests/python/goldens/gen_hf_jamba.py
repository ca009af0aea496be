"""A tiny random Jamba checkpoint and its transformers goldens (tests/cpp/test_hf_jamba.cpp).

The model: JambaConfig with 4 layers, attention at layers 1 and 3 (attn_layer_period 2, offset 1;
grouped-query: 4 query heads on 2 kv heads), Mamba at layers 0 and 2, a mixture of 4 experts with top-2
routing at layer 2 (expert_layer_period 4, offset 2; a Mamba layer, as in the real Jamba-v0.1) and
SwiGLU FFNs elsewhere; hidden 32, Mamba d_state 6 (not a power of two), d_conv 3, expand 2, dt_rank 2.
Every parameter is re-drawn from a seeded generator at scales that make each piece matter (unit-scale
activations, non-uniform attention, a D skip and dt bias that are not 1 and 0) and stored in float32, so
the checkpoint is exactly what the C++ side reads.

The goldens come from transformers' own JambaForCausalLM (eager attention, output_attentions=True) run
in float64 on those float32 weights. The Mamba layers take the slow PyTorch path (mamba_ssm and
causal_conv1d are not installed in the oracle environment; use_mamba_kernels=False as well). Note that
transformers itself rounds a few intermediates to float32 (RMSNorm's input, the attention softmax, the
router softmax), so the goldens are accurate to float32 rounding, not to float64.

Written to tests/fixtures/hf/jamba_tiny/: config.json and model.safetensors (save_pretrained), and
jamba_golden.safetensors with, per case c in {t13, t1} (ids [2,13] and [2,1]):
  c/ids                 i32 [B,T]
  c/logits              f32 [B,T,V]
  c/hidden_out/<layer>  f32 [B,T,d] what each layer leaves in the residual stream (every layer; from
                        forward hooks, since hidden_states[-1] is the final-normed state)
  c/probs/<layer>       f32 [B,H,T,T] attention probabilities (attention layers only)
  c/alpha/<layer>       f64 [B,H] alpha_1 of each head (mean of the first column of probs: paper Sec. 3.2)
(Not named golden.safetensors: test_hf_families.cpp runs every fixture that has one as an
all-attention model.)
The script asserts that no token's router sits near a tie between its k-th and (k+1)-th expert, so the
expert choice cannot flip between float32 and float64 arithmetic.

Usage: python gen_hf_jamba.py [GOLDEN_DIR]
The fixture always goes to tests/fixtures/hf/jamba_tiny beside this checkout; GOLDEN_DIR (what
regenerate.sh passes every gen_*.py) is accepted and unused.
"""
import json
import math
import os

import numpy as np
import torch

from golden_io import save_golden

CONFIG = dict(
    vocab_size=80,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    attn_layer_period=2,
    attn_layer_offset=1,
    expert_layer_period=4,
    expert_layer_offset=2,
    num_experts=4,
    num_experts_per_tok=2,
    mamba_d_state=6,
    mamba_d_conv=3,
    mamba_expand=2,
    mamba_dt_rank=2,
    mamba_conv_bias=True,
    mamba_proj_bias=False,
    rms_norm_eps=1e-6,
    use_mamba_kernels=False,
    tie_word_embeddings=False,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)


def redraw_parameters(model, gen):
    """Every parameter drawn again at a scale that keeps activations O(1) (float32 values)."""
    for name, p in model.named_parameters():
        shape = p.shape
        if name.endswith("A_log"):
            # S4D-real around log(1..N), perturbed so channels differ.
            base = torch.log(torch.arange(1, shape[1] + 1, dtype=torch.float64))[None, :].expand(shape)
            value = base + 0.3 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith(".D"):
            value = 1.0 + 0.5 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif "norm" in name:  # RMSNorm gains (input/pre-ff/final and the dt/B/C norms)
            value = 1.0 + 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("conv1d.weight"):
            value = 0.5 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("bias"):  # conv1d.bias, dt_proj.bias
            value = 0.5 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("embed_tokens.weight"):
            value = torch.randn(shape, generator=gen, dtype=torch.float64)
        else:  # projections, experts, router, lm_head: 1/sqrt(fan_in), fan_in = last dim
            value = torch.randn(shape, generator=gen, dtype=torch.float64) / math.sqrt(shape[-1])
        with torch.no_grad():
            p.copy_(value.to(torch.float32))


def main(out_dir):
    from transformers import JambaConfig, JambaForCausalLM

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(20260602)
    config = JambaConfig(**CONFIG)
    model = JambaForCausalLM(config).to(torch.float32).eval()
    redraw_parameters(model, gen)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    # Only what the loader reads is kept: config.json and model.safetensors.
    for extra in ("generation_config.json",):
        path = os.path.join(out_dir, extra)
        if os.path.exists(path):
            os.remove(path)

    attention_layers = [i for i, t in enumerate(config.layers_block_type) if t == "attention"]
    assert attention_layers == [1, 3], attention_layers
    assert config.layers_num_experts == [1, 1, 4, 1], config.layers_num_experts

    oracle = JambaForCausalLM.from_pretrained(out_dir, attn_implementation="eager", experts_implementation="eager",
                                              dtype=torch.float64).eval()
    # Each decoder layer's output, recorded by a forward hook: transformers' hidden_states hold the
    # outputs of all layers but the last, whose slot has the final-normed state instead.
    layer_outputs = []
    for layer in oracle.model.layers:
        layer.register_forward_hook(lambda module, args, output: layer_outputs.append(
            output[0] if isinstance(output, tuple) else output))
    rng = np.random.default_rng(20260603)
    tensors = {}
    for case, T in (("t13", 13), ("t1", 1)):
        ids = rng.integers(0, CONFIG["vocab_size"], (2, T)).astype(np.int32)
        layer_outputs.clear()
        with torch.no_grad():
            out = oracle(torch.from_numpy(ids).long(), output_attentions=True, output_router_logits=True,
                         output_hidden_states=True, use_cache=False)
        # Router margins: the k-th and (k+1)-th softmax probabilities of every token well apart.
        for logits in out.router_logits:
            if logits.shape[-1] != CONFIG["num_experts"]:
                continue
            p = torch.softmax(logits.double(), dim=-1).sort(dim=-1, descending=True).values
            k = CONFIG["num_experts_per_tok"]
            margin = float((p[:, k - 1] - p[:, k]).min())
            assert margin > 1e-3, f"{case}: router near a tie (margin {margin})"
        tensors[f"{case}/ids"] = ids
        tensors[f"{case}/logits"] = out.logits.float().numpy()
        L = CONFIG["num_hidden_layers"]
        assert len(layer_outputs) == L and len(out.hidden_states) == L + 1
        for layer in range(L):
            if layer < L - 1:  # the hooks see what hidden_states reports
                assert torch.equal(layer_outputs[layer], out.hidden_states[layer + 1])
            tensors[f"{case}/hidden_out/{layer}"] = layer_outputs[layer].float().numpy()
        assert len(out.attentions) == len(attention_layers)
        for layer, probs in zip(attention_layers, out.attentions):
            tensors[f"{case}/probs/{layer}"] = probs.float().numpy()
            tensors[f"{case}/alpha/{layer}"] = probs[:, :, :, 0].mean(dim=-1).numpy()
    save_golden(os.path.join(out_dir, "jamba_golden.safetensors"), tensors, {})

    # config.json as written by save_pretrained carries transformers' version: keep it, but make the
    # file independent of dict ordering so reruns are byte-identical.
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(os.path.normpath(os.path.join(here, "../../fixtures/hf/jamba_tiny")))
