"""Section 1, training runs (/runs/<run>): one row per run at its last evaluation (the layout of the
paper's Tables 2-15); with several runs, valid loss and Sink_1^eps side by side over steps, mean alpha_1
against uniform attention and the massive-activation ratio per layer; per run its training log and
evaluations, loss and Sink curves (Fig. 4), massive-activation ratio per layer (Fig. 7), alpha_1 and
alpha_* per layer and head (Figs. 19-24) and mean alpha_1 over training.
"""
import math
from pathlib import Path

import numpy as np

from analysis import figures
from analysis.results import eps_index, match_eps, mean_alpha1, probe_length
from analysis.sections.labels import eps_col, run_labels
from analysis.tables import PROXY_NOTE, Table, plain_float


def write_section(rep, data):
    """The runs' overview table, the side-by-side comparison (two or more runs with evaluations), then
    each run's tables and figures."""
    runs, eps = data.runs, data.eps
    rep.heading(2, "1. Training runs", anchor="runs")
    if not runs:
        rep.skipped("training runs", "no /runs/<run> group in the files")
        return
    labels = run_labels(runs)
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
