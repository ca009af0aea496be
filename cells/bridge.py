"""From the toy to text (issue #46): how many tokens of real text a small LLaMA-style model needs before its
sink emerges. Each cell is a model size x the rows it trains on x a learning rate, over one scale's base job
file (SCALES); python -m jobs.bridge.run trains every cell x seed to the scale's token budget.

    from cells.bridge import CELLS, SCALES, SIZES, ROWS, LRS

Sizes go down from the demo's tiny shape (jobs/pretrain/tiny_cpu.ini: d 128, 4 layers, 4 heads); heads keep
32 dimensions where the width allows. Rows:
  - "bos": every row starts with <|bos|> (id 1 of the mini corpus's tokenizer), the first token of a packed
    chunk replaced by it (--fixed-token-position 1 --fixed-token-id 1): x_1 ~ I(x = x_fix), Xiao et al.'s
    first-position token as the paper writes it (Sec. 5, "Fixing token in a specific position", Table 10
    right). Not --document-rows: the corpus's 7,504 documents give one 65-token row each, 0.48 M distinct
    tokens, which the budget (4.19 M tokens) would show ~9 times each (the model would learn the rows, not
    the language).
  - "packed": the paper's own data (Sec. 2, Fig. 1 right; Sec. 4's default): documents concatenated with EOS
    and cut into rows that start anywhere, no BOS.
Learning rates: the paper's 4e-4 (Sec. 4, its 60M default) and 5x it, 2e-3 (the demo's tiny model; the paper:
"with smaller learning rates, attention sink tends to emerge after more optimization steps", Fig. 4 right).
"""
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "jobs" / "bridge"  # the bridge's base job files

# scale -> (base job file, token budget of every run). mini: 2^22 = 4.19 M tokens (1024 steps of 4096 tokens,
# 0.89 x the corpus's 4.69 M training tokens, so the budget does not run the model over its data again and
# again), what 36 runs take in ~2 hours of 2 cores (planned from bench_train_step's tokens/s; the measured wall
# time is in docs/bridge/); ci: the test suite's end-to-end run.
SCALES = {"mini": (HERE / "mini.ini", 2 ** 22), "ci": (HERE / "ci.ini", 2 ** 16)}

# name -> trainer settings: the model's shape
SIZES = {
    "d128": {"d-model": "128", "n-layers": "4", "n-heads": "4", "ffn-hidden": "352"},
    "d64": {"d-model": "64", "n-layers": "4", "n-heads": "2", "ffn-hidden": "176"},
    "d32": {"d-model": "32", "n-layers": "2", "n-heads": "2", "ffn-hidden": "88"},
}
ROWS = {
    "bos": {"fixed-token-position": "1", "fixed-token-id": "1"},
    "packed": {},
}
ROWS_TEXT = {"bos": "BOS first", "packed": "packed (no BOS)"}
LRS = ("4e-4", "2e-3")
PAPER_LR = "4e-4"


@dataclass(frozen=True)
class Cell:
    name: str       # folder and run-name part: <size>_<rows>_lr<lr>
    size: str       # a key of SIZES
    rows: str       # a key of ROWS
    lr: str
    settings: dict  # trainer flag (without --) -> value, over the scale's base file

    @property
    def label(self):
        return f"{self.size}, {ROWS_TEXT[self.rows]}, lr {self.lr}"


def cell_name(size, rows, lr):
    return f"{size}_{rows}_lr{lr}"


CELLS = [Cell(cell_name(size, rows, lr), size, rows, lr, {**SIZES[size], **ROWS[rows], "lr": lr})
         for size in SIZES for rows in ROWS for lr in LRS]
CELL_BY_NAME = {c.name: c for c in CELLS}
# The test suite's cell (scale ci): the smallest model, BOS first, the larger lr.
CI_CELL = cell_name("d32", "bos", "2e-3")
