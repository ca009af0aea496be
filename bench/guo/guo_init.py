"""Guo et al.'s initial weights under sinklab's names, for `sinklab-pretrain --init-weights`.

Guo et al. 2024 (GuoTianYu2000/Active-Dormant-Attention, BBM/) publish one run of their 1-layer
Bigram-Backcopy model (BOS attention 0.22 at step 200, 0.56 at 300). Its train_main.py seeds torch and
builds the model right away, so its initial weights are a function of the seed alone. This script draws
them the same way with PyTorch (the modules of his model.py in the order its Transformer creates them:
token and position embeddings, per layer wq, wk, wv, wo, the FFN's w1, w2, then the output layer; the
LayerNorms draw nothing) and writes them under sinklab's names (jobs/pretrain/bbm/guo_1layer.ini's model:
LayerNorm, learned positions, ReLU FFN 4d, untied head), with the token rows moved from his vocabulary
(the 65 characters of Tiny Shakespeare, then BOS, then the delimiter) to the ids of the data's bbm.json
by character. Every character of the data must be in his vocabulary (data made from his bigram table:
guo_text.py).

    python bench/guo/guo_init.py --bbm-meta DATA/bbm.json --out FILE.safetensors [--seed 42] [--layers 1]
                                 [--d-model 256]

`sinklab-pretrain --config jobs/pretrain/bbm/guo_1layer.ini --init-weights FILE.safetensors ...` starts from
it. Runs in the oracle environment (torch, safetensors): torch is a test oracle here, not a dependency of the
binaries.
"""
import argparse
import json
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

# Guo's vocabulary (BBM/data/bos1_d0/meta.pickle: itos), BOS and delimiter after it.
GUO_CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
GUO_BOS, GUO_DELIMITER, GUO_VOCAB = 65, 66, 67
GUO_MAX_LENGTH = 256  # ModelArgs.max_length: the rows of his position embedding


def guo_initial_weights(seed: int, layers: int, d: int) -> dict[str, np.ndarray]:
    """The initial parameters of Guo's Transformer (his names) after set_random_seed(seed)."""
    torch.manual_seed(seed)  # his set_random_seed also seeds numpy, random and CUDA, which the init does not use
    tok = torch.nn.Embedding(GUO_VOCAB, d)
    pos = torch.nn.Embedding(GUO_MAX_LENGTH, d)
    w = {"tok_embeddings.weight": tok.weight, "pos_embeddings.weight": pos.weight}
    for l in range(layers):
        for name in ("wq", "wk", "wv", "wo"):
            w[f"layers.{l}.attention.{name}.weight"] = torch.nn.Linear(d, d, bias=False).weight
        w[f"layers.{l}.ff.w1.weight"] = torch.nn.Linear(d, 4 * d, bias=False).weight
        w[f"layers.{l}.ff.w2.weight"] = torch.nn.Linear(4 * d, d, bias=False).weight
    w["output.weight"] = torch.nn.Linear(d, GUO_VOCAB, bias=False).weight
    return {k: v.detach().numpy().astype(np.float32) for k, v in w.items()}


def sinklab_weights(guo: dict[str, np.ndarray], layers: int, d: int, rows: list[int]) -> dict[str, np.ndarray]:
    """sinklab's tensors (src/model/config.cpp, param_layout) from Guo's; `rows[i]` is Guo's id of token i."""
    ones, zeros = np.ones(d, np.float32), np.zeros(d, np.float32)
    out = {"model.embed_tokens.weight": guo["tok_embeddings.weight"][rows],
           "model.embed_positions.weight": guo["pos_embeddings.weight"],
           "model.norm.weight": ones, "model.norm.bias": zeros,
           "lm_head.weight": guo["output.weight"][rows]}
    for l in range(layers):
        p, g = f"model.layers.{l}.", f"layers.{l}."
        out.update({p + "input_layernorm.weight": ones, p + "input_layernorm.bias": zeros,
                    p + "post_attention_layernorm.weight": ones, p + "post_attention_layernorm.bias": zeros,
                    p + "self_attn.q_proj.weight": guo[g + "attention.wq.weight"],
                    p + "self_attn.k_proj.weight": guo[g + "attention.wk.weight"],
                    p + "self_attn.v_proj.weight": guo[g + "attention.wv.weight"],
                    p + "self_attn.o_proj.weight": guo[g + "attention.wo.weight"],
                    p + "mlp.up_proj.weight": guo[g + "ff.w1.weight"],
                    p + "mlp.down_proj.weight": guo[g + "ff.w2.weight"]})
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def guo_rows(bbm_meta: dict) -> list[int]:
    """Guo's token id for every token id of a data_prep bbm vocabulary."""
    vocab = bbm_meta["vocab"]
    missing = [c for c in vocab["chars"] if c not in GUO_CHARS]
    if missing:
        raise SystemExit(f"guo_init: the data's characters {missing!r} are not in Guo's vocabulary "
                         "(make the data from his bigram table: bench/guo/guo_text.py)")
    rows = [GUO_CHARS.index(c) for c in vocab["chars"]] + [-1] * (vocab["size"] - len(vocab["chars"]))
    rows[vocab["bos_id"]], rows[vocab["delimiter_id"]] = GUO_BOS, GUO_DELIMITER
    if -1 in rows:
        raise SystemExit(f"guo_init: token {rows.index(-1)} of the data's vocabulary has no character")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bbm-meta", type=Path, required=True, help="data_prep bbm's bbm.json of the training data")
    ap.add_argument("--out", type=Path, required=True, help="the .safetensors file to write")
    ap.add_argument("--seed", type=int, default=42, help="Guo's seed (his published run: 42)")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=256)
    a = ap.parse_args()
    rows = guo_rows(json.loads(a.bbm_meta.read_text()))
    guo = guo_initial_weights(a.seed, a.layers, a.d_model)
    if a.out.suffix != ".safetensors":
        raise SystemExit(f"guo_init: --out {a.out}: name it *.safetensors (what --init-weights takes as a file)")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(sinklab_weights(guo, a.layers, a.d_model, rows), str(a.out))
    print(f"guo_init: Guo's initial weights (seed {a.seed}, {a.layers} layer(s), d {a.d_model}) -> {a.out}")


if __name__ == "__main__":
    main()
