"""Section "The paper's figures": those that compare runs or models (each one PNG, with its numbers as a CSV
table beside it):

  Fig. 4 left       Sink_1^eps against the parameter count: every pre-training run (last evaluation) and every
                    model measured on natural text (mean over its domains), from the n_params attribute that
                    sinklab-pretrain (/runs/<run>) and sinklab-probe (/models/<model>/<input>/<domain>) write
  Fig. 5 middle     Sink_k^eps at every position k for the prefix-LM cells (jobs/pretrain/sec6_prefix;
                    eval/sink_pos, the per-position metric of probe/sink_metrics.hpp)
  Fig. 5 right      Sink_1^eps and the last train/valid loss against the training-token budget
                    (jobs/pretrain/sec5_data_budget; the budget is the run's max-train-tokens)
  Fig. 28           the same cells over training: train/valid loss and Sink_1^eps against steps, one per budget
  Fig. 6            Sink_1^eps against the window size w (jobs/pretrain/sec6_window and the full-causal default,
                    w = its context): on the absolute first token, and relative to each query's window start
                    (eval/sink_k_window) where the probe measured it (probe length >= w); valid loss beside it
  Fig. 9            Sink_1^eps per Pile domain for every model measured on natural text in >= 2 domains, at
                    each threshold of the files (the paper: 0.2, 0.3, 0.4)

Cells are matched to runs by their job file's run-name, as the paper's tables match them. A figure without
data is not drawn: the page lists it under "Skipped" with the reason.
"""
from __future__ import annotations

import math

import numpy as np

from analysis import figures
from analysis.stats.bridge import is_bridge_run
from analysis.results import ini_settings, is_bbm, is_finetuning, match_eps
from analysis.tables import Table


def _int_attr(attrs, key):
    if key not in attrs:
        return None
    try:
        return int(np.asarray(attrs[key]).reshape(-1)[0])
    except (TypeError, ValueError):
        return None


def _run_setting(run, job, key, default=None):
    """A setting of the run as it ran (its config attribute), else its job file's, else `default`."""
    value = ini_settings(run.config).get(key, job.get(key))
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default


def _with_eval(cells, eps):
    """The (cell, job, run, eps index) whose run has evaluations with threshold eps."""
    out = []
    for cell, job, run in cells:
        ev = run.eval
        i = None if ev is None or not len(ev.step) else match_eps(ev.eps, eps)
        if i is not None:
            out.append((cell, job, run, i))
    return out


def fig4_left(rep, runs, entries, eps):
    rows = []  # [name, kind, n_params, n_params_non_embedding, Sink_1]
    for r in runs:
        if is_bbm(r) or is_finetuning(r) or is_bridge_run(r):  # another task; a fine-tuned model is its base
            continue                                              # model's size; the toy-to-text set: its section
        n, ev = _int_attr(r.attrs, "n_params"), r.eval
        i = None if ev is None or not len(ev.step) else match_eps(ev.eps, eps)
        if n is not None and i is not None:
            rows.append([r.name, "pre-training run", n, _int_attr(r.attrs, "n_params_non_embedding"),
                         float(ev.sink[-1, i])])
    by_model = {}
    for e in entries:
        if e.input == "natural" and _int_attr(e.attrs, "n_params") is not None and match_eps(e.eps, eps) is not None:
            by_model.setdefault(e.model, []).append(e)
    for model, es in sorted(by_model.items()):
        rows.append([model, f"model, natural text ({len(es)} domain(s))", _int_attr(es[0].attrs, "n_params"),
                     _int_attr(es[0].attrs, "n_params_non_embedding"),
                     float(np.mean([e.sink[match_eps(e.eps, eps)] for e in es]))])
    if not rows:
        rep.skipped("Fig. 4 left (Sink_1 vs parameter count)", "no run or natural-text model entry with an "
                    "n_params attribute (sinklab-pretrain and sinklab-probe write it)")
        return
    col = f"Sink_1^{eps:g} (%)"
    rep.table(Table("fig4_left", f"Fig. 4 left: {col} against the parameter count",
                    ["model or run", "kind", "parameters", "parameters without embeddings", col], rows,
                    {col: ".2f"}))
    series = []
    for kind, style in (("pre-training run", "o"), ("model", "s")):
        pts = [r for r in rows if r[1].startswith(kind)]
        if pts:
            series.append((kind + "s", [r[2] for r in pts], [r[4] for r in pts], style))
    rep.figure("fig4_left", f"Fig. 4 left: {col} against the parameter count", "Runs: last evaluation; models: "
               "mean over natural-text domains.", figures.xy_panels,
               [dict(title="", xlabel="parameters", ylabel=col, logx=True, series=series,
                     annotate=[(r[0], r[2], r[4]) for r in rows])])


def fig5_right_and_28(rep, runs, eps, index):
    cells = _with_eval(index.cell_runs("sec5_data_budget", runs), eps)
    if not cells:
        rep.skipped("Figs. 5 right and 28 (Sink vs training-data budget)", "no run of a jobs/pretrain/"
                    "sec5_data_budget cell with evaluations at this eps")
        return
    cells.sort(key=lambda c: _run_setting(c[2], c[1], "max-train-tokens", math.inf))
    col = f"Sink_1^{eps:g} (%)"
    rows = []
    for cell, job, run, i in cells:
        tr = run.train or {}
        last_train = float(tr["loss"][-1]) if "loss" in tr and len(tr["loss"]) else None
        rows.append([cell.label, run.name, _run_setting(run, job, "max-train-tokens"), int(run.eval.step[-1]),
                     float(run.eval.sink[-1, i]), float(run.eval.valid_loss[-1]), last_train])
    rep.table(Table("fig5_right", f"Fig. 5 right: {col} and loss against the training-token budget (last "
                    "evaluation)", ["cell", "run", "training tokens", "step", col, "valid loss", "train loss"],
                    rows, {col: ".2f", "valid loss": ".4f", "train loss": ".4f", "training tokens": ".4g"}))
    budgets = [r[2] for r in rows]
    rep.figure("fig5_right", f"Fig. 5 right: {col} and loss against the training-token budget", "The last "
               "train/valid loss; fixed steps and batch: smaller budgets repeat their data.", figures.xy_panels, [
                   dict(xlabel="training tokens", ylabel=col, logx=True,
                        series=[("", budgets, [r[4] for r in rows], "o-")]),
                   dict(xlabel="training tokens", ylabel="loss", logx=True,
                        series=[("valid loss", budgets, [r[5] for r in rows], "o-"),
                                ("train loss", budgets, [r[6] for r in rows], "s--")])])
    loss_panels, sink_panels = [], []
    for cell, job, run, i in cells:
        tr, ev = run.train or {}, run.eval
        series = [("valid loss", ev.step, ev.valid_loss, "o-")]
        if "loss" in tr and "step" in tr:
            series.insert(0, ("train loss", np.asarray(tr["step"]) + 1, tr["loss"], "-"))
        title = f"{cell.label} (ran with {_run_setting(run, job, 'max-train-tokens', math.nan):.3g})"
        loss_panels.append(dict(title=title, xlabel="step", ylabel="loss", series=series))
        sink_panels.append(dict(title=title, xlabel="step", ylabel=col, series=[("", ev.step, ev.sink[:, i], "o-")]))
    rep.figure("fig28", f"Fig. 28: loss and {col} over training per token budget", f"Train/valid loss (top) and "
               f"{col} (bottom) over training, one column per training-token budget.", figures.xy_panels,
               loss_panels + sink_panels, ncols=len(cells))


def fig5_middle(rep, runs, eps, index):
    cells = [c for c in _with_eval(index.cell_runs("sec6_prefix", runs), eps) if c[2].eval.sink_pos is not None]
    if not cells:
        rep.skipped("Fig. 5 middle (Sink per position, prefix LM)", "no run of a jobs/pretrain/sec6_prefix cell "
                    "with eval/sink_pos (written by sinklab-pretrain for prefix-length > 1)")
        return
    col = f"Sink_k^{eps:g} (%)"
    series, rows = [], []
    for cell, job, run, i in cells:
        sp = run.eval.sink_pos[-1, :, i]
        k = np.arange(1, len(sp) + 1)
        series.append((cell.label, k, sp, "o-"))
        rows.append([cell.label, run.name, int(_run_setting(run, job, "prefix-length", 1)), int(run.eval.step[-1]),
                     int(k[np.argmax(sp)]), float(sp.max()), ", ".join(f"{v:.1f}" for v in sp)])
    rep.table(Table("fig5_middle", f"Fig. 5 middle: {col} at every position k (last evaluation; per-position "
                    "alpha, probe/sink_metrics.hpp)", ["cell", "run", "prefix p", "step", "k of the largest",
                                                       "largest (%)", f"{col}, k = 1..T"], rows,
                    {"largest (%)": ".2f"}))
    rep.figure("fig5_middle", f"Fig. 5 middle: {col} at every position, prefix LMs", "Last evaluation: the sink "
               "sits among the first p tokens.", figures.xy_panels,
               [dict(xlabel="position k", ylabel=col, series=series)])


def fig6(rep, runs, eps, index):
    cells = _with_eval(index.cell_runs("sec6_window", runs), eps)
    if not cells:
        rep.skipped("Fig. 6 (Sink vs window size)", "no run of a jobs/pretrain/sec6_window cell with evaluations "
                    "at this eps")
        return
    rows = []
    for cell, job, run, i in cells:
        w = _run_setting(run, job, "attn-window", 0) or _run_setting(run, job, "context")
        ev = run.eval
        rel = None if ev.sink_k_window is None else float(ev.sink_k_window[-1, 0, i])
        rows.append([cell.label, run.name, int(w), int(ev.step[-1]), float(ev.sink[-1, i]), rel,
                     float(ev.valid_loss[-1])])
    rows.sort(key=lambda r: r[2])
    a, b = f"Sink_1^{eps:g} (%)", f"Sink_1^{eps:g} relative to the window start (%)"
    rep.table(Table("fig6", f"Fig. 6: {a} on the absolute first token and relative to each query's window "
                    "start, against the window size w (last evaluation)",
                    ["cell", "run", "window w", "step", a, b, "valid loss"], rows,
                    {a: ".2f", b: ".2f", "valid loss": ".4f"},
                    note="The relative metric needs a probe length >= w (blank otherwise)."))
    ws = [r[2] for r in rows]
    series = [("absolute first token", ws, [r[4] for r in rows], "o-")]
    rel = [(r[2], r[5]) for r in rows if r[5] is not None]
    if rel:
        series.append(("first token of each window", [x for x, _ in rel], [y for _, y in rel], "s--"))
    rep.figure("fig6", f"Fig. 6: {a} against the window size", "On the absolute first token and on each "
               "query's window start (middle, right); valid loss beside it.", figures.xy_panels, [
                   dict(xlabel="window size w", ylabel=f"Sink_1^{eps:g} (%)", logx=True, series=series),
                   dict(xlabel="window size w", ylabel="valid loss", logx=True,
                        series=[("", ws, [r[6] for r in rows], "o-")])])


def fig9(rep, entries):
    by_model = {}
    for e in entries:
        if e.input == "natural":
            by_model.setdefault(e.model, {})[e.domain] = e
    models = {m: d for m, d in by_model.items() if len(d) >= 2}
    if not models:
        rep.skipped("Fig. 9 (Sink per domain)", "no model measured on natural text in two or more domains")
        return
    domains = sorted({d for ds in models.values() for d in ds})
    all_eps = sorted({x for ds in models.values() for e in ds.values() for x in e.eps if not math.isnan(x)})
    panels, rows = [], []
    for x in all_eps:
        series = []
        for m, ds in sorted(models.items()):
            ys = [np.nan if d not in ds or match_eps(ds[d].eps, x) is None
                  else float(ds[d].sink[match_eps(ds[d].eps, x)]) for d in domains]
            series.append((m, np.arange(len(domains)), ys, "o"))
            rows.append([m, f"{x:g}"] + ys)
        panels.append(dict(title=f"eps = {x:g}", xlabel="domain", ylabel=f"Sink_1^{x:g} (%)", xticks=domains,
                           ylim=(-2, 102), series=series))
    rep.table(Table("fig9", "Fig. 9: Sink_1^eps (%) per natural-text domain", ["model", "eps"] + domains, rows,
                    {d: ".2f" for d in domains}))
    rep.figure("fig9", "Fig. 9: Sink_1^eps per natural-text domain", "One panel per threshold.", figures.xy_panels,
               panels)


def write_section(rep, data):
    """Section "The paper's figures": Figs. 4 left, 5 middle/right, 28, 6 and 9 where the files have their data."""
    runs, entries, eps, index = data.runs, data.entries, data.eps, data.job_index
    before, mark = len(rep.figures), len(rep.blocks)
    fig4_left(rep, runs, entries, eps)
    fig5_middle(rep, runs, eps, index)
    fig5_right_and_28(rep, runs, eps, index)
    fig6(rep, runs, eps, index)
    fig9(rep, entries)
    if len(rep.figures) > before:  # the heading goes before what was drawn; without a figure, no section
        rep.section("The paper's figures", anchor="paper-figures")
        rep.blocks.insert(mark, rep.blocks.pop())
