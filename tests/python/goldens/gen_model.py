"""Golden file for the whole-model test (tests/cpp/test_model.cpp): 20 AdamW steps of a tiny
LLaMA-style model, with Hugging Face's LlamaForCausalLM (eager attention, float64) as the independent
reference. sinklab's checkpoints use HF Llama tensor names, so the same names index both.

Training step, as sinklab-pretrain does it: loss = mean next-token cross-entropy over the B*C targets;
backward; clip the global grad norm to 1.0; AdamW(lr, betas, eps) with weight decay on matrices only.

Usage: python gen_model.py OUT_DIR
"""
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from golden_io import save_golden

CASES = {
    # name: (vocab, d, layers, heads, kv_heads, ffn, context C, batch rows B)
    "mha": (64, 32, 2, 4, 4, 48, 12, 3),
    "gqa": (61, 24, 2, 4, 2, 36, 9, 2),  # odd vocab, dh=6, grouped-query attention
}
STEPS = 20
LR, BETAS, EPS, WD, CLIP, NORM_EPS, THETA = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0, 1e-5, 10000.0


def run_case(name, vocab, d, layers, heads, kv_heads, ffn, context, rows, tensors, params):
    seed = zlib.crc32(name.encode())  # str hash() is salted per process: not reproducible
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=context,
                      rms_norm_eps=NORM_EPS, rope_theta=THETA, attention_bias=False, mlp_bias=False,
                      tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).double()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.ndim == 1:
                # Non-trivial RMSNorm gains so their gradients and decay split matter.
                p.copy_(torch.from_numpy((1.0 + 0.1 * rng.standard_normal(p.shape)).astype(np.float32)))
            else:
                p.copy_(torch.from_numpy((0.2 * rng.standard_normal(p.shape)).astype(np.float32)))
            tensors[f"{name}/init/{pname}"] = p.detach().float().numpy().copy()

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    batches = rng.integers(0, vocab, size=(STEPS, rows, context + 1)).astype(np.int32)
    losses, norms = [], []
    for step in range(STEPS):
        ids = torch.from_numpy(batches[step]).long()
        logits = model(input_ids=ids[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        if step == 0:
            for pname, p in model.named_parameters():
                tensors[f"{name}/grad0/{pname}"] = p.grad.detach().float().numpy().copy()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)))
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            tensors[f"{name}/final/{pname}"] = p.detach().float().numpy().copy()
    tensors[f"{name}/batches"] = batches
    tensors[f"{name}/losses"] = np.array(losses, dtype=np.float64)
    tensors[f"{name}/grad_norms"] = np.array(norms, dtype=np.float64)
    for key, value in dict(vocab=vocab, d=d, layers=layers, heads=heads, kv_heads=kv_heads, ffn=ffn,
                           context=context, rows=rows, steps=STEPS, lr=LR, beta1=BETAS[0], beta2=BETAS[1],
                           eps=EPS, weight_decay=WD, clip=CLIP, norm_eps=NORM_EPS, rope_theta=THETA).items():
        params[f"{name}/{key}"] = value


def main():
    out = sys.argv[1]
    tensors, params = {}, {}
    for name, shape in CASES.items():
        run_case(name, *shape, tensors, params)
    save_golden(f"{out}/model.safetensors", tensors, params)


if __name__ == "__main__":
    main()
