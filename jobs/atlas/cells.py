"""The emergence atlas (issue #42): every attention design and training axis that bears on the sink, each a
cell of settings on top of one Bigram-Backcopy (BBM) base job file, with the expectation the literature
states for it.

    from jobs.atlas.cells import CELLS, SCALES, Cell

A cell's settings are trainer flags (without "--") over the scale's base file (SCALES); the runner
(python -m jobs.atlas.run) adds the seed, the steps, the out-dir and the run-name. Where the BBM study of
jobs/pretrain/make_jobs.py (group "bbm") or one of its paper tables already has the cell, the settings and
the citation come from there, so the two cannot drift apart.

expect is one of EXPECT: "sink" (a sink on the first position), "no_sink", "moved_to_bias" (onto the sink
token or k*), "none" (no claim the atlas' measure can check). The BBM study's finer kinds map onto these
(BBM_KINDS). principal: the cells the issue also runs at the cheap setting with >= 3 seeds.

The baseline "softmax" is at the same time the learned-position, pre-norm and one-layer cell of the
positional, norm-placement and depth axes (SAME_AS): it is run once.
"""
from dataclasses import dataclass
from pathlib import Path

from jobs.pretrain.make_jobs import GROUPS

HERE = Path(__file__).resolve().parent
PRETRAIN = HERE.parent / "pretrain"

# name -> base job file. cheap: the demo's setting (d = 256, T = 256, 150 steps of 32768 tokens);
# small: d = 64, T = 64, 8192 tokens a step (the CI test's setting, bbm_small.ini says what was measured);
# ci: the test suite's end-to-end run of the runner (d = 32, T = 32), no claim about sinks.
SCALES = {
    "cheap": str(PRETRAIN / "bbm_cpu.ini"),
    "small": str(HERE / "bbm_small.ini"),
    "ci": str(HERE / "bbm_ci.ini"),
}
EXPECT = ("sink", "no_sink", "moved_to_bias", "none")
# The BBM study's expect_kind (its first condition) as an atlas expectation: the sink on the first position
# and a later sink are sinks; the window's rule reads a measure (the window start) that is not the atlas'.
BBM_KINDS = {"sink": "sink", "no_sink": "no_sink", "moved_to_bias": "moved_to_bias", "first_position": "sink",
             "later_than": "sink", "absolute_not_window_start": "none"}
SAME_AS = {"learned positions": "softmax", "pre-norm": "softmax", "1 layer": "softmax"}


@dataclass(frozen=True)
class Cell:
    name: str        # folder and run-name part: results/atlas/<scale>/<name>/seed<k>
    label: str       # what the design is, for tables
    settings: dict   # trainer flag (without --) -> value string, over the scale's base job file
    expect: str      # one of EXPECT
    source: str      # paper section / table, another paper, or "none stated"
    principal: bool  # also run at the cheap setting (>= 3 seeds)


def _paper_cell(folder, stem):
    """The make_jobs.Cell of group `folder` named `stem` ("" for the group's cell that is its base file)."""
    group = next(g for g in GROUPS if g.folder == folder)
    return next(c for c in group.cells if c.stem == stem)


def _from_bbm(name, stem=None, label=None, principal=False, extra=None):
    """A cell of the BBM study: its settings (plus extra), its expectation and its citation."""
    c = _paper_cell("bbm", name if stem is None else stem)
    kind = BBM_KINDS[c.expect_kind.split("+")[0].split(":")[0]]
    return Cell(name, label or c.label, {**c.settings, **(extra or {})}, kind, c.expect, principal)


def _from_table(folder, stem, name, expect, source, principal=False, label=None):
    """A cell of a paper table (or of make_jobs' beyond-paper group) run on the BBM base instead."""
    c = _paper_cell(folder, stem)
    return Cell(name, label or c.label, dict(c.settings), expect, source, principal)


_QIU = ("Qiu et al. 2025 (Gated Attention for LLMs): the sigmoid gate on each head's output after SDPA, from the "
        "pre-norm hidden state (G1), cuts the first token's attention from 46.7 % to 4.8 % (15B MoE)")
_TABLE3 = "Sec. 7.1, Table 3: Sink_1 {} % (a sink with every positional embedding)"

CELLS = [
    # The attention operation (Sec. 7.4, Tables 6 and 15) and the sink-free designs since.
    _from_bbm("softmax", stem="", label="softmax (learned positions, pre-norm, 1 layer)", principal=True),
    _from_bbm("sigmoid", principal=True),
    _from_table("table15_attn_ops", "sigmoid_sum", "sigmoid_sum", "sink", "Sec. 7.4, Table 6: Sink_1 30.24 %"),
    _from_table("beyond_paper", "sigmoid_log_n", "sigmoid_log_n", "no_sink",
                "Sec. 7.4, Table 6 (sigmoid with Z = 1: no sink); the bias b = -log n is FlashSigmoid's "
                "(Ramapuram et al. 2024), who state no expectation about sinks"),
    _from_table("table15_attn_ops", "elu_one", "elu_one", "no_sink", "Sec. 7.4, Table 6: Sink_1 0.80 % (proxy scores)"),
    _from_table("table15_attn_ops", "linear_one", "linear_one", "no_sink",
                "Sec. 7.4, Table 6: Sink_1 0.00 % (proxy scores)"),
    _from_table("beyond_paper", "softmax_plus_one", "softmax_plus_one", "no_sink",
                "Miller 2023 ('Attention Is Off By One'): a row may sum to < 1, so no sink is needed; "
                "Xiao et al. 2024 (StreamingLLM, Sec. 3.3, Table 3) found the first tokens still used"),
    _from_table("beyond_paper", "sink_logit", "sink_logit", "no_sink",
                "gpt-oss model card (OpenAI 2025), attention: a learned per-head logit in the softmax "
                "denominator lets a head attend to nothing, in place of a sink token", principal=True),
    _from_table("beyond_paper", "gated_headwise", "gated_headwise", "no_sink",
                _QIU, principal=True),
    _from_table("beyond_paper", "gated_elementwise", "gated_elementwise", "no_sink",
                _QIU),
    _from_table("beyond_paper", "softpick", "softpick", "no_sink",
                "Zuhri et al. 2025 (Softpick): 0 % sink rate at 340M parameters", principal=True),
    # Biases that give the sink another place (Sec. 7.3, Table 4).
    _from_bbm("sink_token"),
    _from_bbm("kv_bias", principal=True),
    Cell("kv_bias_no_bos", "learnable key and value biases, rows that start anywhere (no BOS first)",
         {**_paper_cell("bbm", "kv_bias").settings, **_paper_cell("bbm", "no_bos").settings}, "moved_to_bias",
         _paper_cell("bbm", "kv_bias").expect + "; without a constant first token k* is the only no-op key",
         True),
    # The data and training axes (Secs. 5, 6, App. C.1).
    _from_bbm("no_bos", principal=True),
    _from_bbm("window", label="sliding window of 16 keys (< T at every scale)", extra={"attn-window": "16"}),
    _from_bbm("wd_0"),
    _from_bbm("wd_0.1"),
    Cell("lr_quarter", "a 4x smaller learning rate (5e-4)", {"lr": "5e-4"},
         BBM_KINDS["later_than"], _paper_cell("bbm", "lr_quarter").expect, False),
    # Positional embedding (Sec. 7.1, Table 3), norm placement (Sec. 7.2), depth.
    _from_table("table03_pos_emb", "nope", "nope", "sink", _TABLE3.format("20.35"), label="no positional embedding"),
    Cell("rope", "rotary positions", {"pos-emb": "rope"}, "sink", _TABLE3.format("18.18"), False),
    _from_table("table03_pos_emb", "alibi", "alibi", "sink", _TABLE3.format("20.78")),
    _from_table("sec7_post_norm", "post_norm", "post_norm", "sink", "Sec. 7.2: Sink_1 13.54 % with post-norm"),
    Cell("three_layers", "3 layers", {"n-layers": "3"}, BBM_KINDS["sink"], _paper_cell("bbm", "guo_3layer").expect,
         False),
]

CELL_BY_NAME = {c.name: c for c in CELLS}
