"""Tiny Hugging Face model directories of every family sinklab reads (src/hf/), with goldens from
transformers itself: the fixtures of tests/cpp/test_hf_families.cpp.

Each fixture is a random model of one family and one configuration switch, saved by transformers'
save_pretrained (safetensors) into tests/fixtures/hf/<name>/, plus golden.safetensors (golden_io) with
what transformers computes from that directory (reloaded with from_pretrained, EAGER attention,
float64, output_attentions=True, output_hidden_states=True) on fixed token inputs:

    <case>/ids            i32 [B,T]
    <case>/logits         [B,T,V]
    <case>/probs/<l>      [B,H,T,T]  the attention probabilities of layer l (outputs.attentions)
    <case>/hidden_in/<l>  [B,T,d]    the residual stream entering / leaving decoder layer l (forward
    <case>/hidden_out/<l> [B,T,d]    hooks), the last layer's output before the final norm
    <case>/hidden_pre_norm/<l>       post-LN OPT only: the input of the layer's final_layer_norm
    <case>/hidden_states/<i>         outputs.hidden_states (embeddings, then every layer as transformers
                                     reports it)
(the intervention cases keep ids, logits and probs only).
cases: t13 (B=2, T=13), t1 (B=2, T=1), and on learned-position models replace<t> / swap<t>: the Table 7
interventions p_1 := p_t and p_1 <-> p_t, given to transformers as position_ids.

Config switches covered: gpt2 (Conv1D, learned positions, gelu_new, tied head; and
scale_attn_by_inverse_layer_idx), gpt_neox (rotary_pct 0.25 and 1.0, use_parallel_residual true and
false; one config in the original Pythia spelling rotary_pct / rotary_emb_base), opt (pre-LN, post-LN
as OPT-350M, word_embed_proj_dim != hidden_size: project_in/out), llama (GQA; rope_scaling llama3 in
the Llama-3.1 spelling; bf16 weights with tied head and biases; a sharded fp16 checkpoint with
model.safetensors.index.json), mistral (sliding_window < T, head_dim != hidden/heads).

Weights are random normals exactly representable in the stored dtype, large enough that attention is
far from uniform. Byte-reproducible: fixed seeds, deterministic serialisation.

Usage: python gen_hf_families.py [GOLDEN_DIR]   (fixtures go to GOLDEN_DIR/../fixtures/hf; default:
the repository's tests/fixtures/hf)
"""
import json
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import torch
from transformers import (AutoModelForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel,
                          GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, OPTConfig, OPTForCausalLM, Qwen2Config, Qwen2ForCausalLM)

from golden_io import save_golden

B, T = 2, 13


def fixtures():
    """name -> (model class, config, options). options: dtype (stored), shard (max_shard_size),
    old_config (keys to rewrite into the original hub spelling), interventions."""
    return {
        "gpt2": (GPT2LMHeadModel, GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=2, n_head=4),
                 {"interventions": [("replace", 5), ("replace", 14), ("swap", 7)]}),
        "gpt2_layer_scaled": (GPT2LMHeadModel, GPT2Config(vocab_size=80, n_positions=13, n_embd=32, n_layer=3, n_head=2,
                                                          n_inner=48, scale_attn_by_inverse_layer_idx=True,
                                                          activation_function="gelu_pytorch_tanh"), {}),
        "neox_rot025_parallel": (GPTNeoXForCausalLM,
                                 GPTNeoXConfig(vocab_size=96, hidden_size=32, num_attention_heads=2, num_hidden_layers=2,
                                               intermediate_size=64, rotary_pct=0.25, use_parallel_residual=True,
                                               max_position_embeddings=64),
                                 {"old_config": "neox"}),
        "neox_rot1_sequential": (GPTNeoXForCausalLM,
                                 GPTNeoXConfig(vocab_size=72, hidden_size=32, num_attention_heads=4, num_hidden_layers=3,
                                               intermediate_size=48, rotary_pct=1.0, use_parallel_residual=False,
                                               rotary_emb_base=500.0, max_position_embeddings=64), {}),
        "opt_pre": (OPTForCausalLM,
                    OPTConfig(vocab_size=96, hidden_size=32, num_attention_heads=4, num_hidden_layers=2, ffn_dim=64,
                              max_position_embeddings=16, word_embed_proj_dim=32, do_layer_norm_before=True),
                    {"interventions": [("replace", 6), ("swap", 12)]}),
        "opt_post_project": (OPTForCausalLM,  # OPT-350M's switches: post-LN, project_in/out
                             OPTConfig(vocab_size=64, hidden_size=48, num_attention_heads=4, num_hidden_layers=2,
                                       ffn_dim=64, max_position_embeddings=16, word_embed_proj_dim=32,
                                       do_layer_norm_before=False),
                             {"interventions": [("replace", 3), ("swap", 4)]}),
        "opt_pre_project": (OPTForCausalLM,
                            OPTConfig(vocab_size=64, hidden_size=32, num_attention_heads=2, num_hidden_layers=2,
                                      ffn_dim=48, max_position_embeddings=20, word_embed_proj_dim=24,
                                      do_layer_norm_before=True), {}),
        "llama_gqa": (LlamaForCausalLM,
                      LlamaConfig(vocab_size=80, hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                                  num_hidden_layers=2, intermediate_size=48, rope_theta=10000.0,
                                  max_position_embeddings=64, rms_norm_eps=1e-5), {}),
        "llama3_rope_scaling": (LlamaForCausalLM,
                                LlamaConfig(vocab_size=96, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                            num_hidden_layers=2, intermediate_size=64, max_position_embeddings=128,
                                            rope_theta=10000.0,
                                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                          "high_freq_factor": 8.0,
                                                          "original_max_position_embeddings": 64}),
                                {"old_config": "llama"}),
        "llama_bf16_tied_bias": (LlamaForCausalLM,
                                 LlamaConfig(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
                                             num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64,
                                             tie_word_embeddings=True, attention_bias=True, mlp_bias=True),
                                 {"dtype": torch.bfloat16}),
        "mistral_sliding": (MistralForCausalLM,
                            MistralConfig(vocab_size=80, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                          head_dim=12, num_hidden_layers=2, intermediate_size=48,
                                          max_position_embeddings=64, sliding_window=4), {}),
        "llama_sharded_f16": (LlamaForCausalLM,
                              LlamaConfig(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                          num_hidden_layers=3, intermediate_size=48, max_position_embeddings=64),
                              {"dtype": torch.float16, "shard": "20KB"}),
        # Qwen2.5's switches: q/k/v biases (o none), GQA, rope_theta 1e6, tied head (the 0.5B's), in the hub's
        # spelling (top-level rope_theta).
        "qwen2_gqa_tied": (Qwen2ForCausalLM,
                           Qwen2Config(vocab_size=88, hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                                       num_hidden_layers=2, intermediate_size=64, max_position_embeddings=64,
                                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
                           {"old_config": "llama"}),
        "qwen2_untied": (Qwen2ForCausalLM,
                         Qwen2Config(vocab_size=72, hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
                                     num_hidden_layers=3, intermediate_size=48, max_position_embeddings=64,
                                     rope_theta=10000.0, tie_word_embeddings=False), {}),
        # Gemma 3: local layers with a window of 4 (< T = 13) and rope base 1e4, a global one with 1e6, head_dim
        # 24 != hidden/heads = 20, query_pre_attn_scalar 32 != head_dim, QK-norm, four norms per block, GeGLU,
        # sqrt(d)-scaled embedding, tied head; transformers 5's spelling (layer_types, rope_parameters).
        "gemma3_text": (Gemma3ForCausalLM,
                        Gemma3TextConfig(vocab_size=96, hidden_size=40, num_attention_heads=2, num_key_value_heads=1,
                                         head_dim=24, num_hidden_layers=4, intermediate_size=64,
                                         max_position_embeddings=64, sliding_window=4, query_pre_attn_scalar=32,
                                         layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                                      "sliding_attention"],
                                         rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                          "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}}),
                        {}),
        # The hub's Gemma 3 config.json spelling (google/gemma-3-270m): rope_theta, rope_local_base_freq,
        # sliding_window_pattern (here 2: layers 1 and 3 global), rope_scaling null, no layer_types.
        "gemma3_hub_config": (Gemma3ForCausalLM,
                              Gemma3TextConfig(vocab_size=80, hidden_size=32, num_attention_heads=4,
                                               num_key_value_heads=2, head_dim=16, num_hidden_layers=4,
                                               intermediate_size=48, max_position_embeddings=64, sliding_window=5,
                                               query_pre_attn_scalar=16, sliding_window_pattern=2,
                                               rope_theta=1000000.0, rope_local_base_freq=10000.0),
                              {"old_config": "gemma3"}),
    }


def randomise(model, rng, dtype):
    """Every parameter: biases 0.1 n, norm gains 1 + 0.1 n, matrices and tables n / sqrt(fan_in) * 1.5
    (scores of order a few units: attention far from uniform), rounded to the stored dtype."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name.endswith("bias"):
                v = 0.1 * rng.standard_normal(shape)
            elif p.ndim == 1:
                v = 1.0 + 0.1 * rng.standard_normal(shape)
            else:
                fan_in = shape[0] if "c_" in name else shape[1]  # GPT-2 Conv1D is [in, out]
                v = 1.5 * rng.standard_normal(shape) / np.sqrt(fan_in)
            p.copy_(torch.from_numpy(v.astype(np.float32)).to(dtype).float())


def rewrite_old_config(path, style):
    """The spelling of the original hub configs (what the survey reads), instead of transformers 5's
    rope_parameters object."""
    cfg = json.loads(path.read_text())
    rope = cfg.pop("rope_parameters")
    if style == "neox":  # Pythia: rotary_pct, rotary_emb_base
        cfg["rotary_pct"] = rope["partial_rotary_factor"]
        cfg["rotary_emb_base"] = rope["rope_theta"]
    elif style == "llama":  # Llama-3.1: rope_theta + rope_scaling
        cfg["rope_theta"] = rope.pop("rope_theta")
        cfg["rope_scaling"] = rope if set(rope) != {"rope_type"} or rope["rope_type"] != "default" else None
    elif style == "gemma3":  # google/gemma-3-270m: per-type thetas at the top level, the layer pattern
        cfg["rope_theta"] = rope["full_attention"]["rope_theta"]
        cfg["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        cfg["rope_scaling"] = None
        types = cfg.pop("layer_types")
        pattern = types.index("full_attention") + 1
        assert types == ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(len(types))]
        cfg["sliding_window_pattern"] = pattern
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def decoder_layers(model):
    for attr in ("transformer.h", "gpt_neox.layers", "model.decoder.layers", "model.layers"):
        obj = model
        try:
            for part in attr.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    raise RuntimeError(f"no decoder layers in {type(model).__name__}")


def run_case(model, ids, position_ids, case, tensors, post_ln, hidden=True):
    layers = decoder_layers(model)
    captured, hooks = {}, []
    for l, layer in enumerate(layers):
        def hook(module, args, kwargs, output, l=l):
            x_in = args[0] if args else kwargs["hidden_states"]
            x_out = output[0] if isinstance(output, tuple) else output
            captured[("hidden_in", l)] = x_in
            captured[("hidden_out", l)] = x_out
        hooks.append(layer.register_forward_hook(hook, with_kwargs=True))
        if post_ln:
            def pre_hook(module, args, l=l):
                captured[("hidden_pre_norm", l)] = args[0]
            hooks.append(layer.final_layer_norm.register_forward_pre_hook(pre_hook))
    kwargs = {} if position_ids is None else {"position_ids": torch.from_numpy(position_ids).long()}
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids).long(), output_attentions=True, output_hidden_states=True,
                    **kwargs)
    for h in hooks:
        h.remove()
    tensors[f"{case}/ids"] = ids
    tensors[f"{case}/logits"] = out.logits.float().numpy()
    for l, a in enumerate(out.attentions):
        tensors[f"{case}/probs/{l}"] = a.float().numpy()
    if not hidden:
        return
    for i, h in enumerate(out.hidden_states):
        tensors[f"{case}/hidden_states/{i}"] = h.float().numpy()
    for (what, l), x in sorted(captured.items()):
        tensors[f"{case}/{what}/{l}"] = x.reshape(ids.shape[0], ids.shape[1], -1).float().numpy()


def random_model(name, cls, config, options):
    """The fixture's random model (eager attention, weights rounded to the stored dtype) and the rng
    that goes on to draw its golden inputs."""
    seed = zlib.crc32(name.encode())  # str hash() is salted per process
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config.attn_implementation = "eager"
    model = cls(config).eval()
    randomise(model, rng, options.get("dtype", torch.float32))
    return model, rng


def write_golden(out, rng, options, strict=False):
    """golden.safetensors in `out`: what transformers computes from the directory as saved, in float64.
    strict: every tensor of the checkpoint must be one transformers uses (no missing or unexpected keys)."""
    ref, loading = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float64,
                                                        output_loading_info=True)
    ref.eval()
    assert not strict or not (loading["missing_keys"] or loading["unexpected_keys"]), f"{out}: {loading}"
    vocab = ref.config.vocab_size
    post_ln = getattr(ref.config, "do_layer_norm_before", True) is False
    tensors, params = {}, {}
    ids13 = rng.integers(0, vocab, size=(B, T)).astype(np.int32)
    ids1 = rng.integers(0, vocab, size=(B, 1)).astype(np.int32)
    run_case(ref, ids13, None, "t13", tensors, post_ln)
    run_case(ref, ids1, None, "t1", tensors, post_ln)
    for kind, t in options.get("interventions", []):
        pos = np.arange(T)
        if kind == "replace":
            pos[0] = t
        else:
            pos[0], pos[t] = t, 0
        run_case(ref, ids13, np.broadcast_to(pos, (B, T)).copy(), f"{kind}{t}", tensors, post_ln, hidden=False)
        params[f"{kind}{t}/position"] = t
    save_golden(str(out / "golden.safetensors"), tensors, params)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{out.name}: {size / 1024:.0f} KiB ({', '.join(sorted(f.name for f in out.iterdir()))})")


def make_fixture(name, cls, config, options, root):
    model, rng = random_model(name, cls, config, options)
    out = root / name
    shutil.rmtree(out, ignore_errors=True)
    model.to(options.get("dtype", torch.float32)).save_pretrained(out, safe_serialization=True,
                                                                  max_shard_size=options.get("shard", "50GB"))
    (out / "generation_config.json").unlink(missing_ok=True)
    if "old_config" in options:
        rewrite_old_config(out / "config.json", options["old_config"])
    write_golden(out, rng, options)


def main():
    root = (Path(sys.argv[1]).resolve().parent if len(sys.argv) > 1
            else Path(__file__).resolve().parents[2]) / "fixtures" / "hf"
    root.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    only = sys.argv[2:]  # gen_hf_families.py GOLDEN_DIR [NAME ...]: these fixtures only
    for name, (cls, config, options) in fixtures().items():
        if not only or name in only:
            make_fixture(name, cls, config, options, root)


if __name__ == "__main__":
    main()
