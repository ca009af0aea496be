"""Token shards of uniform random ids, for runs whose speed or counts depend on the shapes only (the GPU
benchmarks, the step ledger, the emulated training-step check): documents of DOC_LEN ids, the last one EOS
(id 0), the rest drawn from [1, VOCAB).

    python bench/random_shards.py OUT_DIR VOCAB [--train-docs N] [--valid-docs N] [--doc-len L] [--seed S]

writes OUT_DIR/train.bin and OUT_DIR/valid.bin.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from data_prep.shards import write_shard  # noqa: E402


def write(out, vocab, train_docs=64, valid_docs=16, doc_len=4096, seed=0):
    """OUT/train.bin and OUT/valid.bin of random documents (see the module's docstring)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n_docs in (("train", train_docs), ("valid", valid_docs)):
        docs = rng.integers(1, vocab, size=(n_docs, doc_len), dtype=np.int64)
        docs[:, -1] = 0
        write_shard(f"{out}/{split}.bin", (d for d in docs), vocab_size=vocab, eos_id=0)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python bench/random_shards.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("vocab", type=int)
    ap.add_argument("--train-docs", type=int, default=64)
    ap.add_argument("--valid-docs", type=int, default=16)
    ap.add_argument("--doc-len", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    write(a.out, a.vocab, a.train_docs, a.valid_docs, a.doc_len, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
