"""Section "Training runs", the pre-training runs (/runs/<run>) other than the Bigram-Backcopy ones (their own
section, analysis/sections/bbm.py) and the fine-tuning ones (analysis/sections/sft.py, on their own step
axis): one row per run at its last evaluation (the layout of the paper's Tables 2-15); with several runs,
valid loss and Sink_1^eps side by side over steps, mean alpha_1 against uniform attention and the
massive-activation ratio per layer; per run its training log and evaluations, loss and Sink curves (Fig. 4),
massive-activation ratio per layer (Fig. 7), alpha_1 and alpha_* per layer and head (Figs. 19-24) and mean
alpha_1 over training. Each run adds a finding: whether and when a thresholded sink emerged, by the persistent
rule of analysis/stats/emergence.py (Sink_1^eps above 0 % from that evaluation to the last one), stated on the page.
"""
import math
from pathlib import Path

import numpy as np

from analysis import figures
from analysis.stats.bridge import is_bridge_run
from analysis.stats.emergence import persistent_onset, rule_text
from analysis.results import (eps_index, is_bbm, is_finetuning, match_eps, mean_alpha1,
                              probe_length, sink_series, tokens_at, tokens_text)
from analysis.sections.labels import eps_col, run_labels
from analysis.tables import Table, plain_float

# The paper's reference for when a sink emerges (Sec. 4, Fig. 4 middle): its 60M default setup, 1M tokens a step.
PAPER_EMERGENCE = "the paper's 60M models grow one after 1-2k steps of 1M tokens, 1-2B tokens"


def write_section(rep, data):
    """The runs' overview table, the side-by-side comparison (two or more runs with evaluations), then
    each run's tables and figures."""
    labels_all = run_labels(data.runs)
    pairs = [(label, r) for label, r in zip(labels_all, data.runs)
             if not is_bbm(r) and not is_finetuning(r) and not is_bridge_run(r)]
    eps = data.eps
    if not data.runs:
        rep.skipped("training runs", "no /runs/<run> group in the files")
        return
    if not pairs:
        return  # only Bigram-Backcopy and fine-tuning runs: their own sections
    rep.section("Training runs", anchor="runs")
    rule = rule_text(f"Sink_1^{eps:g}", "0 %", strict=True)
    rep.para(f"When a thresholded sink emerged (the findings): {rule}.")
    others = [what for what, n in (("Bigram-Backcopy", sum(is_bbm(r) for r in data.runs)),
                                   ("fine-tuning", sum(is_finetuning(r) for r in data.runs)),
                                   ("toy-to-text", sum(is_bridge_run(r) for r in data.runs))) if n]
    if others:
        named = others[0] if len(others) == 1 else f"{', '.join(others[:-1])} and {others[-1]}"
        rep.para(f"Pre-training runs other than the {named} runs, which have their own sections.")
    labels, runs = [label for label, _ in pairs], [r for _, r in pairs]
    all_eps = sorted({e for r in runs if r.eval for e in r.eval.eps if not math.isnan(e)})
    any_star = any(r.eval is not None and r.eval.sink_star is not None for r in runs)

    # Overview, the layout of the paper's Tables 2-15: one row per run, its last evaluation.
    cols = ["run", "file", "train steps", "last train loss", "evals", "last eval step", "valid loss"]
    cols += [eps_col("Sink_1", e) for e in all_eps]
    if any_star:
        cols += [eps_col("Sink_*", e) for e in all_eps]
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
    rep.table(Table("runs", "Training runs at their last evaluation (Sink in %)", cols, rows, fmts, stars))

    with_eval = [(label, r) for label, r in zip(labels, runs) if r.eval is not None and len(r.eval.step)]
    compare = _compare_runs(rep, with_eval, eps) if len(with_eval) >= 2 else None

    for label, r in zip(labels, runs):
        curves = _one_run(rep, label, r, eps)
        text = emergence_finding(label, r, eps)
        if text:
            rep.finding(text, compare or curves)


def emergence_finding(label, r, eps):
    """The finding of one pre-training run: whether and when a thresholded sink emerged by emergence.py's
    persistent rule (Sink_1^eps above 0 %, some head's alpha_1 above eps, from some evaluation to the last one;
    a crossing that falls back to 0 % is named, not counted), or that none did in the steps and tokens run, with
    mean alpha_1 against uniform attention and the paper's reference."""
    got = sink_series(r, eps)
    if got is None:
        return None
    steps, sink, fed = got
    star = "*" if r.eval.proxy else ""
    last, n_last = int(steps[-1]), tokens_at(r, int(steps[-1]))
    at_last = f"{float(sink[-1]):.2f} %{star} at step {last}"
    where = f", measured {fed}" if fed else ""
    onset = persistent_onset(sink, 0.0, strict=True)
    above = np.nonzero(sink > 0)[0]
    if onset == 0 and int(steps[0]) == 0:
        text = (f"{label}: Sink_1^{eps:g} above 0 from initialisation (step 0) to the last evaluation, {at_last} "
                f"({tokens_text(n_last)} tokens){where}")
    elif onset is not None:
        s = int(steps[onset])
        text = (f"{label}: a thresholded sink emerged at step {s} ({tokens_text(tokens_at(r, s))} tokens): "
                f"Sink_1^{eps:g} above 0 from there to the last evaluation, {at_last}{where}")
    elif len(above):
        text = (f"{label}: no thresholded sink emerged in {last} steps ({tokens_text(n_last)} tokens): "
                f"Sink_1^{eps:g} was above 0 at {len(above)} of {len(steps)} evaluations (first at step "
                f"{int(steps[above[0]])}) but is {at_last}, a transient crossing{where}")
    else:
        text = (f"{label}: no thresholded sink emerged in {last} steps ({tokens_text(n_last)} tokens): "
                f"Sink_1^{eps:g} = 0.00 %{star} at every evaluation{where}")
    m = mean_alpha1(r)
    if m is not None:
        text += f"; mean alpha_1 {float(m[2][-1]):.3f} against {m[3]:.3f} for uniform attention"
    return text + f" ({PAPER_EMERGENCE})."


def _compare_runs(rep, with_eval, eps):
    """The runs side by side; returns the anchor of the comparison figure (None when not drawn)."""
    rep.heading(3, "Side by side")
    series = []
    for label, r in with_eval:
        i = match_eps(r.eval.eps, eps)
        if i is None:
            rep.skipped(f"run {label}", f"no Sink_1 at eps={eps:g} (the side-by-side comparison)")
            continue
        series.append((label, r.eval, i))
    if len(series) < 2:
        return None
    steps = sorted({int(s) for _, ev, _ in series for s in ev.step})
    cols = ["step"] + [f"valid loss {lab}" for lab, _, _ in series] + \
        [f"{eps_col('Sink_1', eps)} {lab}" for lab, _, _ in series]
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
                    cols, rows, fmts, stars))
    names = ", ".join(lab for lab, _, _ in series)
    anchor = rep.figure("runs_compare", f"Valid loss and Sink_1^{eps:g} over training", f"Runs {names}.",
                        figures.runs_compare, series, eps)
    alpha1 = [s for s in (_alpha1_series(label, r) for label, r in with_eval) if s is not None]
    if len(alpha1) >= 2:
        rep.figure("runs_mean_alpha1", "Mean alpha_1 against uniform attention", f"Runs {names}: mean alpha_1 "
                   "over layers and heads over training; dotted: uniform causal attention (H_T / T).",
                   figures.alpha1_over_training, alpha1)
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
        rep.figure("runs_massive_ratio", "Massive-activation ratio per layer", f"Runs {names}: ||h_1|| / mean "
                   "||h_t>1|| per layer at the last evaluation (Fig. 7).", figures.per_layer, curves,
                   "massive-activation ratio")
    return anchor


def _one_run(rep, label, r, eps):
    """One run's tables and figures; returns the anchor of its loss and Sink curves."""
    rep.heading(3, f"Run {label}")
    where = f"run {label}"
    for note in r.notes:  # also in the page's notes (report.build_report)
        rep.para(f"Note: {note}.", cls="note")
    tr, ev = r.train, r.eval
    caption = f"Run {label}, file {Path(r.file).name}"
    if tr is not None and "step" in tr:
        cols = [c for c in tr]
        rows = [[_csv_num(tr[c][k]) for c in cols] for k in range(len(tr["step"]))]
        rep.table(Table(f"run_{label}_train", f"Run {label}: training log, one row per step", cols, rows,
                        inline=False))
    if ev is None:
        rep.skipped(where, "no /runs/<run>/eval with step, valid_loss, sink (evaluation table and figures)")
        if tr is not None and "loss" in tr and "step" in tr:
            return rep.figure(f"run_{label}_curves", f"{label}: training loss", caption + ".",
                              figures.run_curves, tr, None, 0)
        return None
    ei = eps_index(ev.eps, eps)
    cols = ["step", "valid loss"] + [eps_col("Sink_1", e) for e in ev.eps]
    if ev.sink_star is not None:
        cols += [eps_col("Sink_*", e) for e in ev.eps]
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
                    fmts, stars))
    anchor = rep.figure(f"run_{label}_curves", f"{label}: loss and Sink_1^eps over training",
                        caption + ": training and validation loss, Sink_1^eps at each threshold (Fig. 4 middle).",
                        figures.run_curves, tr, ev, ei)
    last = f"step {int(ev.step[-1])}"
    curves = []
    if ev.massive_ratio is not None:
        curves.append(("h (block output)", np.arange(ev.massive_ratio.shape[1]), ev.massive_ratio[-1], "o-"))
    if ev.massive_ratio_pre_norm is not None:
        curves.append(("before the block's last norm", np.arange(ev.massive_ratio_pre_norm.shape[1]),
                       ev.massive_ratio_pre_norm[-1], "s--"))
    if curves:
        rep.figure(f"run_{label}_massive_ratio", f"{label}: massive-activation ratio per layer",
                   f"{caption}, {last}: ||h_1|| / mean ||h_t>1|| per layer (Fig. 7).", figures.per_layer, curves,
                   "massive-activation ratio")
    else:
        rep.skipped(f"run {label}", "no massive_ratio dataset (massive-activation ratio per layer)")
    if ev.alpha is not None:
        a = ev.alpha[-1]
        rep.figure(f"run_{label}_alpha1", f"{label}: alpha_1 per layer and head",
                   f"{caption}, {last} (Figs. 19-24).", figures.head_layer_heatmap, a, list(range(a.shape[0])),
                   "alpha_1")
    series = _alpha1_series(label, r)
    if series is not None:
        rep.figure(f"run_{label}_mean_alpha1", f"{label}: mean alpha_1 against uniform attention",
                   f"{caption}, T={probe_length(r)}: mean alpha_1 over layers and heads over training; dotted: "
                   "uniform causal attention (H_T / T).", figures.alpha1_over_training, [series])
    if ev.alpha_star is not None:
        a = ev.alpha_star[-1]
        rep.figure(f"run_{label}_alpha_star", f"{label}: attention to the bias position",
                   f"{caption}, {last}: alpha of the bias position (sink token / k*) per layer and head.",
                   figures.head_layer_heatmap, a, list(range(a.shape[0])), "alpha_*")
    return anchor


def _alpha1_series(label, r):
    """(label, steps, mean alpha_1, uniform baseline) of a run's evaluations (results.mean_alpha1), or None."""
    m = mean_alpha1(r)
    if m is None:
        return None
    what, steps, values, baseline = m
    return (f"{label} ({what})" if what else label), steps, values, baseline


def _csv_num(v):
    return int(v) if isinstance(v, np.integer) else float(v)
