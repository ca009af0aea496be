"""Oracle check (needs torch + transformers: run with .venv-oracle/bin/python, not part of CI): a
sinklab-pretrain checkpoint directory loads unchanged with transformers' LlamaForCausalLM.from_pretrained,
and its mean next-token loss on the first --rows validation chunks equals the valid_loss sinklab logged
for that step in results.h5.

    python tests/python/oracle/check_hf_checkpoint.py OUT_DIR VALID_SHARD ROWS
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM


def read_shard(path):
    raw = Path(path).read_bytes()
    assert raw[:8] == b"SLTOKENS", path
    token_bytes = int.from_bytes(raw[20:24], "little")
    n = int.from_bytes(raw[24:32], "little")
    return np.frombuffer(raw, dtype=np.uint16 if token_bytes == 2 else np.uint32, count=n, offset=64)


def main(out_dir, valid, rows):
    out_dir = Path(out_dir)
    ckpt = sorted((out_dir / "checkpoints").glob("step_????????"))[-1]
    step = int(ckpt.name.split("_")[1])
    cfg = json.loads((ckpt / "config.json").read_text())
    C = cfg["max_position_embeddings"]
    model = LlamaForCausalLM.from_pretrained(ckpt, attn_implementation="eager", torch_dtype=torch.float64)
    tokens = read_shard(valid).astype(np.int64)
    chunks = torch.from_numpy(np.stack([tokens[i * C: i * C + C + 1] for i in range(rows)]))
    with torch.no_grad():
        logits = model(input_ids=chunks[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunks[:, 1:].reshape(-1)).item()
    import h5py  # noqa: E402 (only needed here)
    with h5py.File(out_dir / "results.h5", "r") as f:
        run = next(iter(f["runs"]))
        ev = f[f"runs/{run}/eval"]
        logged = float(ev["valid_loss"][list(ev["step"][:]).index(step)])
    rel = abs(loss - logged) / logged
    print(f"{ckpt}: transformers loss {loss:.6f}, sinklab valid_loss {logged:.6f}, rel. diff {rel:.2e}")
    return 0 if rel < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
