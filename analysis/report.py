"""The offline report of sinklab results: the paper's tables as Markdown and CSV, its figures as PNG,
and one HTML page (index.html) that shows them all.

    python -m analysis.report results/*.h5 -o report/ [--eps 0.3]

Sections (each is skipped, with a note saying why, when the files do not hold what it needs):
  1. training runs (/runs/<run>): loss, valid loss and Sink_1^eps over steps; a side-by-side table and
     figure when there are several runs; massive-activation ratio per layer at the last evaluation
     (Fig. 7, with the pre-norm ratio of post-norm models); alpha_1 over layers and heads; Sink_*.
  2. probed/surveyed models (/models/<model>/<input>/<domain>): Table 1 (left) layout (natural = mean
     over domains, random, repeat), the per-domain table, and per model and input the l2 norms of the
     first token vs the rest (Figs. 2, 11-14), alpha_1 heatmaps (Figs. 19-24), massive-activation ratio,
     last-token-to-first attention, QK cosine / norm-product maps and attention maps (Figs. 2, 15-18, 25-26).
  3. the paper's tables (analysis/paper_tables.py): every table of jobs/pretrain/make_jobs.py as the paper
     prints it, the measured value beside the paper's and each cell's status (done / in progress /
     incomplete / failed / not run), when any run of the files is one of its cells.
  3b. the paper's comparison figures (analysis/paper_figures.py): Fig. 4 left (Sink vs parameter count),
     Fig. 5 middle (Sink per position, prefix LM), Figs. 5 right and 28 (vs training-data budget), Fig. 6
     (vs window size, absolute and relative to the window start), Fig. 9 (per domain at each eps), each
     with its numbers as a table; a figure without data is listed under Skipped, not drawn.
  4. survey bookkeeping (/items/<id>).
  5. fine-tuning (sinklab-sft runs, attribute init_from): Fig. 30 (training loss and gradient norm over
     the fine-tuning steps, the stability monitor's events marked) and the sink of the base model (eval
     step 0) beside the fine-tuned one (last eval) on the same probe set, Table 1 (right) layout.
What was read (files, runs, models), the glossary, notes and skipped sections close the page.
Output: DIR/index.html, DIR/tables/*.md + *.csv, DIR/figures/*.png. A bad input file ends the program
with one line naming it and exit status 1.
"""
import argparse
import html
import math
import re
import sys
from pathlib import Path

import numpy as np

from analysis import figures
from analysis.job_index import JOBS_DIR
from analysis.paper_figures import paper_figures_section
from analysis.paper_tables import paper_tables_section
from analysis.results import (DEFAULT_EPS, EVENT_KINDS, NOTE_ATTRS, ResultsError, attr_text, eps_index, match_eps,
                              mean_alpha1, open_results, probe_length, uniform_alpha1)
from analysis.tables import INLINE_ROWS, PROXY_NOTE, Table, plain_float

INPUT_ORDER = ("natural", "random", "repeat")
PROG = "analysis.report"


# ---------------------------------------------------------------------------------------------- report

class Report:
    """Collects the page's blocks (HTML snippets) and writes tables and figures as they come."""

    def __init__(self, out_dir):
        self.out = Path(out_dir)
        (self.out / "tables").mkdir(parents=True, exist_ok=True)
        (self.out / "figures").mkdir(parents=True, exist_ok=True)
        self.blocks = []
        self.notes = []          # shown at the end of the page, with the provenance
        self.skips = []          # "Skipped: what: why." lines, listed at the end of the page
        self.tables = []
        self.figures = []
        self._names = {"tables": set(), "figures": set()}

    def _unique(self, name, kind):
        """A file name from `name` (letters, digits, . _ -), unique among the tables or figures."""
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "x"
        name, i = base, 2
        while name in self._names[kind]:
            name, i = f"{base}_{i}", i + 1
        self._names[kind].add(name)
        return name

    def heading(self, level, text, anchor=None):
        a = f' id="{html.escape(anchor)}"' if anchor else ""
        self.blocks.append(f"<h{level}{a}>{html.escape(text)}</h{level}>")

    def para(self, text, cls=None):
        c = f' class="{cls}"' if cls else ""
        self.blocks.append(f"<p{c}>{html.escape(text)}</p>")

    def skipped(self, what, why):
        """A section or figure that is not there: listed at the end of the page, not where it would be."""
        self.skips.append(f"Skipped: {what}: {why}.")

    def table(self, t):
        t.name = self._unique(t.name, "tables")
        (self.out / "tables" / f"{t.name}.md").write_text(t.markdown())
        (self.out / "tables" / f"{t.name}.csv").write_text(t.csv_text())
        self.tables.append(t)
        links = (f'<a href="tables/{t.name}.md">{t.name}.md</a> · '
                 f'<a href="tables/{t.name}.csv">{t.name}.csv</a>')
        parts = [f'<div class="table"><p class="caption">{html.escape(t.title)} ({links})</p>']
        if t.inline and len(t.rows) <= INLINE_ROWS:
            parts.append(t.html())
        else:
            parts.append(f"<p>{len(t.rows)} rows: see the CSV.</p>")
        if t.note:
            parts.append(f'<p class="note">{html.escape(t.note)}</p>')
        parts.append("</div>")
        self.blocks.append("\n".join(parts))

    def figure(self, name, caption, draw, *args, **kwargs):
        """draw(path, caption, *args) writes the PNG; the page shows it with the caption under it."""
        name = self._unique(name, "figures")
        path = self.out / "figures" / f"{name}.png"
        draw(path, caption, *args, **kwargs)
        self.figures.append(path)
        self.blocks.append(f'<figure><img src="figures/{name}.png" alt="{html.escape(caption)}">'
                           f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    def write_html(self, summary_html):
        page = [
            "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            "<title>sinklab report</title>",
            "<style>body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}"
            "table{border-collapse:collapse;margin:.3em 0 1em}td,th{border:1px solid #bbb;padding:2px 6px;"
            "font-size:13px;text-align:right}th{background:#eee}td:first-child,th:first-child{text-align:left}"
            "img{max-width:100%}figure{margin:1em 0}figcaption,.caption{font-size:13px;color:#333}"
            ".note{color:#8a4b00;font-size:13px}code{font-size:12px}</style></head><body>",
            "<h1>sinklab report</h1>", *self.blocks, summary_html, "</body></html>"]
        (self.out / "index.html").write_text("\n".join(page) + "\n")


# ------------------------------------------------------------------------------------ helpers (labels)

def _attr_value(attrs, key):
    return attr_text(attrs[key]) if key in attrs else None


def _set_text(values):
    vals = sorted({v for v in values if v is not None}, key=str)
    if not vals:
        return "?"
    return vals[0] if len(vals) == 1 else "{" + ", ".join(vals) + "}"


def _entry_caption(entries, domain_text):
    """model | input | domain | T | n_seq | bos | quantisation/source notes of the entries drawn."""
    e0 = entries[0]
    parts = [e0.model, f"input {e0.input}", f"domain {domain_text}",
             "T=" + _set_text(_attr_value(e.attrs, "T") for e in entries),
             "n_seq=" + _set_text(_attr_value(e.attrs, "n_seq") for e in entries)]
    if any("bos" in e.attrs for e in entries):  # the prefix token id; -1: none
        parts.append("bos=" + _set_text(("none" if _attr_value(e.attrs, "bos") == "-1" else
                                         _attr_value(e.attrs, "bos")) for e in entries))
    for key in NOTE_ATTRS:
        if any(key in e.attrs for e in entries):
            parts.append(f"{key}: " + _set_text(_attr_value(e.attrs, key) for e in entries))
    return " | ".join(parts)


def _eps_col(prefix, e):
    return f"{prefix}^{e:g}"


# ------------------------------------------------------------------------------------- 1. training runs

def _run_labels(runs):
    """Run names, with the file's name added where two files hold runs of the same name."""
    counts = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
    return [r.name if counts[r.name] == 1 else f"{r.name} [{Path(r.file).name}]" for r in runs]


def training_section(rep, runs, eps):
    rep.heading(2, "1. Training runs", anchor="runs")
    if not runs:
        rep.skipped("training runs", "no /runs/<run> group in the files")
        return
    labels = _run_labels(runs)
    all_eps = sorted({e for r in runs if r.eval for e in r.eval.eps if not math.isnan(e)})
    any_star = any(r.eval is not None and r.eval.sink_star is not None for r in runs)

    # Overview, the layout of the paper's Tables 2-15: one row per run, its last evaluation.
    cols = ["run", "file", "train steps", "last train loss", "evals", "last eval step", "valid loss"]
    cols += [_eps_col("Sink_1", e) for e in all_eps]
    if any_star:
        cols += [_eps_col("Sink_*", e) for e in all_eps]
    cols += ["massive ratio (last layer)", "proxy"]
    rows, stars = [], set()
    for label, r in zip(labels, runs):
        tr, ev = r.train, r.eval
        steps = len(tr["loss"]) if tr and "loss" in tr else None
        last_loss = plain_float(tr["loss"][-1]) if tr and "loss" in tr and len(tr["loss"]) else None
        row = [label, Path(r.file).name, steps, last_loss]
        if ev is not None and len(ev.step):
            row += [len(ev.step), int(ev.step[-1]), plain_float(ev.valid_loss[-1])]
            for e in all_eps:
                i = match_eps(ev.eps, e)
                row.append(None if i is None else plain_float(ev.sink[-1, i]))
                if ev.proxy and i is not None:
                    stars.add((len(rows), len(row) - 1))
            if any_star:
                for e in all_eps:
                    i = match_eps(ev.eps, e)
                    row.append(None if i is None or ev.sink_star is None else plain_float(ev.sink_star[-1, i]))
                    if ev.proxy and row[-1] is not None:
                        stars.add((len(rows), len(row) - 1))
            row.append(None if ev.massive_ratio is None else plain_float(ev.massive_ratio[-1, -1]))
        else:
            row += [0, None, None] + [None] * (len(all_eps) * (2 if any_star else 1)) + [None]
        row.append("yes" if ev is not None and ev.proxy else "")
        rows.append(row)
    fmts = {"last train loss": ".4f", "valid loss": ".4f", "massive ratio (last layer)": ".2f"}
    fmts.update({c: ".2f" for c in cols if c.startswith("Sink")})
    rep.table(Table("runs", "Training runs at their last evaluation (Sink in %)", cols, rows, fmts, stars,
                    note=PROXY_NOTE if stars else ""))

    with_eval = [(label, r) for label, r in zip(labels, runs) if r.eval is not None and len(r.eval.step)]
    if len(with_eval) >= 2:
        _compare_runs(rep, with_eval, eps)

    for label, r in zip(labels, runs):
        _one_run(rep, label, r, eps)


def _compare_runs(rep, with_eval, eps):
    rep.heading(3, "Side by side")
    series = []
    for label, r in with_eval:
        i = match_eps(r.eval.eps, eps)
        if i is None:
            rep.skipped(f"run {label} in the comparison", f"no Sink_1 at eps={eps:g} (has {r.eval.eps})")
            continue
        series.append((label, r.eval, i))
    if len(series) < 2:
        return
    steps = sorted({int(s) for _, ev, _ in series for s in ev.step})
    cols = ["step"] + [f"valid loss {lab}" for lab, _, _ in series] + \
        [f"{_eps_col('Sink_1', eps)} {lab}" for lab, _, _ in series]
    rows, stars = [], set()
    lookup = [{int(s): k for k, s in enumerate(ev.step)} for _, ev, _ in series]
    for s in steps:
        row = [s]
        row += [plain_float(ev.valid_loss[lk[s]]) if s in lk else None for (_, ev, _), lk in zip(series, lookup)]
        for (_, ev, i), lk in zip(series, lookup):
            row.append(plain_float(ev.sink[lk[s], i]) if s in lk else None)
            if ev.proxy and s in lk:
                stars.add((len(rows), len(row) - 1))
        rows.append(row)
    fmts = {c: (".4f" if c.startswith("valid") else ".2f") for c in cols[1:]}
    rep.table(Table("runs_compare", f"Valid loss and Sink_1^{eps:g} (%) over training, side by side",
                    cols, rows, fmts, stars,
                    note=PROXY_NOTE if stars else ""))
    names = ", ".join(lab for lab, _, _ in series)
    rep.figure("runs_compare", f"runs {names}: valid loss and Sink_1^{eps:g} over steps",
               figures.runs_compare, series, eps)
    alpha1 = [s for s in (_alpha1_series(label, r) for label, r in with_eval) if s is not None]
    if len(alpha1) >= 2:
        rep.figure("runs_mean_alpha1", f"runs {names}: mean alpha_1 over layers and heads against uniform "
                   "attention (H_T / T), over training", figures.alpha1_over_training, alpha1)
    curves = []
    for label, r in with_eval:
        ev = r.eval
        if ev.massive_ratio is not None:
            L = ev.massive_ratio.shape[1]
            curves.append((f"{label} (step {int(ev.step[-1])})", np.arange(L), ev.massive_ratio[-1], "o-"))
        if ev.massive_ratio_pre_norm is not None:
            L = ev.massive_ratio_pre_norm.shape[1]
            curves.append((f"{label} before norm", np.arange(L), ev.massive_ratio_pre_norm[-1], "s--"))
    if curves:
        rep.figure("runs_massive_ratio", f"runs {names}: ||h_1|| / mean ||h_t>1|| per layer at the last "
                   "evaluation (Fig. 7)", figures.per_layer, curves, "massive-activation ratio")


def _one_run(rep, label, r, eps):
    rep.heading(3, f"Run {label}")
    where = f"run {label}"
    for note in r.notes:
        rep.para(f"Note: {note}.", cls="note")
        rep.notes.append(f"{where}: {note}")
    tr, ev = r.train, r.eval
    caption = f"run {label} | file {Path(r.file).name}"
    if tr is not None and "step" in tr:
        cols = [c for c in tr]
        rows = [[_csv_num(tr[c][k]) for c in cols] for k in range(len(tr["step"]))]
        rep.table(Table(f"run_{label}_train", f"Run {label}: training log, one row per step", cols, rows,
                        inline=False))
    elif tr is None:
        rep.para(f"{where}: no training log (/runs/<run>/train).", cls="note")
    if ev is None:
        rep.skipped(f"{where}: evaluation table and figures", "no /runs/<run>/eval with step, valid_loss, sink")
        if tr is not None and "loss" in tr and "step" in tr:
            rep.figure(f"run_{label}_curves", caption, figures.run_curves, tr, None, 0)
        return
    ei = eps_index(ev.eps, eps)
    cols = ["step", "valid loss"] + [_eps_col("Sink_1", e) for e in ev.eps]
    if ev.sink_star is not None:
        cols += [_eps_col("Sink_*", e) for e in ev.eps]
    if ev.massive_ratio is not None:
        cols.append("massive ratio (last layer)")
    if ev.massive_ratio_pre_norm is not None:
        cols.append("massive ratio before norm (last layer)")
    rows, stars = [], set()
    for k in range(len(ev.step)):
        row = [int(ev.step[k]), plain_float(ev.valid_loss[k])]
        for i in range(len(ev.eps)):
            row.append(plain_float(ev.sink[k, i]))
            if ev.proxy:
                stars.add((k, len(row) - 1))
        if ev.sink_star is not None:
            for v in ev.sink_star[k]:
                row.append(plain_float(v))
                if ev.proxy:
                    stars.add((k, len(row) - 1))
        if ev.massive_ratio is not None:
            row.append(plain_float(ev.massive_ratio[k, -1]))
        if ev.massive_ratio_pre_norm is not None:
            row.append(plain_float(ev.massive_ratio_pre_norm[k, -1]))
        rows.append(row)
    fmts = {c: ".2f" for c in cols[2:]}
    fmts["valid loss"] = ".4f"
    rep.table(Table(f"run_{label}_eval", f"Run {label}: evaluations over training (Sink in %)", cols, rows,
                    fmts, stars, note=PROXY_NOTE if stars else ""))
    rep.figure(f"run_{label}_curves", caption + " | loss, valid loss, Sink_1^eps over steps (Fig. 4)",
               figures.run_curves, tr, ev, ei)
    last = f"step {int(ev.step[-1])}"
    curves = []
    if ev.massive_ratio is not None:
        curves.append(("h (block output)", np.arange(ev.massive_ratio.shape[1]), ev.massive_ratio[-1], "o-"))
    if ev.massive_ratio_pre_norm is not None:
        curves.append(("before the block's last norm", np.arange(ev.massive_ratio_pre_norm.shape[1]),
                       ev.massive_ratio_pre_norm[-1], "s--"))
    if curves:
        rep.figure(f"run_{label}_massive_ratio", f"{caption} | {last} | ||h_1|| / mean ||h_t>1|| per layer "
                   "(Fig. 7)", figures.per_layer, curves, "massive-activation ratio")
    else:
        rep.skipped(f"{where}: massive-activation ratio per layer", "no massive_ratio dataset")
    if ev.alpha is not None:
        a = ev.alpha[-1]
        rep.figure(f"run_{label}_alpha1", f"{caption} | {last} | alpha_1 per layer and head (Figs. 19-24)",
                   figures.head_layer_heatmap, a, list(range(a.shape[0])), "alpha_1")
    series = _alpha1_series(label, r)
    if series is not None:
        rep.figure(f"run_{label}_mean_alpha1", f"{caption} | T={probe_length(r)} | mean alpha_1 over training "
                   "against uniform attention", figures.alpha1_over_training, [series])
    if ev.alpha_star is not None:
        a = ev.alpha_star[-1]
        rep.figure(f"run_{label}_alpha_star", f"{caption} | {last} | alpha of the bias position (sink token "
                   "/ k*) per layer and head", figures.head_layer_heatmap, a, list(range(a.shape[0])),
                   "alpha_*")


def _alpha1_series(label, r):
    """(label, steps, mean alpha_1, uniform baseline) of a run's evaluations (results.mean_alpha1), or None."""
    m = mean_alpha1(r)
    if m is None:
        return None
    what, steps, values, baseline = m
    return (f"{label} ({what})" if what else label), steps, values, baseline


def _csv_num(v):
    return int(v) if isinstance(v, np.integer) else float(v)


# ------------------------------------------------------------------------------------------ 2. models

def _ordered_inputs(inputs):
    known = [i for i in INPUT_ORDER if i in inputs]
    return known + sorted(i for i in inputs if i not in INPUT_ORDER)


def _tool(e):
    """The program that measured an entry (the file's command_line), or "?" where the file does not say."""
    return e.tool or "?"


def _model_labels(entries):
    """Model names, with the measuring program added where one name comes from two programs (sinklab-probe's
    and sinklab-survey's numbers are not pooled), and the file's name where two files hold the same
    (model, input, domain)."""
    tools = {}
    for e in entries:
        tools.setdefault(e.model, set()).add(_tool(e))
    names = [f"{e.model} [{_tool(e)}]" if len(tools[e.model]) > 1 else e.model for e in entries]
    seen, clash = {}, set()
    for name, e in zip(names, entries):
        key = (name, e.input, e.domain)
        if key in seen and seen[key] != e.file:
            clash.add(name)
        seen.setdefault(key, e.file)
    return [f"{name} [{Path(e.file).name}]" if name in clash else name for name, e in zip(names, entries)]


def models_section(rep, entries, eps):
    rep.heading(2, "2. Probed and surveyed models", anchor="models")
    if not entries:
        rep.skipped("probed models", "no /models/<model>/<input>/<domain> group in the files")
        return
    labels = _model_labels(entries)
    for e in entries:
        rep.notes += e.notes
    skipped_pairs = {}  # the survey's map pairs a model does not have: one note per model
    for label, e in zip(labels, entries):
        if "skipped_pairs" in e.attrs:
            skipped_pairs.setdefault(label, attr_text(e.attrs["skipped_pairs"]))
    rep.notes += [f"{m}: requested (layer:head) map pairs not measured: {t}" for m, t in skipped_pairs.items()]
    models = list(dict.fromkeys(labels))
    inputs = _ordered_inputs({e.input for e in entries})
    by = {}  # (model label, input) -> [entries]
    for label, e in zip(labels, entries):
        by.setdefault((label, e.input), []).append(e)

    # Table 1 (left): Sink_1^eps per model and input; natural (any input) = mean over its domains. Inputs
    # with an intervention ("natural+swap_5") have their own table, those at other lengths ("natural@T256")
    # the Sink-vs-T section.
    plain = [i for i in inputs if "+" not in i and "@T" not in i]
    missing = [e.label() for e in entries if len(e.sink) and match_eps(e.eps, eps) is None]
    rows, stars, means = [], set(), []
    for m in models:
        row, mrow = [m], []
        for inp in plain:
            es = [e for e in by.get((m, inp), []) if match_eps(e.eps, eps) is not None]
            v = float(np.mean([e.sink[match_eps(e.eps, eps)] for e in es])) if es else None
            row.append(v)
            mrow.append(np.nan if v is None else v)
            if es and any(e.proxy for e in es):
                stars.add((len(rows), len(row) - 1))
        rows.append(row)
        means.append(mrow)
    note = (f"natural (and every other input) = mean over its domains (per-domain table below); eps = {eps:g}; "
            "the other thresholds are in table1_all_eps.csv.")
    if stars:
        note += " " + PROXY_NOTE
    if missing:
        note += f" Without a Sink at eps={eps:g}, left out: {', '.join(missing)}."
    rep.table(Table("table1", f"Table 1 (left): Sink_1^{eps:g} (%) per model and input", ["model"] + plain,
                    rows, {i: ".2f" for i in plain}, stars, note=note))
    long_rows = []
    for m in models:
        for inp in inputs:
            es = by.get((m, inp), [])
            for e_val in sorted({x for e in es for x in e.eps if not math.isnan(x)}):
                vals = [e.sink[match_eps(e.eps, e_val)] for e in es if match_eps(e.eps, e_val) is not None]
                long_rows.append([m, inp, len(vals), e_val, float(np.mean(vals)),
                                  "yes" if any(e.proxy for e in es) else ""])
    rep.table(Table("table1_all_eps", "Sink_1^eps (%) per model, input and threshold (mean over domains)",
                    ["model", "input", "domains", "eps", "Sink_1", "proxy"], long_rows,
                    {"Sink_1": ".2f", "eps": "g"}, inline=False))
    if plain and not all(np.isnan(v) for r in means for v in r):
        rep.figure("table1_bars", f"Sink_1^{eps:g} (%) per model and input (Table 1 left / Fig. 4 left)",
                   figures.grouped_bars, models, plain, means, f"Sink_1^{eps:g} (%)")

    _inputs_table(rep, models, inputs, by)
    _per_domain_table(rep, labels, entries, eps)
    _sink_k_table(rep, labels, entries, eps)
    _intervention_table(rep, models, inputs, by, eps)
    _length_section(rep, models, inputs, by)
    for m in models:
        rep.heading(3, f"Model {m}")
        for inp in plain:
            es = by.get((m, inp))
            if es:
                _model_input_figures(rep, m, inp, es)
                _map_figures(rep, m, inp, es)


def _base_input(label):
    """natural@T256 -> natural; other labels unchanged."""
    return label.split("@T")[0]


def _length_section(rep, models, inputs, by):
    """Sink_1^eps against T (paper Fig. 3) for every model and input measured at two or more lengths
    (the survey's --seq-lens): a table of every (model, input, T, eps) and one figure per model and input,
    one line per eps; each point the mean over domains."""
    rows = []
    for m in models:
        for base in dict.fromkeys(_base_input(i) for i in inputs if "+" not in i):
            by_T = {}  # T -> entries
            for inp in inputs:
                if _base_input(inp) != base or "+" in inp:
                    continue
                for e in by.get((m, inp), []):
                    if "T" in e.attrs and len(e.sink):
                        by_T.setdefault(int(e.attrs["T"]), []).append(e)
            if len(by_T) < 2:
                continue
            lengths = sorted(by_T)
            eps_all = sorted({x for es in by_T.values() for e in es for x in e.eps if not math.isnan(x)})
            series = []
            for e_val in eps_all:
                ys = []
                for T in lengths:
                    vals = [e.sink[match_eps(e.eps, e_val)] for e in by_T[T] if match_eps(e.eps, e_val) is not None]
                    ys.append(float(np.mean(vals)) if vals else np.nan)
                    if vals:
                        rows.append([m, base, T, e_val, ys[-1], len(vals)])
                series.append((f"eps = {e_val:g}", lengths, ys, "o-"))
            rep.figure(f"sink_vs_T_{m}_{base}", f"{m} / {base}: Sink_1^eps (%) against T, mean over domains (Fig. 3)",
                       figures.xy_panels, [{"series": series, "xlabel": "T (tokens)", "ylabel": "Sink_1^eps (%)",
                                            "logx": 2, "ylim": (0, 100)}])
    if rows:
        rep.table(Table("sink_vs_T", "Sink_1^eps (%) against the sequence length T (Fig. 3)",
                        ["model", "input", "T", "eps", "Sink_1", "domains"], rows, {"Sink_1": ".2f", "eps": "g"}))


def _ablation_base(label):
    """natural@T1024+window_256 -> natural@T1024 (the plain measurement at the same input and T)."""
    return label.split("+")[0]


def ablations_section(rep, entries, ablation_losses, eps):
    """What the sink does (the survey's --ablations): per model, input and T, the next-token loss of every
    ablation beside full attention's (mean over domains, over the domains both have), the sink metric before
    and after for the massive-activation ones; the loss against the attention window, with and without the
    first tokens kept (StreamingLLM's sink tokens), one figure per model, input and T."""
    ablated = [(a.model, a.input, a.domain, a.attrs, a.loss, None) for a in ablation_losses]
    ablated += [(e.model, e.input, e.domain, e.attrs, float(e.attrs["loss"]), e) for e in entries
                if "ablation" in e.attrs and "loss" in e.attrs]
    if not ablated:
        return
    rep.heading(2, "What the sink does: ablations", anchor="ablations")
    full = {(e.model, e.input, e.domain): e for e in entries if "ablation" not in e.attrs and "loss" in e.attrs}
    groups = {}  # (model, base label, ablation tag) -> [(domain, loss, entry)]
    for model, label, domain, attrs, loss, e in ablated:
        groups.setdefault((model, _ablation_base(label), attr_text(attrs["ablation"])), []).append((domain, loss, e, attrs))
    rows, curves = [], {}  # curves: (model, base) -> {"full": loss, "window": {W: loss}, "sinks s": {W: loss}}
    for (model, base, tag), items in sorted(groups.items()):
        paired = [(d, loss, e, attrs) for d, loss, e, attrs in items if (model, base, d) in full]
        if not paired:
            rows.append([model, base, tag, len(items), float(np.mean([x[1] for x in items])), None, None, None, None])
            continue
        loss = float(np.mean([x[1] for x in paired]))
        loss_full = float(np.mean([float(full[(model, base, d)].attrs["loss"]) for d, *_ in paired]))
        sink_before = sink_after = None
        ents = [e for _, _, e, _ in paired if e is not None and match_eps(e.eps, eps) is not None]
        if ents:
            sink_after = float(np.mean([e.sink[match_eps(e.eps, eps)] for e in ents]))
            befores = [full[(model, base, d)] for d, _, e, _ in paired if e is not None]
            befores = [b for b in befores if len(b.sink) and match_eps(b.eps, eps) is not None]
            if befores:
                sink_before = float(np.mean([b.sink[match_eps(b.eps, eps)] for b in befores]))
        rows.append([model, base, tag, len(paired), loss, loss_full, loss - loss_full, sink_before, sink_after])
        attrs = paired[0][3]
        kind = attr_text(attrs.get("ablation_kind", ""))
        if kind in ("window", "window_sinks"):
            c = curves.setdefault((model, base), {"full": loss_full, "series": {}})
            s = int(attrs.get("sink_tokens", 0)) if kind == "window_sinks" else 0
            c["series"].setdefault(s, {})[int(attrs["window"])] = loss
    rep.table(Table("ablations", "Next-token loss (nats) under each ablation beside full attention, and Sink_1^"
                    f"{eps:g} (%) before and after the massive-activation ones (mean over the domains both have)",
                    ["model", "input", "ablation", "domains", "loss", "loss (full)", "change", f"Sink_1^{eps:g} before",
                     f"Sink_1^{eps:g} after"], rows,
                    {"loss": ".4f", "loss (full)": ".4f", "change": "+.4f", f"Sink_1^{eps:g} before": ".2f",
                     f"Sink_1^{eps:g} after": ".2f"}))
    for (model, base), c in sorted(curves.items()):
        series = [("window only" if s == 0 else f"window + first {s} token{'s' if s > 1 else ''}",
                   sorted(ws), [ws[w] for w in sorted(ws)], "o-") for s, ws in sorted(c["series"].items())]
        rep.figure(f"loss_vs_window_{model}_{base}", f"{model} / {base}: next-token loss against the attention window, "
                   "with and without the first tokens kept (StreamingLLM's attention sinks)", figures.xy_panels,
                   [{"series": series, "xlabel": "window (most recent tokens)", "ylabel": "loss (nats)", "logx": 2,
                     "hlines": [("full attention", c["full"])]}])


def downstream_section(rep, entries, scores, eps):
    """Sink beside downstream accuracy (paper Fig. 10): each model's Sink_1^eps on natural inputs (mean over
    domains) and its multiple-choice accuracy (the survey's hellaswag input), as a table and a scatter."""
    if not scores:
        return
    rep.heading(2, "Sink and downstream accuracy (Fig. 10)", anchor="downstream")
    sink_of = {}
    for e in entries:
        i = match_eps(e.eps, eps) if len(e.sink) else None
        if e.input == "natural" and i is not None:
            sink_of.setdefault(e.model, []).append(e.sink[i])
    rows, acc_points, norm_points = [], [], []
    for s in scores:
        sink = float(np.mean(sink_of[s.model])) if s.model in sink_of else None
        rows.append([s.model, s.input, sink, s.acc, s.acc_norm, s.n_examples])
        if sink is not None:
            acc_points.append((s.model, sink, s.acc))
            norm_points.append((s.model, sink, s.acc_norm))
    rep.table(Table("downstream", f"Sink_1^{eps:g} (%, natural inputs) and multiple-choice accuracy per model",
                    ["model", "task", f"Sink_1^{eps:g}", "acc", "acc_norm", "examples"], rows,
                    {f"Sink_1^{eps:g}": ".2f", "acc": ".4f", "acc_norm": ".4f"},
                    note="acc: the choice of highest log-likelihood; acc_norm: per character of the choice "
                         "(lm-evaluation-harness's definitions)."))
    if acc_points:
        series = [(name, [p[1] for p in points], [p[2] for p in points], marker)
                  for name, marker, points in (("acc", "o", acc_points), ("acc_norm", "^", norm_points))]
        rep.figure("sink_vs_accuracy", f"Sink_1^{eps:g} against multiple-choice accuracy (Fig. 10)", figures.xy_panels,
                   [{"series": series, "annotate": acc_points + norm_points, "xlabel": f"Sink_1^{eps:g} (%)",
                     "ylabel": "accuracy"}])
    else:
        rep.skipped("Fig. 10 (Sink against accuracy)", "no model has both a hellaswag score and natural inputs")


def _inputs_table(rep, models, inputs, by):
    """Where each model's numbers come from (weights file and quantisation, when the survey copied the
    model directory's notes) and what they were measured on, with the next-token loss (mean over
    domains) where the survey measured one."""
    rows = []
    for m in models:
        for inp in inputs:
            es = by.get((m, inp), [])
            if not es:
                continue
            losses = [float(e.attrs["loss"]) for e in es if "loss" in e.attrs]
            n_seq = [int(e.attrs["n_seq"]) for e in es if "n_seq" in e.attrs]
            bos = _set_text(("none" if _attr_value(e.attrs, "bos") == "-1" else _attr_value(e.attrs, "bos"))
                            for e in es if "bos" in e.attrs)
            rows.append([m, inp, _set_text(_tool(e) for e in es), len(es), sum(n_seq) if n_seq else None,
                         _set_text(_attr_value(e.attrs, "T") for e in es), bos,
                         float(np.mean(losses)) if len(losses) == len(es) else None,
                         _set_text(_attr_value(e.attrs, "model_type") for e in es),
                         _set_text(_attr_value(e.attrs, "source") for e in es),
                         _set_text(_attr_value(e.attrs, "quantization") for e in es)])
    if rows:
        rep.table(Table("inputs", "Inputs, next-token loss and weights per model and input", [
            "model", "input", "measured by", "domains", "sequences", "T", "BOS", "loss", "model_type", "source",
            "quantization"], rows, {"loss": ".4f"}, note="measured by: the program that wrote the file (its "
            "command_line attribute). loss: mean next-token cross-entropy (nats per predicted token) over the "
            "domains; empty where the survey measured none (sinklab's own checkpoints). source / quantization: the "
            "weights file and its tensor types, from the model directory's sinklab_source.json (data_prep "
            "gguf-import); '?' where it has none."))


def _per_domain_table(rep, labels, entries, eps):
    all_eps = sorted({x for e in entries for x in e.eps if not math.isnan(x)})
    any_star = any(e.get("sink_star") is not None for e in entries)
    cols = ["model", "input", "domain", "n_seq", "T", "bos"] + [_eps_col("Sink_1", x) for x in all_eps]
    if any_star:
        cols += [_eps_col("Sink_*", x) for x in all_eps]
    cols += ["loss", "massive ratio (last layer)", "proxy", "measured by", "file"]
    order = sorted(range(len(entries)), key=lambda k: (
        list(dict.fromkeys(labels)).index(labels[k]), _ordered_inputs({e.input for e in entries}).index(
            entries[k].input), entries[k].domain))
    rows, stars = [], set()
    for k in order:
        e = entries[k]
        row = [labels[k], e.input, e.domain, _attr_value(e.attrs, "n_seq"), _attr_value(e.attrs, "T"),
               _attr_value(e.attrs, "bos")]
        for x in all_eps:
            i = match_eps(e.eps, x)
            row.append(None if i is None else plain_float(e.sink[i]))
            if e.proxy and i is not None:
                stars.add((len(rows), len(row) - 1))
        if any_star:
            ss = e.get("sink_star")
            for x in all_eps:
                i = match_eps(e.eps, x)
                row.append(None if ss is None or i is None or i >= len(ss) else plain_float(ss[i]))
        mr = e.get("massive_ratio")
        row += [plain_float(float(e.attrs["loss"])) if "loss" in e.attrs else None,
                None if mr is None or not len(mr) else plain_float(mr[-1]), "yes" if e.proxy else "", _tool(e),
                Path(e.file).name]
        rows.append(row)
    fmts = {c: ".2f" for c in cols if c.startswith(("Sink", "massive"))}
    fmts["loss"] = ".4f"
    rep.table(Table("per_domain", "Sink_1^eps (%) per model, input and domain", cols, rows, fmts, stars,
                    note=PROXY_NOTE if stars else ""))


def _sink_k_table(rep, labels, entries, eps):
    """Sink_k^eps for k = 1..K (Table 10 right) where the survey wrote sink_k[K,E] with K > 1."""
    rows = []
    for label, e in zip(labels, entries):
        sk = e.get("sink_k")
        i = match_eps(e.eps, eps)
        if sk is None or sk.shape[0] < 2 or i is None or sk.shape[1] != len(e.eps):
            continue
        for k in range(sk.shape[0]):
            rows.append([label, e.input, e.domain, k + 1, plain_float(sk[k, i])])
    if rows:
        rep.table(Table("sink_k", f"Sink_k^{eps:g} (%) per token position k (1-based)",
                        ["model", "input", "domain", "k", f"Sink_k^{eps:g}"], rows, {f"Sink_k^{eps:g}": ".2f"}))


def _intervention_table(rep, models, inputs, by, eps):
    """Table 7 layout: the first position embedding replaced by / swapped with position t's; Sink_1 and
    Sink_t (mean over domains) where the survey wrote sink_t and the intervention attributes."""
    rows = []
    for m in models:
        for inp in inputs:
            es = [e for e in by.get((m, inp), []) if e.get("sink_t") is not None and "intervention" in e.attrs
                  and match_eps(e.eps, eps) is not None and len(e.get("sink_t")) == len(e.eps)]
            if not es:
                continue
            rows.append([m, inp, _set_text(_attr_value(e.attrs, "intervention") for e in es),
                         _set_text(_attr_value(e.attrs, "t") for e in es), len(es),
                         float(np.mean([e.sink[match_eps(e.eps, eps)] for e in es])),
                         float(np.mean([e.get("sink_t")[match_eps(e.eps, eps)] for e in es]))])
    if rows:
        rep.table(Table("interventions", f"Table 7 layout: position-embedding interventions, Sink^{eps:g} (%) "
                        "of the first token and of position t (mean over domains)",
                        ["model", "input", "intervention", "t", "domains", f"Sink_1^{eps:g}", f"Sink_t^{eps:g}"],
                        rows, {f"Sink_1^{eps:g}": ".2f", f"Sink_t^{eps:g}": ".2f"}))


def _mean_of(entries, name):
    """Mean over entries (domains) of dataset `name`; None if any lacks it or shapes differ."""
    arrays = [e.get(name) for e in entries]
    if any(a is None for a in arrays) or len({a.shape for a in arrays}) != 1:
        return None
    return np.mean(arrays, axis=0)


def _model_input_figures(rep, model, inp, es):
    domains = [e.domain for e in es]
    domain_text = domains[0] if len(es) == 1 else f"mean of {len(es)} ({', '.join(domains)})"
    caption = _entry_caption(es, domain_text)
    where = f"{model} / {inp}"
    name = f"{model}_{inp}"
    La_layers = None
    al = es[0].get("attention_layers")
    if al is not None and all(e.get("attention_layers") is not None and
                              np.array_equal(e.get("attention_layers"), al) for e in es):
        La_layers = [int(x) for x in al]

    def layer_axis(n):
        return La_layers if La_layers is not None and len(La_layers) == n else list(range(n))

    # l2 norms of the first token vs the rest: hidden states over all layers, keys/values over attention layers.
    panels = []
    for what, prefix in (("hidden states h", "hnorm"), ("keys k", "knorm"), ("values v", "vnorm")):
        first, rest = _mean_of(es, f"{prefix}_first"), _mean_of(es, f"{prefix}_rest")
        if first is not None and rest is not None and first.shape == rest.shape:
            x = list(range(len(first))) if prefix == "hnorm" else layer_axis(len(first))
            panels.append((what, x, first, rest))
    if panels:
        rep.figure(f"{name}_norms", caption + " | l2 norm, first token vs mean of the others (Figs. 2, 11-14)",
                   figures.first_vs_rest_norms, panels)
    else:
        rep.skipped(f"{where}: l2 norms of h/k/v", "no hnorm_/knorm_/vnorm_first and _rest datasets")

    alphas = [e.alpha1() for e in es]
    if all(x is not None for x in alphas) and len({x.shape for x in alphas}) == 1:
        a = np.mean(alphas, axis=0)
        rep.figure(f"{name}_alpha1", caption + " | alpha_1 per layer and head (Figs. 19-24)",
                   figures.head_layer_heatmap, a, layer_axis(a.shape[0]), "alpha_1")
    else:
        rep.skipped(f"{where}: alpha_1 heatmap", "no alpha[L,H,K] dataset (or shapes differ between domains)")

    curves = []
    mr = _mean_of(es, "massive_ratio")
    if mr is not None:
        curves.append(("block output h", np.arange(len(mr)), mr, "o-"))
    mp = _mean_of(es, "massive_ratio_pre_norm")
    if mp is not None:
        curves.append(("before the block's last norm", np.arange(len(mp)), mp, "s--"))
    if curves:
        rep.figure(f"{name}_massive_ratio", caption + " | ||h_1|| / mean ||h_t>1|| per layer (Fig. 7)",
                   figures.per_layer, curves, "massive-activation ratio")
    else:
        rep.skipped(f"{where}: massive-activation ratio", "no massive_ratio dataset")

    ltf = _mean_of(es, "last_to_first")
    if ltf is not None:
        # The paper's long-input figure (App. F, Fig. 12): the mean over heads, error bars = std over heads.
        x = layer_axis(ltf.shape[0])
        curves = [("mean over heads (bars: std over heads)", x, ltf.mean(axis=1), "o", ltf.std(axis=1)),
                  ("max over heads", x, ltf.max(axis=1), "^--"), ("min over heads", x, ltf.min(axis=1), "v--")]
        rep.figure(f"{name}_last_to_first", caption + " | attention of the last token to the first, per layer "
                   "(long inputs: App. F, Fig. 12)", figures.per_layer, curves, "A[T-1, 0]")
    else:
        rep.skipped(f"{where}: last-token-to-first attention", "no last_to_first dataset")


def _map_figures(rep, model, inp, es):
    """QK cosine / norm-product maps and attention maps of one model and input: the mean over the domains
    whose maps have the same shape and (layer, head) pairs, one figure per kind and such group."""
    _map_kind(rep, model, inp, es, ("qk_cos", "qk_normprod"), "qk",
              " | cos(q_t, k_j) and ||q_t|| ||k_j|| (Figs. 2, 15-18)", ["cos(q_t, k_j)", "||q_t|| ||k_j||"])
    _map_kind(rep, model, inp, es, ("attention_maps",), "attention", " | attention maps A[t, j] (Figs. 25-26)",
              ["A[t, j]"])


def _map_kind(rep, model, inp, es, names, suffix, what, col_titles):
    groups = {}  # (shape, pairs) -> [(entry, [stack per name])]
    for e in es:
        stacks = [e.map_stack(n) for n in names]
        if all(m is None for m in stacks):
            continue
        if any(m is None for m in stacks) or len({m.shape for m in stacks}) != 1:
            rep.skipped(f"{e.label()}: {' and '.join(names)} maps", "they need one [P,T,T] shape")
            continue
        pairs = e.map_pairs(names[0], stacks[0].shape[0])
        key = (stacks[0].shape, tuple(pairs) if pairs else None)
        groups.setdefault(key, []).append((e, stacks))
    for (shape, pairs), members in groups.items():
        ents = [e for e, _ in members]
        means = [np.mean([st[i] for _, st in members], axis=0) for i in range(len(names))]
        domain_text = ents[0].domain if len(ents) == 1 else \
            f"mean of {len(ents)} ({', '.join(e.domain for e in ents)})"
        rows = [(_pair_title(pairs, p), [m[p] for m in means]) for p in range(shape[0])]
        name = f"{model}_{inp}_{suffix}" if len(groups) == 1 else f"{model}_{inp}_{ents[0].domain}_{suffix}"
        rep.figure(name, _entry_caption(ents, domain_text) + what +
                   ("" if pairs else " | (layer, head) pairs not stored"), figures.map_grid, rows, col_titles)


def _pair_title(pairs, p):
    return f"layer {pairs[p][0]} head {pairs[p][1]}" if pairs else f"map {p}"


# ------------------------------------------------------------------------------------------ 3. items

def items_section(rep, items):
    if not items:
        return
    rep.heading(2, "3. Survey work items", anchor="items")
    rows = [[it.id, it.status, attr_text(it.rank) if it.rank is not None else None,
             plain_float(it.seconds) if it.seconds is not None and np.ndim(it.seconds) == 0 else None, it.error]
            for it in sorted(items, key=lambda it: it.id)]
    failed = [r for r in rows if r[1] != "ok"]
    rep.para(f"{len(rows)} item(s): {len(rows) - len(failed)} ok, {len(failed)} not ok.")
    rep.table(Table("items", "Survey items (/items/<id>)", ["id", "status", "rank", "seconds", "error"], rows,
                    {"seconds": ".1f"}))
    if failed:
        rep.notes.append(f"{len(failed)} survey item(s) not ok: " + ", ".join(r[0] for r in failed[:20])
                         + (" ..." if len(failed) > 20 else ""))


# ---------------------------------------------------------------------------------------------- summary

GLOSSARY = [
    ("alpha_k", "importance score of position k in one head: the mean attention that queries i >= k give to "
                "key k, alpha_k = 1/(T-k+1) sum_{i>=k} A[i,k]; alpha_1 is the first token's."),
    ("Sink_k^eps", "percentage of (layer, head) pairs with alpha_k > eps, averaged over the probe sequences "
                   "(paper Sec. 3.2), in %."),
    ("Sink_*^eps", "the same for the bias position (learnable sink token x* or key bias k*; Tables 4-5)."),
    ("valid loss", "mean cross-entropy (nats per token) on the validation shard at that step."),
    ("loss (surveyed models)", "mean next-token cross-entropy (nats per predicted token) over the T-1 predicted "
                               "positions of the sequences the survey measured."),
    ("massive-activation ratio", "||h_1|| / mean_{t>1} ||h_t|| of each block's output hidden states (Fig. 7; "
                                 "the survey takes post-norm blocks and the last block before their norm); "
                                 "'before norm': a post-norm model's residual sum before the block's last "
                                 "norm."),
    ("Sink_t (interventions)", "Sink_t^eps at the position t whose embedding replaced or was swapped with the "
                               "first one (Table 7)."),
    ("hnorm/knorm/vnorm", "l2 norms of the first token's hidden state / key / value vs the mean over the "
                          "other tokens, per layer (Figs. 2, 11-14)."),
    ("last-to-first", "attention of the last query to the first key, A[T-1, 0], per layer and head."),
    ("natural", "Table 1's natural-language column: the mean of Sink_1^eps over the domains probed."),
    ("layers, heads", "0-based indices, as the files store them."),
]


def summary_html(files, runs, entries, items, rep, eps):
    """The end of the page: what was read (files, runs, models), what the numbers mean, notes, skips."""
    out = ['<h2 id="summary">What was read, and notes</h2>', "<h3>Files</h3>", "<ul>"]
    for rf in files:
        meta = ", ".join(f"{k}={rf.attrs[k]}" for k in ("sinklab_version", "git_sha", "created_utc")
                         if rf.attrs.get(k))
        cmd = rf.attrs.get("command_line", "")
        out.append(f"<li><code>{html.escape(rf.path)}</code>" + (f" ({html.escape(meta)})" if meta else "")
                   + (f"<br><code>{html.escape(cmd)}</code>" if cmd else "") + "</li>")
    out.append("</ul>")
    labels = _run_labels(runs)
    out.append(f"<h3>Training runs ({len(runs)})</h3>")
    if runs:
        out.append("<ul>")
        for label, r in zip(labels, runs):
            bits = []
            if r.train and "loss" in r.train:
                bits.append(f"{len(r.train['loss'])} logged steps")
            if r.eval is not None:
                bits.append(f"{len(r.eval.step)} evaluations, eps {', '.join(f'{x:g}' for x in r.eval.eps)}")
            out.append(f"<li>{html.escape(label)} ({html.escape(Path(r.file).name)}): "
                       f"{html.escape('; '.join(bits) or 'no data')}</li>")
        out.append("</ul>")
    else:
        out.append("<p>none</p>")
    out.append(f"<h3>Probed models ({len(set(_model_labels(entries)))})</h3>")
    if entries:
        out.append("<ul>")
        mlabels = _model_labels(entries)
        for m in dict.fromkeys(mlabels):
            es = [e for lab, e in zip(mlabels, entries) if lab == m]
            per = [f"{inp} ({sum(e.input == inp for e in es)} domain(s))"
                   for inp in _ordered_inputs({e.input for e in es})]
            by = _set_text(_tool(e) for e in es)
            out.append(f"<li>{html.escape(m)}: {html.escape(', '.join(per))}; measured by {html.escape(by)}</li>")
        out.append("</ul>")
    else:
        out.append("<p>none</p>")
    if items:
        ok = sum(it.status == "ok" for it in items)
        out.append(f"<p>Survey items: {len(items)} ({ok} ok).</p>")
    out.append("<h3>What the numbers mean</h3><ul>")
    out += [f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in GLOSSARY]
    out.append("</ul>")
    proxy = [r.name for r in runs if r.eval is not None and r.eval.proxy] + \
        sorted({e.model for e in entries if e.proxy})
    if proxy:
        out.append("<p>Values marked * are computed from proxy attention scores w_ij / sum_j w_ij (paper "
                   f"Sec. 7.4, Table 6), as the files say for: {html.escape(', '.join(proxy))}.</p>")
    else:
        out.append("<p>No file marks its Sink values as computed from proxy scores (attribute proxy_scores), "
                   "so no value is marked *. Variants whose attention scores are not a distribution "
                   "(e.g. sigmoid without normalisation) are measured with proxy scores by the probe even so."
                   "</p>")
    out.append(f"<p>Tables at eps = {eps:g}; every table is also in tables/ as Markdown and CSV, every "
               "figure in figures/ as PNG.</p>")
    notes = [n for rf in files for n in rf.notes] + rep.notes
    if notes:
        out.append("<h3>Notes</h3><ul>")
        out += [f'<li class="note">{html.escape(n)}</li>' for n in notes]
        out.append("</ul>")
    if rep.skips:
        out.append("<h3>Skipped</h3><ul>")
        out += [f'<li class="note">{html.escape(s)}</li>' for s in rep.skips]
        out.append("</ul>")
    return "\n".join(out)


# ----------------------------------------------------------------------------------- 5. fine-tuning

def _events_of(r):
    """[(step, kind name)] of a run's monitor events."""
    if not r.events or "step" not in r.events or "kind" not in r.events:
        return []
    return [(int(s), EVENT_KINDS.get(int(k), f"kind {int(k)}")) for s, k in zip(r.events["step"], r.events["kind"])]


def sft_section(rep, runs, eps):
    """Paper App. D: Fig. 30 over the fine-tuning runs and the before/after sink (Table 1 right layout)."""
    labels = _run_labels(runs)
    sft = [(label, r) for label, r in zip(labels, runs) if r.init_from]
    if not sft:
        return  # no fine-tuning run: nothing to say
    rep.heading(2, "5. Fine-tuning stability (paper App. D, Fig. 30)", anchor="sft")
    series = []
    for label, r in sft:
        if not r.train or not {"step", "loss", "grad_norm"} <= set(r.train):
            rep.skipped(f"fine-tuning run {label} in Fig. 30", "no train step/loss/grad_norm columns")
            continue
        series.append((label, r.train["step"], r.train["loss"], r.train["grad_norm"], _events_of(r)))
    if series:
        rep.figure("fig30_sft_stability", "Fig. 30: training loss and gradient norm (before clipping) over the "
                   f"fine-tuning steps of {', '.join(s[0] for s in series)}; markers: the stability monitor's "
                   "events", figures.sft_stability, series)
    cols = ["run", "base checkpoint", f"base {_eps_col('Sink_1', eps)}", f"fine-tuned {_eps_col('Sink_1', eps)}",
            "base valid loss", "fine-tuned valid loss", "steps", "non-finite steps", "spike events"]
    rows, stars = [], set()
    for label, r in sft:
        ev = r.eval
        i = None if ev is None else match_eps(ev.eps, eps)
        have = ev is not None and i is not None and len(ev.step) >= 2 and int(ev.step[0]) == 0
        if not have:
            rep.skipped(f"run {label} in the before/after sink table",
                        f"needs evaluations at step 0 and later with Sink_1 at eps={eps:g}")
        nonfinite = int(r.monitor["nonfinite_steps"][-1]) if r.monitor and "nonfinite_steps" in r.monitor and \
            len(r.monitor["nonfinite_steps"]) else None
        spikes = sum(k != "non-finite step" for _, k in _events_of(r))
        rows.append([label, r.init_from, plain_float(ev.sink[0, i]) if have else None, plain_float(ev.sink[-1, i]) if have else None,
                     plain_float(ev.valid_loss[0]) if have else None, plain_float(ev.valid_loss[-1]) if have else None,
                     len(r.train["loss"]) if r.train and "loss" in r.train else None, nonfinite, spikes])
        if have and ev.proxy:
            stars.update({(len(rows) - 1, 2), (len(rows) - 1, 3)})
    fmts = {cols[2]: ".2f", cols[3]: ".2f", cols[4]: ".4f", cols[5]: ".4f"}
    rep.table(Table("sft_sink_before_after", f"Sink_1^{eps:g} (%) of the base model (the fine-tuning run's "
                    "evaluation at step 0) and of the fine-tuned one (its last evaluation), on the same probe "
                    "sequences; Table 1 (right): base vs chat", cols, rows, fmts, stars,
                    note=PROXY_NOTE if stars else ""))


# ---------------------------------------------------------------------------------------------- main

def build_report(paths, out_dir, eps=DEFAULT_EPS, jobs_dir=JOBS_DIR):
    """Reads `paths` and writes the report into `out_dir`; returns the Report. ResultsError on bad input."""
    files = []
    try:
        for p in paths:
            files.append(open_results(p))
        runs = [r for rf in files for r in rf.runs]
        entries = [e for rf in files for e in rf.entries]
        items = [it for rf in files for it in rf.items]
        scores = [s for rf in files for s in rf.scores]
        ablation_losses = [a for rf in files for a in rf.ablation_losses]
        try:
            rep = Report(out_dir)
        except OSError as e:
            raise ResultsError(f"-o {out_dir}: cannot create the directory: {e.strerror or e}") from None
        training_section(rep, runs, eps)
        models_section(rep, entries, eps)
        downstream_section(rep, entries, scores, eps)
        ablations_section(rep, entries, ablation_losses, eps)
        paper_tables_section(rep, runs, eps, jobs_dir)
        paper_figures_section(rep, runs, entries, eps, jobs_dir)
        items_section(rep, items)
        sft_section(rep, runs, eps)
        rep.write_html(summary_html(files, runs, entries, items, rep, eps))
        return rep
    finally:
        for rf in files:
            rf.close()


def main(argv=None):
    ap = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="sinklab results files (HDF5)")
    ap.add_argument("-o", "--out", default="report", help="output directory (default: report)")
    ap.add_argument("--eps", type=float, default=DEFAULT_EPS, help="threshold of the main tables (default 0.3)")
    args = ap.parse_args(argv)
    try:
        rep = build_report(args.files, args.out, args.eps)
    except ResultsError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    print(f"{PROG}: {len(rep.tables)} tables, {len(rep.figures)} figures -> {Path(args.out) / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
