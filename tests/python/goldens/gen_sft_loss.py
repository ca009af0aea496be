"""Golden file for the SFT loss test (tests/cpp/test_sft_loss.cpp): the assistant-only masked
cross-entropy of sinklab-sft and its gradients, with Hugging Face's LlamaForCausalLM (eager attention,
float64) as the independent reference.

SFT rows as data_prep sft writes them: tokens [R, C] and loss_mask [R, C] (1 = an assistant token, to
be predicted). The loss of one optimizer step over the R rows (its global batch) is, as sinklab-sft
defines it, the mean over every counted target of the batch:

    loss = sum_{r, i < C-1, mask[r, i+1] = 1} CE(logits[r, i], tokens[r, i+1]) / #{counted targets}

The rows hold a row without any assistant token and rows whose mask starts or ends mid-row (packed
conversations straddling rows), so that a mean per row or per micro-batch would differ from this one.

Usage: python gen_sft_loss.py OUT_DIR
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from golden_io import save_golden

VOCAB, D, LAYERS, HEADS, KV_HEADS, FFN, C, ROWS = 37, 16, 2, 2, 2, 24, 10, 4  # odd vocab and C
NORM_EPS, THETA = 1e-5, 10000.0


def main():
    out = sys.argv[1]
    torch.manual_seed(16)
    rng = np.random.default_rng(16)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=FFN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=C,
                      rms_norm_eps=NORM_EPS, rope_theta=THETA, attention_bias=False, mlp_bias=False,
                      tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).double()
    tensors, params = {}, {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            values = 1.0 + 0.1 * rng.standard_normal(p.shape) if p.ndim == 1 else 0.3 * rng.standard_normal(p.shape)
            p.copy_(torch.from_numpy(values.astype(np.float32)))
            tensors[f"sft/init/{name}"] = p.detach().float().numpy().copy()

    tokens = rng.integers(0, VOCAB, size=(ROWS, C)).astype(np.int32)
    mask = np.zeros((ROWS, C), dtype=np.int32)
    mask[0, 3:7] = 1      # one answer inside the row
    mask[1, :] = 0        # no assistant token at all
    mask[2, 0:4] = 1      # an answer continued from the previous row (its first token is not a target)
    mask[2, 8:] = 1       # and one that goes on in the next row
    mask[3, 1:] = 1       # nearly all
    ids = torch.from_numpy(tokens).long()
    logits = model(input_ids=ids).logits[:, :-1]              # [R, C-1, V]: predicts tokens 1..C-1
    counted = torch.from_numpy(mask[:, 1:]).bool()
    losses = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1), reduction="none")
    loss = losses[counted.reshape(-1)].sum() / counted.sum()
    loss.backward()
    for name, p in model.named_parameters():
        tensors[f"sft/grad/{name}"] = p.grad.detach().float().numpy().copy()
    tensors["sft/tokens"] = tokens
    tensors["sft/loss_mask"] = mask
    tensors["sft/loss"] = np.array([float(loss.detach())], dtype=np.float64)
    for key, value in dict(vocab=VOCAB, d=D, layers=LAYERS, heads=HEADS, kv_heads=KV_HEADS, ffn=FFN, context=C,
                           rows=ROWS, counted=int(counted.sum()), norm_eps=NORM_EPS, rope_theta=THETA).items():
        params[f"sft/{key}"] = value
    save_golden(f"{out}/sft_loss.safetensors", tensors, params)


if __name__ == "__main__":
    main()
