"""A text drawn from Guo et al.'s Bigram-Backcopy bigram table, for `data_prep bbm --source`.

Guo et al. 2024 (GuoTianYu2000/Active-Dormant-Attention) generate BBM sequences from the character bigram
table of Tiny Shakespeare stored in their repository (BBM/data/bos1_d0/meta.pickle: `marginal`, `cond`,
`itos`). sinklab's generator estimates its table from a text, so this script turns his table into one: a
Markov chain over his 65 characters (first character from his marginal, then his `cond` rows; his BOS and
delimiter columns are 0 there), as long as Tiny Shakespeare (1,115,394 characters). data_prep bbm on it
re-estimates a table within sampling error of his and keeps his vocabulary (a character the chain never
visits is left out). The table is his, read from a clone of his repository; not shipped with sinklab.

    python bench/guo/guo_text.py GUO_REPO/BBM/data/bos1_d0/meta.pickle OUT.txt [--chars 1115394] [--seed 0]
"""
import argparse
import pickle
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("meta", type=Path, help="Guo's BBM/data/bos1_d0/meta.pickle")
    ap.add_argument("out", type=Path)
    ap.add_argument("--chars", type=int, default=1115394)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    meta = pickle.loads(a.meta.read_bytes())
    n = len([i for i in meta["itos"] if i not in meta["bos"] and i != meta["delimiter"]])  # his 65 characters
    chars = [meta["itos"][i] for i in range(n)]
    cond = np.asarray(meta["cond"], dtype=np.float64)[:n, :n]
    cdf = np.cumsum(cond / cond.sum(axis=1, keepdims=True), axis=1)
    first = np.cumsum(np.asarray(meta["marginal"], dtype=np.float64)[:n])
    rng = np.random.default_rng(a.seed)
    u = rng.random(a.chars)
    ids = np.empty(a.chars, dtype=np.int64)
    ids[0] = min(int(np.searchsorted(first, u[0] * first[-1], side="right")), n - 1)
    for t in range(1, a.chars):
        ids[t] = min(int(np.searchsorted(cdf[ids[t - 1]], u[t], side="right")), n - 1)
    a.out.write_text("".join(chars[i] for i in ids), encoding="utf-8")
    print(f"guo_text: {a.chars} characters from {a.meta} (seed {a.seed}) -> {a.out}")


if __name__ == "__main__":
    main()
