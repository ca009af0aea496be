"""The paper's pre-training tables as data: one Cell per table cell (and per variant beyond the paper, and per
cell of sinklab's own Bigram-Backcopy study), in Groups by table, with the numbers the paper reports.

    from cells.pretrain import GROUPS, Cell, Group, job_file

jobs/pretrain/make_jobs.py writes one job file per cell from this table (and jobs/pretrain/INDEX.md);
analysis/job_index.py matches each cell to its run by its job file (job_file, under JOBS_DIR); cells/atlas.py
takes the settings and citations of the cells it shares with the BBM study and the paper's tables from here.

Every cell starts from the paper's default setup (60m_default.ini, Sec. 4; 1b_default.ini for the
1B scale-up) and changes only what its table varies. Cells that are the default setup itself (gamma = 0.1 in
Table 2, Rotary in Table 3, ...) point at the base file instead of duplicating it (Cell.file): one run serves
every table it appears in.

Paper numbers are Sink_1^eps with eps = 0.3 in % and the Pile-CC valid loss, as the paper prints them
(* = computed from proxy attention scores, "fail" = training failed in the paper). Where our text copy
of the paper lost a table's layout (Tables 2, 5, 13) the cell says so rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

JOBS_DIR = Path(__file__).resolve().parents[1] / "jobs" / "pretrain"  # where the job files are written
BASES = {"60m": "60m_default.ini", "1b": "1b_default.ini", "bbm": "bbm_cpu.ini"}
DEFAULT = "60m_default.ini"
ILLEGIBLE = "illegible"  # the value exists in the paper but not legibly in our text copy


@dataclass
class Cell:
    stem: str                 # file name without .ini (or "" for a cell served by an existing file)
    label: str                # the cell as the paper names it
    settings: dict = field(default_factory=dict)  # flag -> value, on top of the base
    sink1: str = "—"          # paper Sink_1^0.3 (%)
    loss: str = "—"           # paper valid loss
    note: str = ""            # other reported numbers, caveats
    file: str = ""            # an existing job file that IS this cell (relative to jobs/pretrain)
    base: str = "60m"
    expect: str = ""          # what the paper's findings predict for a cell it did not run (the BBM study)
    # The same as a rule the report checks (analysis/stats/bbm.py states each): conditions joined by "+",
    # each one of sink | no_sink | moved_to_bias | first_position | absolute_not_window_start |
    # more_than:<ref> | less_than:<ref> | later_than:<ref>, <ref> another cell of the group named by its
    # run-name without "<folder>." (bbm.softmax -> softmax).
    expect_kind: str = ""


@dataclass
class Group:
    folder: str
    title: str
    cells: list
    note: str = ""
    paper: bool = True  # a table of the paper (the report's paper tables); False: sinklab's own study


def _default(label, sink1="18.18", loss="3.73", note="the default setup"):
    return Cell("", label, sink1=sink1, loss=loss, note=note, file=DEFAULT)


_OVERFITS = "App. C.2: Sink_1 < 1% all along; overfits after 1-2k steps"


def _p_norm_cells():
    cells = []
    for name, sim in (("softmax", "exp"), ("sigmoid", "sigmoid")):
        for stem, label, p in (("0.25", "1/4", "0.25"), ("0.33", "1/3", "0.3333333333333333"), ("0.5", "1/2", "0.5"),
                               ("2", "2", "2"), ("3", "3", "3"), ("4", "4", "4")):
            if sim == "exp":
                note = "diverged (loss to infinity)" if float(p) > 1 else "converged"
            else:
                note = "trained without problems" if float(p) > 1 else ""
            cells.append(Cell(f"{name}_p{stem}", f"{name}, p = {label}",
                              {"attn-sim": sim, "attn-norm": "p-norm", "attn-p": p}, note=note))
    return cells


GROUPS = [
    Group("table02_weight_decay", "Table 2: weight decay gamma (Sec. 6)", [
        Cell("wd_0", "gamma = 0", {"weight-decay": "0.0"}, ILLEGIBLE, ILLEGIBLE),
        Cell("wd_0.001", "gamma = 0.001", {"weight-decay": "0.001"}, ILLEGIBLE, ILLEGIBLE),
        Cell("wd_0.01", "gamma = 0.01", {"weight-decay": "0.01"}, ILLEGIBLE, ILLEGIBLE),
        _default("gamma = 0.1", note="the default setup: its numbers as the other tables print them"),
        Cell("wd_0.5", "gamma = 0.5", {"weight-decay": "0.5"}, ILLEGIBLE, ILLEGIBLE),
        Cell("wd_1", "gamma = 1.0", {"weight-decay": "1.0"}, ILLEGIBLE, ILLEGIBLE),
        Cell("wd_2", "gamma = 2.0", {"weight-decay": "2.0"}, ILLEGIBLE, ILLEGIBLE),
        Cell("wd_5", "gamma = 5.0", {"weight-decay": "5.0"}, ILLEGIBLE, ILLEGIBLE),
        Cell("wd_10", "gamma = 10 (released configs only, not in Table 2)", {"weight-decay": "10.0"}),
    ], note="Our text copy keeps the table's header but not its numbers. The text: gamma = 0 still has a "
            "sink, larger gamma gives more sink heads, much larger gamma hurts the loss and the sink disappears."),
    Group("table03_pos_emb", "Table 3: positional embedding (Sec. 7.1)", [
        Cell("nope", "NoPE", {"pos-emb": "none"}, "20.35", "3.81"),
        Cell("absolute", "Absolute PE (sinusoidal)", {"pos-emb": "sinusoidal"}, "32.73", "3.74"),
        Cell("learnable", "Learnable PE", {"pos-emb": "learned"}, "33.13", "3.79"),
        Cell("relative", "Relative PE", {"pos-emb": "relative", "relative-bias": "bucket-index",
                                         "relative-buckets": "32", "relative-max-distance": "128"},
             "35.53", "5.45", "the released code's bias: the T5 bucket index itself (Eq. 6), 32 buckets, distance 128"),
        Cell("alibi", "ALiBi", {"pos-emb": "alibi"}, "20.78", "3.71"),
        _default("Rotary"),
        Cell("relative_t5", "Relative PE, T5's learned per-head bias (beyond the paper)",
             {"pos-emb": "relative", "relative-bias": "learned", "relative-buckets": "32",
              "relative-max-distance": "128"}),
    ]),
    Group("table04_attn_bias", "Table 4: attention biases (Sec. 7.3)", [
        _default("Softmax(QK^T/sqrt(dh) + M) V", note="the default setup; Sink_* —"),
        Cell("sink_token", "learnable sink token x*", {"attn-bias": "sink-token"}, "0.00", "3.72", "Sink_* = 74.12"),
        Cell("kv_bias", "KV biases k*, v* (per head)", {"attn-bias": "kv", "bias-per-head": "true"}, "0.04",
             "3.72", "Sink_* = 72.76"),
        Cell("k_bias", "K biases k*, v* = 0 (per head)", {"attn-bias": "k", "bias-per-head": "true",
                                                        "fixed-value": "zero"}, "0.00", "3.72",
             "Sink_* = 73.34; also Table 5 v* = 0, Table 12 right K not shared"),
        Cell("v_bias", "V biases: + v* (per head)", {"attn-bias": "v", "bias-per-head": "true"}, "17.53", "3.73"),
    ], note="Sink_* is the sink on the bias position (x* or k*): the probe's lead-position metric, not Sink_1."),
    Group("table05_fixed_value", "Table 5: K biases with a fixed v* of norm m (Sec. 7.3)", [
        Cell("", "v* = 0", file="table04_attn_bias/k_bias.ini", sink1=ILLEGIBLE, loss=ILLEGIBLE),
        Cell("e1_m1", "v* = v' = [1,0,...,0]", {"attn-bias": "k", "fixed-value": "e1", "fixed-value-scale": "1"},
             ILLEGIBLE, ILLEGIBLE),
        Cell("e1_m5", "v* = 5 v'", {"attn-bias": "k", "fixed-value": "e1", "fixed-value-scale": "5"},
             ILLEGIBLE, ILLEGIBLE),
        Cell("e1_m20", "v* = 20 v'", {"attn-bias": "k", "fixed-value": "e1", "fixed-value-scale": "20"},
             ILLEGIBLE, ILLEGIBLE),
        Cell("ones_m1", "v* = v'' = [1,...,1]/sqrt(dh)", {"attn-bias": "k", "fixed-value": "ones",
                                                          "fixed-value-scale": "1"}, ILLEGIBLE, ILLEGIBLE),
        Cell("ones_m5", "v* = 5 v''", {"attn-bias": "k", "fixed-value": "ones", "fixed-value-scale": "5"},
             ILLEGIBLE, ILLEGIBLE),
        Cell("ones_m20", "v* = 20 v''", {"attn-bias": "k", "fixed-value": "ones", "fixed-value-scale": "20"},
             ILLEGIBLE, ILLEGIBLE),
    ], note="Our text copy flattens the table's three rows into one line (\"0.00 0.06 3.71 25.88 69.74 2.15 "
            "3.72 ... 0.00 11.21 3.73\") that cannot be assigned to cells safely. The text: a larger norm of v* "
            "moves the sink from k* back to the first token."),
    Group("table09_lr_steps", "Table 9: learning rate x training steps (Sec. 4, App. C.1)", [
        Cell("lr8e-4_steps10k", "lr 8e-4, 10k steps", {"lr": "8e-4", "steps": "10000"}, "23.44", "3.79"),
        Cell("lr8e-4_steps20k", "lr 8e-4, 20k steps", {"lr": "8e-4"}, "32.23", "3.70"),
        _default("lr 4e-4, 20k steps"),
        Cell("lr2e-4_steps20k", "lr 2e-4, 20k steps", {"lr": "2e-4"}, "11.21", "3.78"),
        Cell("lr2e-4_steps40k", "lr 2e-4, 40k steps", {"lr": "2e-4", "steps": "40000"}, "16.81", "3.68"),
        Cell("lr1e-4_steps20k", "lr 1e-4, 20k steps", {"lr": "1e-4"}, "2.90", "3.92"),
        Cell("lr1e-4_steps80k", "lr 1e-4, 80k steps", {"lr": "1e-4", "steps": "80000"}, "6.29", "3.67"),
    ], note="Constant lr after the 100 warmup steps, as the released code (its configs set min_lr = lr)."),
    Group("table10_batch", "Table 10 left: batch size (Sec. 4, App. C.1)", [
        Cell("batch_0.25M", "0.25M tokens (128 x 2048)", {"global-batch-tokens": "262144"}, "16.45", "3.92"),
        Cell("batch_0.5M", "0.5M tokens (256 x 2048)", {"global-batch-tokens": "524288"}, "17.19", "3.78"),
        _default("1M tokens (512 x 2048)"),
        Cell("batch_2M", "2M tokens (1024 x 2048)", {"global-batch-tokens": "2097152"}, "16.19", "3.68"),
    ], note="Same 20k steps for every batch size (the released configs), so the token count scales with the batch."),
    Group("table10_fixed_token", "Table 10 right: a fixed token at position 1/2/3 (Sec. 5, App. C.2)", [
        Cell("fixed_pos1", "x_fix at position 1", {"fixed-token-position": "1", "fixed-token-id": "1"}, "74.11",
             "—", "Sink_2 0.00, Sink_3 0.00, Sink_4 0.01"),
        Cell("fixed_pos2", "x_fix at position 2", {"fixed-token-position": "2", "fixed-token-id": "1"}, "0.00",
             "—", "Sink_2 69.03, Sink_3 0.00, Sink_4 0.01"),
        Cell("fixed_pos3", "x_fix at position 3", {"fixed-token-position": "3", "fixed-token-id": "1"}, "0.00",
             "—", "Sink_2 0.00, Sink_3 69.64, Sink_4 0.00"),
    ], note="x_fix = token 1, the padding token of the GPT-NeoX tokenizer, as the released code. Training rows "
            "carry it; the trainer's evaluation probes the validation text as it is (eval/sink_k) and with x_fix "
            "at the same position (eval/sink_k_intervened: the paper's Sink_k here, k = 1..4). sinklab-probe "
            "measures a checkpoint the same way with the run's --fixed-token-position/--fixed-token-id."),
    Group("sec5_data_budget", "Sec. 5 (Figs. 5 right, 28): training-token budget, fixed steps and batch", [
        Cell("budget_50M", "50M tokens", {"max-train-tokens": "50000000"}, note=_OVERFITS),
        Cell("budget_100M", "100M tokens", {"max-train-tokens": "100000000"}, note=_OVERFITS),
        Cell("budget_200M", "200M tokens", {"max-train-tokens": "200000000"}),
        Cell("budget_500M", "500M tokens", {"max-train-tokens": "500000000"}),
        Cell("budget_2.5B", "2.5B tokens", {"max-train-tokens": "2500000000"}),
        Cell("budget_5B", "5B tokens", {"max-train-tokens": "5000000000"},
             note="the paper's default amount; = 60m_default.ini when train.bin holds exactly 5B tokens"),
    ], note="20k steps of 1M tokens whatever the budget: the data repeats (each epoch reshuffled). The paper "
            "gives these as figures, not numbers: less data, less sink."),
    Group("sec5_random_tokens", "Sec. 5: tokens resampled uniformly from the vocabulary", [
        Cell("resample_first", "x_1 ~ Uniform(V)", {"resample-positions": "1"}, "27.03"),
        Cell("resample_first_two", "x_1, x_2 ~ Uniform(V)", {"resample-positions": "1,2"}, "1.98", "—",
             "Sink_2 = 14.08"),
        Cell("resample_second", "x_2 ~ Uniform(V)", {"resample-positions": "2"}, "20.99"),
    ], note="Draws are uniform over [0, vocab-size) = [0, 50432), as the released random_data.py, fresh for "
            "every training sample; validation and probe data keep their tokens."),
    Group("sec6_prefix", "Sec. 6 (Fig. 5 middle): prefix language modelling, prefix length p", [
        Cell(f"prefix_{p}", f"p = {p}", {"prefix-length": str(p)}) for p in (2, 3, 4, 5, 10)
    ] + [_default("p = 1 (causal LM)")], note="Loss on the tokens after the prefix only (the released "
                                               "--ignore_loss p-1). The paper reports these as figures."),
    Group("sec6_window", "Sec. 6 (Fig. 6 right): shifted-window attention, window w", [
        Cell(f"window_{w}", f"w = {w}", {"attn-window": str(w)}) for w in (32, 64, 128, 256, 512, 1024)
    ] + [_default("w = 2048 (full causal)")], note="The paper reports these as figures: small windows, no sink."),
    Group("sec7_post_norm", "Sec. 7.2: post-norm", [
        Cell("post_norm", "post-norm (LN(x + f(x)))", {"norm-placement": "post"}, "13.54"),
        _default("pre-norm"),
    ]),
    Group("sec7_scale_1b", "Sec. 7.4: 1B parameters, softmax vs sigmoid without normalisation", note="1B "
          "models, 40k steps (1b_default.ini).", cells=[
        Cell("", "1B softmax", file="1b_default.ini", sink1="45.11", loss="3.07"),
        Cell("sigmoid_one", "1B sigmoid attention, Z = 1", {"attn-sim": "sigmoid", "attn-norm": "one"},
             "2.46*", "3.10", base="1b"),
    ]),
    Group("table11_ffn", "Table 11: FFN activation (App. C.3)", [
        Cell("relu", "ReLU", {"ffn": "relu"}, "16.90", "3.82"),
        Cell("gelu", "GeLU", {"ffn": "gelu"}, "14.76", "3.79"),
        Cell("swish", "Swish", {"ffn": "swish"}, "17.89", "3.80"),
        Cell("reglu", "ReGLU", {"ffn": "reglu"}, "13.88", "3.75"),
        Cell("geglu", "GeGLU", {"ffn": "geglu"}, "17.86", "3.73"),
        _default("SwiGLU"),
    ], note="Hidden width 1536 for every FFN, as the released configs."),
    Group("table12_heads", "Table 12 left: multi-head design (App. C.4)", [
        _default("H = 8"),
        Cell("heads_4", "H = 4", {"n-heads": "4"}, "10.68", "3.74"),
        Cell("heads_2", "H = 2", {"n-heads": "2"}, "12.95", "3.76"),
        Cell("heads_1", "H = 1", {"n-heads": "1"}, "19.50", "3.78"),
        Cell("add", "heads added: (sum_h o_h) W_O", {"head-combine": "add"}, "21.76", "3.74"),
    ]),
    Group("table12_bias_sharing", "Table 12 right: biases shared by the heads of a layer (App. C.4)", [
        Cell("", "KV biases, per head", file="table04_attn_bias/kv_bias.ini", sink1="0.04", loss="3.72",
             note="Sink_* = 72.76"),
        Cell("kv_shared", "KV biases, shared", {"attn-bias": "kv", "bias-per-head": "false"}, "12.44", "3.72",
             "Sink_* = 56.61"),
        Cell("", "K biases, per head", file="table04_attn_bias/k_bias.ini", sink1="0.00", loss="3.72",
             note="Sink_* = 73.34"),
        Cell("k_shared", "K biases, shared", {"attn-bias": "k", "bias-per-head": "false"}, "0.23", "3.72",
             "Sink_* = 68.31"),
        Cell("v_shared", "V biases, shared (released configs only, not in Table 12)",
             {"attn-bias": "v", "bias-per-head": "false"}),
    ], note="Our text copy garbles the header row; the columns follow from Table 4 (KV and K per head) and "
            "the released configs (kv_bias/k_bias = shared, *_head_bias = per head)."),
    Group("table13_k_bias_dims", "Table 13: learnable leading dimensions d_a of k* (K biases, App. C.4)", [
        Cell(f"da_{d}", f"d_a = {d}", {"attn-bias": "k", "k-bias-dims": str(d)}, ILLEGIBLE, ILLEGIBLE)
        for d in (1, 2, 4, 8, 16, 32, 64)
    ], note="Our text copy loses the table's columns (\"4.74 4.96 4.39 ... 51.23 1.94 3.73 69.19 0.04 3.72\"). "
            "The text: even d_a = 1 gets large attention on k*; more dims, a more obvious sink. dh = 96."),
    Group("table14_alpha", "Table 14 left: softmax rows summing to alpha (App. C.4)", [
        Cell("alpha_2", "alpha = 2.0", {"attn-alpha": "2.0"}, "29.10", "3.72"),
        _default("alpha = 1.0"),
        Cell("alpha_0.2", "alpha = 0.2", {"attn-alpha": "0.2"}, "9.41", "3.72"),
        Cell("alpha_0.1", "alpha = 0.1", {"attn-alpha": "0.1"}, "3.59", "3.76"),
        Cell("alpha_0.05", "alpha = 0.05", {"attn-alpha": "0.05"}, "4.53", "3.78"),
    ]),
    Group("table14_sigmoid_lr_wd", "Table 14 right: sigmoid attention without normalisation, lr x weight decay", [
        Cell("lr4e-4_wd0", "lr 4e-4, gamma 0.0", {"attn-sim": "sigmoid", "attn-norm": "one", "weight-decay": "0.0"},
             "0.64", "3.77"),
        Cell("", "lr 4e-4, gamma 0.1", file="table15_attn_ops/sigmoid_one.ini", sink1="0.44", loss="3.70"),
        Cell("lr4e-4_wd0.5", "lr 4e-4, gamma 0.5", {"attn-sim": "sigmoid", "attn-norm": "one",
                                                    "weight-decay": "0.5"}, "0.18", "3.76"),
        Cell("lr4e-4_wd1", "lr 4e-4, gamma 1.0", {"attn-sim": "sigmoid", "attn-norm": "one", "weight-decay": "1.0"},
             "0.30", "4.06"),
        Cell("lr1e-3_wd0.1", "lr 1e-3, gamma 0.1", {"attn-sim": "sigmoid", "attn-norm": "one", "lr": "1e-3"},
             "0.81", "3.68"),
        Cell("lr1e-4_wd0.1", "lr 1e-4, gamma 0.1", {"attn-sim": "sigmoid", "attn-norm": "one", "lr": "1e-4"},
             "0.36", "4.08"),
    ], note="Sink_1 of these models is computed from proxy scores (their weights are not a distribution)."),
    Group("table15_attn_ops", "Tables 6 and 15: attention operation sim(phi(q), phi(k)) and normaliser Z (Sec. 7.4)", [
        _default("exp(q k / sqrt(dh)), Z = sum (Tables 6, 15)"),
        Cell("sigmoid_one", "sigmoid, Z = 1 (Tables 6, 15)", {"attn-sim": "sigmoid", "attn-norm": "one"},
             "0.44*", "3.70"),
        Cell("sigmoid_sum", "sigmoid, Z = sum (Tables 6, 15)", {"attn-sim": "sigmoid", "attn-norm": "sum"},
             "30.24", "3.74"),
        Cell("elu_one", "elu(q k / sqrt(dh)) + 1, Z = 1 (Tables 6, 15)",
             {"attn-sim": "elu-plus-one", "attn-norm": "one"}, "0.80*", "3.69"),
        Cell("elu_sum", "elu(q k / sqrt(dh)) + 1, Z = sum (Table 15)",
             {"attn-sim": "elu-plus-one", "attn-norm": "sum"}, "fail", "fail"),
        Cell("kernel_elu_sum", "(elu(q)+1)(elu(k)+1) / sqrt(dh), Z = sum (Tables 6, 15)",
             {"attn-sim": "identity", "qk-kernel": "elu-plus-one", "attn-norm": "sum"}, "53.65*", "4.19"),
        Cell("kernel_elu_one", "(elu(q)+1)(elu(k)+1) / sqrt(dh), Z = 1 (Table 15)",
             {"attn-sim": "identity", "qk-kernel": "elu-plus-one", "attn-norm": "one"}, "fail", "fail"),
        Cell("linear_max_abs", "q k / sqrt(dh), Z = max(|sum|, 1) (Table 15)",
             {"attn-sim": "identity", "attn-norm": "max-abs-sum-one"}, "fail", "fail"),
        Cell("linear_one", "q k / sqrt(dh), Z = 1 (Tables 6, 15)", {"attn-sim": "identity", "attn-norm": "one"},
             "0.00*", "3.99"),
        Cell("kernel_mlp_max_abs", "mlp(q) mlp(k) / sqrt(dh), Z = max(|sum|, 1) (Tables 6, 15)",
             {"attn-sim": "identity", "qk-kernel": "mlp", "attn-norm": "max-abs-sum-one"}, "0.19*", "3.85"),
        Cell("kernel_mlp_one", "mlp(q) mlp(k) / sqrt(dh), Z = 1 (Tables 6, 15)",
             {"attn-sim": "identity", "qk-kernel": "mlp", "attn-norm": "one"}, "0.74*", "3.91"),
    ], note="Table 6 is the subset of Table 15 marked so. \"fail\": the paper's training failed."),
    Group("appC_p_norm", "App. C.4 (Fig. 29): p-normalised softmax and sigmoid, Z = (sum w^p)^(1/p)",
          _p_norm_cells(), note="Reported as massive-activation figures, not Sink_1 numbers."),
    Group("beyond_paper", "Beyond the paper: sink-free attention designs", [
        Cell("sink_logit", "learned per-head sink logit (gpt-oss)", {"sink-logit": "true"}),
        Cell("softmax_plus_one", "softmax plus one: Z = 1 + sum e^s", {"softmax-plus-one": "true"}),
        Cell("sigmoid_log_n", "sigmoid attention, Z = 1, b = -log(n) (FlashSigmoid)",
             {"attn-sim": "sigmoid", "attn-norm": "one", "sigmoid-bias-log-n": "true"}),
        Cell("softpick", "softpick: relu(e^s - 1) / sum |e^s - 1|", {"attn-sim": "softpick"},
             note="needs the softpick attention (branch of the attention kernels)"),
        Cell("gated_headwise", "gated attention, one sigmoid gate per head", {"attn-gate": "headwise"}),
        Cell("gated_elementwise", "gated attention, one sigmoid gate per output element",
             {"attn-gate": "elementwise"}),
    ]),
    Group("bbm", "Bigram-Backcopy (Guo et al. 2024): the paper's axes on a task where a sink emerges on a CPU", [
        Cell("", "softmax (the CPU setting)", file="bbm_cpu.ini", base="bbm",
             expect="a sink on BOS: non-trigger queries attend to it (Guo: 0.56 at step 300)", expect_kind="sink"),
        Cell("sigmoid", "sigmoid attention without normalisation", {"attn-sim": "sigmoid", "attn-norm": "one"},
             base="bbm", expect="no sink (Sec. 7.4, Table 6: 0.44 % in proxy scores)", expect_kind="no_sink"),
        Cell("sink_token", "a learnable sink token", {"attn-bias": "sink-token"}, base="bbm",
             expect="moved to the sink token (Table 4: Sink_* 74 %, Sink_1 0 %)", expect_kind="moved_to_bias"),
        Cell("kv_bias", "learnable key and value biases", {"attn-bias": "kv"}, base="bbm",
             expect="moved to k*/v* (Table 4: Sink_* 73 %, Sink_1 0 %)", expect_kind="moved_to_bias"),
        Cell("no_bos", "rows that start anywhere (no BOS first)", {"document-rows": "false"}, base="bbm",
             expect="the first position still (Sec. 5: position, not meaning), BOS inside the rows not",
             expect_kind="first_position"),
        Cell("wd_0", "weight decay 0", {"weight-decay": "0.0"}, base="bbm",
             expect="a sink, smaller than with more decay (Table 2)", expect_kind="sink+less_than:wd_0.1"),
        Cell("wd_0.1", "weight decay 0.1", {"weight-decay": "0.1"}, base="bbm",
             expect="a sink, larger than with less decay (Table 2)", expect_kind="sink+more_than:wd_0"),
        Cell("lr_quarter", "a 4x smaller learning rate", {"lr": "5e-4"}, base="bbm",
             expect="a sink later (Table 9: smaller lr, later and smaller sink)", expect_kind="later_than:softmax"),
        Cell("window", "sliding window of 64 keys (< T = 256)", {"attn-window": "64"}, base="bbm",
             expect="on the absolute first token, not on each window's first key (Sec. 6, Fig. 6 middle: the "
                    "window start has no sink; small windows prevent one)", expect_kind="absolute_not_window_start"),
        Cell("guo_1layer", "Guo's setting: LayerNorm, nn.Linear's init, batch 512 x 256, lr 3e-4, seed 42",
             {"norm-type": "layer", "matrix-init": "torch-linear", "global-batch-tokens": "131072", "lr": "3e-4",
              "steps": "400", "seed": "42"},
             base="bbm",
             expect="a sink on BOS (Guo: 0.22 at step 200, 0.56 at 300, 0.78 at 1k)", expect_kind="sink"),
        Cell("guo_3layer", "Guo's setting, 3 layers",
             {"n-layers": "3", "norm-type": "layer", "matrix-init": "torch-linear", "global-batch-tokens": "131072",
              "lr": "3e-4", "steps": "400", "seed": "42"},
             base="bbm",
             expect="a sink on BOS in some layer", expect_kind="sink"),
    ], note="sinklab's own study (issue #25): the paper's variants, run on data_prep bbm's task at a CPU-sized "
            "setting. The report's first section compares each run with the expectation.", paper=False),
]


def job_file(group, cell):
    """The job file of a cell, relative to jobs/pretrain: its own, or the existing file it points at."""
    return cell.file if cell.file else f"{group.folder}/{cell.stem}.ini"
