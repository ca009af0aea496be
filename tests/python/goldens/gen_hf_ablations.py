"""Goldens of the survey's ablations (issue #19) from transformers itself: for every HF fixture of
tests/fixtures/hf, the next-token loss (float64, eager attention) of the fixture's golden ids (t13: B=2,
T=13) under each case of CASES, written to tests/golden/hf_ablations.json.

How transformers is made to run each case (nothing of sinklab is used):
- window, mask_first, and window_sinks on models without rotary positions: each family's module-level
  eager_attention_forward is wrapped so that its additive mask also masks what the case hides (the
  model's own mask, e.g. Mistral's sliding window, still applies);
- window_sinks on rotary models (LLaMA, Mistral, Qwen2, Gemma 3, GPT-NeoX): StreamingLLM's cache written out
  directly, with the layer's own window and rotary frequencies (Gemma 3's local and global layers differ).
  Query i sees its W most recent keys with the model's rotated q and k, and the first s keys outside that
  window with q rotated to its cache slot p_i = min(i, s + W - 1) instead of i (q' = q cos + rotate_half(q)
  sin at angle (p_i - i) * inv_freq, the model's own inv_freq, within the rotary dimensions); one softmax
  over both sets;
- massive_zero / massive_mean: a forward hook on decoder layer l sets the n largest |h_1| features of its
  output to 0 or to their mean over tokens 2..T, per sequence.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_hf_families import decoder_layers  # noqa: E402  (the fixtures' own layer lookup)

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "hf"
# The survey's --ablations syntax; W and s small against T = 13 so that every regime occurs (queries
# before the window fills, with sinks at their own positions, and after, with re-assigned ones).
CASES = ["window:4", "window:1", "window_sinks:4:2", "window_sinks:3:1", "mask_first:0", "mask_first:1",
         "massive_zero:0:2", "massive_mean:1:3"]
FAMILY_MODULES = ["llama", "mistral", "qwen2", "gemma3", "gpt_neox", "gpt2", "opt", "jamba"]


def rotary_inv_freq(model, layer_type=None):
    """The model's rotary inverse frequencies (float64), those of the layer type where they differ per
    type (Gemma 3: sliding_attention_inv_freq, full_attention_inv_freq), or None without rotary."""
    for attr in ("model.rotary_emb", "gpt_neox.rotary_emb"):
        obj = model
        try:
            for part in attr.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if layer_type is not None and hasattr(obj, f"{layer_type}_inv_freq"):
            return getattr(obj, f"{layer_type}_inv_freq").double()
        if hasattr(obj, "inv_freq"):
            return obj.inv_freq.double()
    return None


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Case:
    def __init__(self, text, model):
        parts = text.split(":")
        self.kind, self.args = parts[0], [int(p) for p in parts[1:]]
        self.model = model
        # Rotary at all (Gemma 3 has its frequencies per layer type only)?
        self.rotary = any(rotary_inv_freq(model, t) is not None for t in (None, "full_attention"))

    def layer_inv_freq(self, module):
        return rotary_inv_freq(self.model, getattr(module, "layer_type", None))

    def allowed(self, layer, T, own_window):
        """[T, T] bool: what query i may see, or None (the case leaves this layer alone). own_window: the
        layer's own sliding window (the sliding_window its attention call is given: Mistral's every layer,
        Gemma 3's local layers), intersected with the case's."""
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        causal = j <= i
        if self.kind == "mask_first":
            if layer < self.args[0]:
                return None
            return causal & ((j > 0) | (i == 0))
        if self.kind in ("window", "window_sinks"):
            W = min(self.args[0], own_window or 10**9)
            recent = causal & (j > i - W)
            if self.kind == "window":
                return recent
            return recent | (causal & (j < self.args[1]))  # the first s keys (those outside the window: sinks)
        return None


def wrap(original, case):
    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        T = query.shape[-2]
        own_window = kwargs.get("sliding_window")
        allowed = case.allowed(module.layer_idx, T, own_window)
        if allowed is None:
            return original(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        if case.kind == "window_sinks" and case.rotary:
            return streaming_rotary(module, query, key, value, attention_mask, scaling, case, own_window)
        lowest = torch.finfo(query.dtype).min
        base = attention_mask if attention_mask is not None else torch.zeros(1, 1, T, T, dtype=query.dtype)
        mask = torch.where(allowed[None, None], base[..., :T, :T], torch.tensor(lowest, dtype=query.dtype))
        return original(module, query, key, value, mask, scaling=scaling, dropout=dropout, **kwargs)
    return attention


def streaming_rotary(module, q, k, v, attention_mask, scaling, case, own_window):
    """StreamingLLM's sink + recent cache on a rotary model, per query (see the module docstring), with the
    layer's own rotary frequencies."""
    B, H, T, dh = q.shape
    group = H // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    W = min(case.args[0], own_window or 10**9)
    s = case.args[1]
    i = torch.arange(T)
    slot = torch.clamp(i, max=s + W - 1)
    inv_freq = case.layer_inv_freq(module)
    rot = inv_freq.numel() * 2
    angle = (slot - i).double()[:, None] * inv_freq[None, :]  # [T, rot/2]
    emb = torch.cat((angle, angle), dim=-1)
    q_rot, q_pass = q[..., :rot], q[..., rot:]
    q_slot = torch.cat((q_rot * emb.cos() + rotate_half(q_rot) * emb.sin(), q_pass), dim=-1)
    if scaling is None:
        scaling = dh ** -0.5
    scores_recent = torch.matmul(q, k.transpose(-1, -2)) * scaling
    scores_sinks = torch.matmul(q_slot, k.transpose(-1, -2)) * scaling
    ii, jj = i[:, None], i[None, :]
    recent = (jj <= ii) & (jj > ii - W)
    sinks = (jj < s) & (jj <= ii - W)
    scores = torch.where(recent, scores_recent, torch.where(sinks, scores_sinks, torch.tensor(-torch.inf, dtype=q.dtype)))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v).transpose(1, 2), probs


def massive_hook(case):
    layer, n = case.args

    def hook(module, args, output):
        h = output[0] if isinstance(output, tuple) else output
        for b in range(h.shape[0]):
            dims = torch.argsort(h[b, 0].abs(), descending=True, stable=True)[:n]
            h[b, 0, dims] = 0.0 if case.kind == "massive_zero" else h[b, 1:, dims].mean(dim=0)
        return output
    return layer, hook


def next_token_loss(logits, ids):
    log_probs = torch.log_softmax(logits[:, :-1], dim=-1)
    return -log_probs.gather(-1, ids[:, 1:, None]).mean().item()


def main(out_dir):
    import importlib
    modules = {name: importlib.import_module(f"transformers.models.{name}.modeling_{name}") for name in FAMILY_MODULES}
    originals = {name: m.eager_attention_forward for name, m in modules.items()}
    result = {}
    for fixture in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        golden = fixture / "golden.safetensors"
        if not golden.exists():
            golden = fixture / "jamba_golden.safetensors"
        ids = torch.from_numpy(load_file(str(golden))["t13/ids"].astype(np.int64))
        extra = {"experts_implementation": "eager"} if "jamba" in fixture.name else {}
        model = AutoModelForCausalLM.from_pretrained(fixture, attn_implementation="eager", dtype=torch.float64,
                                                     **extra).eval()
        losses = {}
        with torch.no_grad():
            losses["none"] = next_token_loss(model(input_ids=ids).logits, ids)
            for text in CASES:
                case = Case(text, model)
                hooks = []
                if case.kind.startswith("massive"):
                    layer, hook = massive_hook(case)
                    hooks.append(decoder_layers(model)[layer].register_forward_hook(hook))
                for name, m in modules.items():
                    m.eager_attention_forward = wrap(originals[name], case)
                try:
                    losses[text] = next_token_loss(model(input_ids=ids).logits, ids)
                finally:
                    for name, m in modules.items():
                        m.eager_attention_forward = originals[name]
                    for h in hooks:
                        h.remove()
        result[fixture.name] = losses
        print(f"{fixture.name}: " + ", ".join(f"{k} {v:.6f}" for k, v in losses.items()))
    out = Path(out_dir) / "hf_ablations.json"
    out.write_text(json.dumps({"cases": CASES, "T": 13, "losses": result}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ROOT / "tests" / "golden")
