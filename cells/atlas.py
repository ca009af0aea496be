"""The emergence atlas (issue #42): every attention design and training axis that bears on the sink, each a
cell of settings on top of one Bigram-Backcopy (BBM) base job file, with the expectation the literature
states for it.

    from cells.atlas import CELLS, SCALES, Cell

A cell's settings are trainer flags (without "--") over the scale's base file (SCALES); the runner
(python -m jobs.atlas.run) adds the seed, the steps, the out-dir and the run-name. Where the BBM study of
cells/pretrain.py (group "bbm") or one of its paper tables already has the cell, the settings and
the citation come from there, so the two cannot drift apart.

expect is one of EXPECT: "sink" (a sink on the first position), "no_sink", "moved_to_bias" (onto the sink
token or k*), "disputed" (the sources disagree: disputed_by names who expects a sink and who none), "none" (no
claim the atlas' measure can check). The BBM study's finer kinds map onto these (BBM_KINDS). principal: the cells
the issue also runs at the cheap setting with >= 3 seeds.

The paper's own setting (issue 54) is a scale of its own with a table of its own, PAPER_CELLS (SCALE_CELLS says
which scale runs which table): rows cut anywhere from the packed stream (no BOS first), softmax and every sink
design of the paper's Sec. 7 and since at 3 layers (DESIGNS, each taking the settings and the expectation of its
cell in CELLS where the atlas has one) and those of the earlier disagreements at 1 layer too (ONE_LAYER_DESIGNS,
beside their BOS-first 1-layer cells), the learned-sink designs also with BOS first at 3 layers
(BOS_FIRST_DESIGNS), and the two axes of the question whether the sink logit and k*/v* are limited by their
learning rate (SINK_AXES: the sink logit's initial value 0 or log T, an lr multiplier 1x or 10x of the sink
tensors). A paper cell's design is the name of its design; its name says the depth, the rows and the axis
(sink_logit_3l_init_logt_lr10).

The baseline "softmax" is at the same time the learned-position, pre-norm and one-layer cell of the
positional, norm-placement and depth axes (SAME_AS): it is run once.
"""
import math
from dataclasses import dataclass

from cells.pretrain import GROUPS, JOBS_DIR as PRETRAIN

HERE = PRETRAIN.parent / "atlas"  # the atlas's base job files

# name -> base job file. cheap: the demo's setting (d = 256, T = 256, 150 steps of 32768 tokens);
# small: d = 64, T = 64, 8192 tokens a step (the CI test's setting, bbm_small.ini says what was measured);
# ci: the test suite's end-to-end run of the runner (d = 32, T = 32), no claim about sinks; paper: the paper's own
# setting (rows anywhere, no BOS first, 3 layers, d = 64, T = 64, a fixed budget; PAPER_CELLS); paper_ci: its
# test-suite twin (d = 32, T = 32), no claim about sinks.
SCALES = {
    "cheap": str(PRETRAIN / "bbm_cpu.ini"),
    "small": str(HERE / "bbm_small.ini"),
    "ci": str(HERE / "bbm_ci.ini"),
    "paper": str(HERE / "bbm_paper.ini"),
    "paper_ci": str(HERE / "bbm_paper_ci.ini"),
}
EXPECT = ("sink", "no_sink", "moved_to_bias", "disputed", "none")
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
    design: str = ""         # a paper cell (PAPER_CELLS): the design it runs (a name of DESIGNS)
    axis: str = ""           # a paper cell of SINK_AXES: what its axis sets ("" for the design as it is)
    disputed_by: tuple = ()  # expect "disputed": (who expects a sink, who expects none)


def _paper_cell(folder, stem):
    """The cells.pretrain.Cell of group `folder` named `stem` ("" for the group's cell that is its base file)."""
    group = next(g for g in GROUPS if g.folder == folder)
    return next(c for c in group.cells if c.stem == stem)


def _from_bbm(name, stem=None, label=None, principal=False, extra=None):
    """A cell of the BBM study: its settings (plus extra), its expectation and its citation."""
    c = _paper_cell("bbm", name if stem is None else stem)
    kind = BBM_KINDS[c.expect_kind.split("+")[0].split(":")[0]]
    return Cell(name, label or c.label, {**c.settings, **(extra or {})}, kind, c.expect, principal)


def _from_table(folder, stem, name, expect, source, principal=False, label=None):
    """A cell of a paper table (or of the beyond-paper group of cells/pretrain.py) run on the BBM base instead."""
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
    Cell("softmax_plus_one", _paper_cell("beyond_paper", "softmax_plus_one").label,
         dict(_paper_cell("beyond_paper", "softmax_plus_one").settings), "disputed",
         "Xiao et al. 2024 (StreamingLLM, Sec. 3.3, Table 3): with softmax-off-by-one ('zero sink') the first tokens "
         "are still used as sinks; Miller 2023 ('Attention Is Off By One'): a row may sum to < 1, so no sink is "
         "needed", False, disputed_by=("StreamingLLM", "Miller")),
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

# -- the paper's own setting (issue 54) ---------------------------------------------------------------------------

# Every sink design run in the paper's setting: its name and the cell of CELLS it takes its settings, label and
# expectation from (K biases, which CELLS lacks, from the paper's Table 4). softmax's expectation there is the
# paper's own: a sink on the first position in packed rows without BOS.
_K_BIAS = _paper_cell("table04_attn_bias", "k_bias")
DESIGNS = {
    "softmax": Cell("softmax", "softmax", {}, "sink", "Sec. 4 and Table 4's first row: Sink_1 18.18 % in the "
                    "default setup (packed chunks, no BOS; Sec. 5: the sink follows the first position)", False),
    "kv_bias": CELL_BY_NAME["kv_bias"],
    "k_bias": Cell("k_bias", "K biases k*, v* = 0", dict(_K_BIAS.settings), "moved_to_bias",
                   f"Table 4: {_K_BIAS.note.split(';')[0].replace(' =', '')} %, Sink_1 {_K_BIAS.sink1} %", False),
    "sink_token": CELL_BY_NAME["sink_token"],
    "sink_logit": CELL_BY_NAME["sink_logit"],
    "softmax_plus_one": CELL_BY_NAME["softmax_plus_one"],
    "sigmoid": CELL_BY_NAME["sigmoid"],
    "sigmoid_sum": CELL_BY_NAME["sigmoid_sum"],
    "softpick": CELL_BY_NAME["softpick"],
    "gated_headwise": CELL_BY_NAME["gated_headwise"],
    "gated_elementwise": CELL_BY_NAME["gated_elementwise"],
}
LEARNED_SINK_DESIGNS = ("kv_bias", "k_bias", "sink_token", "sink_logit")  # a learned place a sink can sit
BOS_FIRST_DESIGNS = LEARNED_SINK_DESIGNS  # also run with BOS first (3 layers): depth and BOS told apart
PAPER_DEPTH = 3       # n-layers of bbm_paper.ini; each design also at 1 layer
PAPER_T = 64          # the paper's probe length (Sec. 3.2), bbm_paper.ini's context: log T = 4.159
# The lr question (issue 54, item 4): (name suffix, label, settings) over the design at 3 layers, rows anywhere.
SINK_AXES = {
    "sink_logit": [("init_logt", f"S_h from log T = {math.log(PAPER_T):.3f}", {"sink-logit-init": repr(math.log(PAPER_T))}),
                   ("lr10", "10x lr on S_h", {"sink-lr-scale": "10"}),
                   ("init_logt_lr10", f"S_h from log T = {math.log(PAPER_T):.3f}, 10x lr on it",
                    {"sink-logit-init": repr(math.log(PAPER_T)), "sink-lr-scale": "10"})],
    "kv_bias": [("lr10", "10x lr on k*, v*", {"sink-lr-scale": "10"})],
    "k_bias": [("lr10", "10x lr on k*", {"sink-lr-scale": "10"})],
}
# The small scale's (BOS first) cells whose disagreement with the literature the paper's setting re-tests, and
# the design that puts each there (kv_bias_no_bos and no_bos were already without BOS, at 1 layer).
EARLIER_DISAGREEMENTS = {"sigmoid": "sigmoid", "sigmoid_sum": "sigmoid_sum", "softmax_plus_one": "softmax_plus_one",
                         "sink_logit": "sink_logit", "softpick": "softpick", "sink_token": "sink_token",
                         "kv_bias": "kv_bias", "kv_bias_no_bos": "kv_bias", "no_bos": "softmax"}
# The record of the BOS-first scales' verdicts, run to convergence (Guo's measure): the every-cell table of the
# report of both scales' 216 runs (small, 8 seeds; cheap, 3), whose results files are not in git.
ATLAS_RECORD = HERE.parents[1] / "docs" / "atlas" / "cheap-2026-11-29" / "tables" / "atlas_cells.csv"


def paper_cell_name(design, layers=PAPER_DEPTH, bos_first=False, axis=""):
    return f"{design}_{layers}l" + ("_bos" if bos_first else "") + (f"_{axis}" if axis else "")


def _paper(design, layers=PAPER_DEPTH, bos_first=False, axis=None):
    """The paper cell of `design` at `layers` layers, rows anywhere or BOS first, with one of SINK_AXES."""
    d = DESIGNS[design]
    suffix, what, extra = axis or ("", "", {})
    settings = {**d.settings, **({} if layers == PAPER_DEPTH else {"n-layers": str(layers)}),
                **({"document-rows": "true"} if bos_first else {}), **extra}
    label = (f"{d.label}, {layers} layer{'s' if layers > 1 else ''}, " +
             ("BOS first" if bos_first else "rows start anywhere") + (f", {what}" if what else ""))
    return Cell(paper_cell_name(design, layers, bos_first, suffix), label, settings, d.expect, d.source, False,
                design=design, axis=what, disputed_by=d.disputed_by)


# At 1 layer: the designs of the earlier disagreements, for comparison with their BOS-first 1-layer cells (the
# gated designs and K biases only at 3 layers: the whole scale had to fit about 8 hours of one core).
ONE_LAYER_DESIGNS = tuple(dict.fromkeys(EARLIER_DISAGREEMENTS.values()))
PAPER_CELLS = ([_paper(d) for d in DESIGNS] + [_paper(d, layers=1) for d in ONE_LAYER_DESIGNS] +
               [_paper(d, bos_first=True) for d in BOS_FIRST_DESIGNS] +
               [_paper(d, axis=a) for d, axes in SINK_AXES.items() for a in axes])
# scale -> the table its runs take their cells from (CELLS where not named)
SCALE_CELLS = {"paper": PAPER_CELLS, "paper_ci": PAPER_CELLS}
ALL_CELLS = CELLS + PAPER_CELLS
CELL_BY_NAME.update({c.name: c for c in PAPER_CELLS})


def cells_of(scale):
    """The table of cells a scale runs."""
    return SCALE_CELLS.get(scale, CELLS)
