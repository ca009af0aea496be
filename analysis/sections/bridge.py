"""Section "From the toy to text" (issue 46): when, in tokens seen, small LLaMA-style models on real text grow a
sink (jobs/bridge: sizes from the demo's tiny shape down, rows that start with BOS against the paper's packed
rows, two learning rates, several seeds a cell, each run to one token budget, evaluated at a log-spaced grid),
with the statistics of analysis/stats/bridge.py.

Shows, per learning rate, Sink_1^eps and mean alpha_1 against tokens seen (the mean over seeds with its 95 %
interval, uniform attention's alpha_1 as the reference); the table of cells (onsets in tokens, the fraction of
seeds with one, the values at the budget); BOS first against packed at the same tokens seen, with intervals; the
fit of onset tokens against model size where there are onsets, beside `python -m analysis.plan`'s sizing of the
60M job file (jobs/pretrain/60m_default.ini) that a GPU run would use to confirm it. The findings say plainly
what was found, "no sink within N tokens at these sizes" included.
"""
import argparse
import math

import numpy as np

from analysis import figures
from analysis.stats.bridge import (COMPARE_RULE, CURVE_RULE, ONSET_RULE, ONSET_SHARE, bridge_cells, compare_rows,
                             difference_interval, fit_onsets)
from analysis.results import tokens_text
from analysis.tables import Table

TITLE = "From the toy to text"
PAPER = ("the paper's 60M LLaMA-style model on the Pile grows its sink after ~1-2k steps of 1M tokens, 1-2 B tokens "
         "(Sec. 4, Fig. 4 middle), and with 5x-100x less data at the same steps, none (Sec. 5, Fig. 5 right)")
PLAN_JOB = "jobs/pretrain/60m_default.ini"


def _clip(interval, low, high):
    """(mean, lo, hi) with the interval's ends clipped to the measure's range [low, high] (a t interval over
    a few seeds can reach below 0 %)."""
    m, lo, hi = interval
    return m, (lo if math.isnan(lo) else max(lo, low)), (hi if math.isnan(hi) else min(hi, high))


def _ci(m, lo, hi, fmt):
    if math.isnan(m):
        return "—"
    return f"{m:{fmt}}" if math.isnan(lo) else f"{m:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def _signed(d, lo, hi, fmt=".3f"):
    if math.isnan(d):
        return "—"
    return f"{d:+{fmt}}" if math.isnan(lo) else f"{d:+{fmt}} [{lo:+{fmt}}, {hi:+{fmt}}]"


def _tokens(x, censor):
    """A median or interval end in tokens; +inf: censored, "> censor" (BridgeCell.censor_tokens)."""
    if math.isnan(x):
        return "—"
    return f"> {tokens_text(censor)}" if math.isinf(x) else tokens_text(int(x))


def _onset(s):
    c = s.censor_tokens
    return f"{_tokens(s.median_onset, c)} [{_tokens(s.median_ci[0], c)}, {_tokens(s.median_ci[1], c)}]"


def _fraction(s):
    return f"{s.sinks}/{s.n} [{s.sink_ci[0]:.2f}, {s.sink_ci[1]:.2f}]"


def _params(n):
    return "?" if not n else (f"{n / 1e6:.2f} M" if n >= 1e5 else f"{n:,}")


def _rows_text(rows):
    return "BOS first" if rows == "bos" else "packed"


def _size(s):
    """d128 (1.85 M; 0.80 M non-embedding)"""
    return f"{s.size} ({_params(s.n_params)}; {_params(s.n_params_non_embedding)} non-embedding)"


def _label(s):
    return f"{s.size}, {_rows_text(s.rows)}, lr {s.lr}"


def write_section(rep, data):
    cells, notes = bridge_cells(data.runs, data.eps)
    for what, why in notes:
        rep.skipped(what, why)
    if not cells:
        if not notes:
            rep.skipped(TITLE, "no bridge run (run-name bridge.<scale>.<size>_<rows>_lr<lr>.s<seed>) in the files")
        return
    eps = data.eps
    rep.section(TITLE, anchor="bridge")
    runs = [r for s in cells for r in s.runs]
    seeds = sorted({s.n for s in cells})
    budget = max(r.last_tokens for r in runs)
    stopped = sum(r.stopped == "budget" for r in runs)
    rep.para(f"Small LLaMA-style models on real text (jobs/bridge): {len(runs)} runs of {len(cells)} cell(s) "
             f"({', '.join(sorted({s.scale for s in cells}))}), "
             f"sizes {', '.join(dict.fromkeys(_size(s) for s in cells))}, "
             f"rows that start with BOS and packed rows that start anywhere, learning rates "
             f"{', '.join(dict.fromkeys(s.lr for s in cells))}; {'-'.join(map(str, (seeds[0], seeds[-1]) if len(seeds) > 1 else seeds))} "
             f"seeds a cell. Each run trains to a budget of {tokens_text(budget)} tokens and is evaluated at a "
             f"log-spaced grid of tokens seen; {stopped} of {len(runs)} runs reached it (bridge_status.json), the "
             f"others are shown as far as they got. {PAPER[0].upper() + PAPER[1:]}.")
    figs = _figures(rep, cells, eps)
    table = _cell_table(rep, cells, eps)
    comparisons = compare_rows(cells)
    cmp_anchor = _comparison_table(rep, comparisons, eps) if comparisons else None
    fit, why = fit_onsets(cells)
    plan_text = _plan_text(fit)
    rep.heading(3, "Onset against model size")
    rep.para((f"log10(onset tokens) = {fit.intercept:.2f} + {fit.slope:.2f} log10(non-embedding parameters), a "
              f"least-squares line "
              f"over {len(fit.points)} runs with an onset at {fit.sizes} sizes. " if fit else f"No fit: {why}. ") +
             plan_text)
    rep.heading(3, "How these numbers are computed")
    rep.bullets([f"onset: {ONSET_RULE.format(eps=f'{eps:g}')}; in tokens seen at that evaluation", CURVE_RULE,
                 "per cell: the fraction of seeds with an onset, with its 95 % Wilson interval; the median onset (the "
                 "lower median, a run without one counted as +inf) with the percentile interval of its exact bootstrap "
                 "distribution (an end past a censored run reads \"> N\", N the earliest last tokens of those runs)",
                 COMPARE_RULE,
                 "onset against size: log10(onset tokens) against log10(non-embedding parameters, the run's "
                 "n_params_non_embedding, Kaplan et al.'s count) by least squares over the runs with an onset, when at "
                 "least two sizes have one"])
    _long_forms(rep, cells, comparisons)

    rep.finding(_lead(cells, eps, budget), table, lead=True)
    for line in _comparison_lines(comparisons):
        rep.finding(line, cmp_anchor)
    for line in _lr_lines(cells) + _trend_lines(cells):
        rep.finding(line, figs[0] if figs else table)
    rep.finding(("Onset against size: " + (f"log10(tokens) = {fit.intercept:.2f} + {fit.slope:.2f} log10(non-embedding "
                 f"params) "
                 f"over {len(fit.points)} runs at {fit.sizes} sizes. " if fit else f"no fit ({why}). ") + plan_text),
                table)


def _figures(rep, cells, eps):
    anchors = []
    for lr in dict.fromkeys(s.lr for s in cells):
        group = [s for s in cells if s.lr == lr]
        sink_series, alpha_series = [], []
        for s in group:
            label = f"{s.scale} {s.size} ({_params(s.n_params_non_embedding)} non-emb.), {_rows_text(s.rows)}"
            ls = "-" if s.rows == "bos" else "--"
            m, lo, hi = (np.array(v) for v in zip(*[_clip(x, 0.0, 100.0) for x in s.sink]))
            sink_series.append((label, s.tokens, m, lo, hi, ls))
            m, lo, hi = (np.array(v) for v in zip(*[_clip(x, 0.0, 1.0) for x in s.alpha1]))
            alpha_series.append((label, s.tokens, m, lo, hi, ls))
        uniform = group[0].uniform
        top = max([float(np.nanmax(hi)) for *_, hi, _ in sink_series if np.isfinite(hi).any()] +
                  [float(np.nanmax(m)) for _, _, m, *_ in sink_series])
        panels = [dict(ylabel=f"Sink_1^{eps:g} (%)", series=sink_series, title=f"Sink_1^{eps:g}",
                       ylim=(-1, max(10.0, 1.1 * top))),
                  dict(ylabel="mean alpha_1 over layers and heads", series=alpha_series,
                       hlines=[(f"uniform attention ({uniform:.3f})", uniform)], title="mean alpha_1")]
        seeds = "-".join(str(n) for n in sorted({s.n for s in group}))
        anchors.append(rep.figure(f"bridge_lr{lr}", f"From the toy to text: the sink against tokens seen, lr {lr}",
                                  f"Learning rate {lr}. Each line is a cell's mean over its {seeds} seeds, the band "
                                  f"its 95 % Student-t interval (clipped at 0); solid: rows that start with BOS (measured on probe "
                                  f"inputs that start with BOS), dashed: packed rows (no BOS). Left: Sink_1^{eps:g}, "
                                  f"the share of heads whose alpha_1 exceeds {eps:g}; right: mean alpha_1 over layers "
                                  f"and heads, dotted: uniform attention's H_T / T. Tokens on a log axis.",
                                  figures.band_panels, panels))
    return anchors


def _cell_table(rep, cells, eps):
    cols = ["scale", "size", "parameters", "non-embedding", "rows", "lr", "seeds", "tokens at the last evaluation",
            "seeds with an onset [95 % Wilson]", "median onset, tokens [95 % bootstrap]",
            f"Sink_1^{eps:g} at the last evaluation (%) [95 % t]", "mean alpha_1 at the last evaluation [95 % t]",
            "uniform alpha_1", "valid loss (mean)", "runs stopped"]
    rows = []
    for s in cells:
        stopped = {}
        for r in s.runs:
            stopped[r.stopped or "unknown"] = stopped.get(r.stopped or "unknown", 0) + 1
        rows.append([s.scale, s.size, _params(s.n_params), _params(s.n_params_non_embedding), _rows_text(s.rows), s.lr,
                     s.n,
                     tokens_text(int(s.tokens[-1])), _fraction(s), _onset(s), _ci(*_clip(s.sink[-1], 0, 100), ".2f"),
                     _ci(*_clip(s.alpha1[-1], 0, 1), ".4f"), s.uniform, float(np.mean([r.valid_loss[-1] for r in s.runs])),
                     ", ".join(f"{k} {v}" for k, v in stopped.items())])
    return rep.table(Table("bridge", f"From the toy to text: each cell at its last common evaluation (eps = {eps:g})",
                           cols, rows, {"uniform alpha_1": ".4f", "valid loss (mean)": ".3f"},
                           note="Intervals are 95 %, clipped to the measure's range where a t interval over a few "
                                "seeds reaches past it (the CSVs keep the unclipped ends). An onset \"> N\": none by N "
                                "tokens (censored). Every run's numbers are in bridge_runs.csv, every cell's curve in "
                                "bridge_curves.csv."))


def _columns(tokens, most=5):
    """Up to `most` evaluations spread over a log axis, the last included."""
    if len(tokens) <= most:
        return list(range(len(tokens)))
    picks = np.unique(np.round(np.linspace(0, len(tokens) - 1, most)).astype(int))
    return [int(i) for i in picks]


def _comparison_table(rep, comparisons, eps):
    ref = max(comparisons, key=lambda c: len(c.tokens))
    picks = [int(ref.tokens[i]) for i in _columns(ref.tokens)]
    cols = ["scale", "size", "lr", "seeds (BOS / packed)"] + \
           [f"alpha_1 at {tokens_text(t)} tokens" for t in picks] + [f"Sink_1^{eps:g} (%) at the last"]
    rows = []
    for c in comparisons:
        row = [c.scale, c.size, c.lr, f"{c.bos.n} / {c.packed.n}"]
        for t in picks:
            hit = np.nonzero(c.tokens == t)[0]
            row.append(_signed(*c.alpha1[hit[0]], ".4f") if len(hit) else "—")
        row.append(_signed(*c.sink[-1], ".2f"))
        rows.append(row)
    return rep.table(Table("bridge_bos_vs_packed", "BOS first minus packed at the same tokens seen: mean alpha_1 "
                           "(and Sink_1 at the last evaluation), difference of the means [95 % conservative Welch]",
                           cols, rows, note="Positive: more attention on the first token with BOS first. Every "
                                            "evaluation's difference is in bridge_bos_vs_packed_all.csv."))


def _long_forms(rep, cells, comparisons):
    cols = ["run", "scale", "cell", "size", "parameters", "non-embedding parameters", "rows", "lr", "seed", "evaluations", "tokens at the last",
            "onset tokens", "onset tokens (Sink_1 above 0 %)", "Sink_1 at the last (%)", "mean alpha_1 at the last", "uniform alpha_1", "valid loss",
            "measured on", "stopped"]
    rows = [[r.run.name, r.scale, r.cell, r.size, r.n_params, r.n_params_non_embedding, r.rows, r.lr, r.seed, len(r.tokens), r.last_tokens,
             r.onset_tokens, r.onset_any_tokens, float(r.sink[-1]), float(r.alpha1[-1]), r.uniform, float(r.valid_loss[-1]), r.measured_on,
             r.stopped or "unknown"] for s in cells for r in s.runs]
    rep.table(Table("bridge_runs", "From the toy to text: every run", cols, rows, inline=False))
    cols = ["scale", "cell", "seeds", "tokens", "Sink_1 mean (%)", "low", "high", "mean alpha_1", "low", "high",
            "uniform alpha_1"]
    rows = [[s.scale, s.cell, s.n, int(t), *s.sink[i], *s.alpha1[i], s.uniform]
            for s in cells for i, t in enumerate(s.tokens)]
    rep.table(Table("bridge_curves", "From the toy to text: every cell's mean curves with their 95 % t intervals",
                    cols, rows, inline=False))
    if comparisons:
        cols = ["scale", "size", "lr", "tokens", "alpha_1 difference", "low", "high", "Sink_1 difference (%)", "low",
                "high"]
        rows = [[c.scale, c.size, c.lr, int(t), *c.alpha1[i], *c.sink[i]] for c in comparisons
                for i, t in enumerate(c.tokens)]
        rep.table(Table("bridge_bos_vs_packed_all", "BOS first minus packed at every common evaluation", cols, rows,
                        inline=False))


def _lead(cells, eps, budget):
    runs = [r for s in cells for r in s.runs]
    with_onset = [r for r in runs if r.has_sink]
    sizes = ", ".join(dict.fromkeys(_size(s) for s in cells))
    alpha = [(s, s.alpha1[-1]) for s in cells]
    lo_cell, lo = min(alpha, key=lambda x: x[1][0])
    hi_cell, hi = max(alpha, key=lambda x: x[1][0])
    u = cells[0].uniform
    below = [s for s in cells if s.alpha1[-1][2] < u]
    above = [s for s in cells if s.alpha1[-1][1] > u]
    spread = (f"mean alpha_1 at the last evaluation ranges from {lo[0]:.4f} ({_label(lo_cell)}) to {hi[0]:.4f} "
              f"({_label(hi_cell)}) against uniform attention's {u:.4f}: below it at 95 % in {len(below)} of "
              f"{len(cells)} cells, above it in {len(above)}, undecided in {len(cells) - len(below) - len(above)}" +
              (" (the first token gets less than its uniform share: the opposite of a sink)"
               if len(below) > len(cells) / 2 else ""))
    if not with_onset:
        return (f"From the toy to text: no sink within {tokens_text(budget)} tokens at these sizes ({sizes}): in none "
                f"of {len(runs)} runs (every cell x seed) does Sink_1^{eps:g} stay above {ONSET_SHARE:g} % to the last "
                f"evaluation; "
                f"{spread}. {PAPER[0].upper() + PAPER[1:]}.")
    parts = [f"{s.size}, {_rows_text(s.rows)}, lr {s.lr}: {_fraction(s)}, median {_onset(s)}" for s in cells if s.sinks]
    return (f"From the toy to text: a sink (Sink_1^{eps:g} above {ONSET_SHARE:g} % to the last evaluation) in {len(with_onset)} of "
            f"{len(runs)} runs within {tokens_text(budget)} tokens; seeds with an onset and the median onset in tokens: "
            f"{'; '.join(parts)}; the other cells none; {spread}. {PAPER[0].upper() + PAPER[1:]}.")


def _comparison_lines(comparisons):
    """BOS first against packed at the last common evaluation, one line for all pairs."""
    if not comparisons:
        return ["BOS first against packed: no (size, lr) with both kinds of rows among the files' runs."]
    parts, more, less = [], 0, 0
    for c in comparisons:
        d, lo, hi = c.alpha1[-1]
        if not math.isnan(lo):
            more += lo > 0
            less += hi < 0
        parts.append(f"{c.size} lr {c.lr}: {_signed(d, lo, hi, '.4f')}")
    n = len(comparisons)
    verdict = (f"BOS first puts more attention on the first position than packed rows in {more} of {n} pairs and less "
               f"in {less} at 95 %" + (f", undecided in {n - more - less}" if n > more + less else ""))
    t = tokens_text(int(max(c.tokens[-1] for c in comparisons)))
    return [f"BOS first against packed at the same tokens seen (up to {t}): {verdict}; mean alpha_1 difference at the "
            f"last common evaluation {'; '.join(parts)}."]


def _lr_lines(cells):
    """The larger learning rate against the smaller at the same size and rows, at the last common evaluation."""
    lrs = sorted(dict.fromkeys(s.lr for s in cells), key=float)
    if len(lrs) < 2:
        return []
    low, high = lrs[0], lrs[-1]
    parts = []
    for a in [s for s in cells if s.lr == high]:
        b = next((s for s in cells if s.lr == low and (s.scale, s.size, s.rows) == (a.scale, a.size, a.rows)), None)
        if b is None:
            continue
        common = sorted(set(map(int, a.tokens)) & set(map(int, b.tokens)))
        if not common:
            continue
        t = common[-1]
        d = difference_interval(a.values_at("alpha1", a.at(t)), b.values_at("alpha1", b.at(t)))
        parts.append(f"{a.size} {_rows_text(a.rows)} {_signed(*d, '.4f')}")
    if not parts:
        return []
    return [f"Learning rate {high} against {low} (the paper: a larger lr, an earlier and stronger sink, Sec. 4, Fig. 4 "
            f"right): mean alpha_1 difference at the last common evaluation, {'; '.join(parts)}."]


def _trend_lines(cells):
    """How mean alpha_1 moves over tokens seen, by kind of rows: its peak over the common evaluations and where
    it ends, against uniform attention."""
    out = []
    for rows in ("bos", "packed"):
        group = [s for s in cells if s.rows == rows]
        if not group:
            continue
        u = group[0].uniform
        peaks = [(s, int(np.nanargmax([m for m, _, _ in s.alpha1]))) for s in group]
        over = [(s, i) for s, i in peaks if s.alpha1[i][0] > u]
        top, i = max(peaks, key=lambda p: p[0].alpha1[p[1]][0])
        ends = [s.alpha1[-1][0] for s in group]
        kind = _rows_text(rows)
        out.append(f"{kind[0].upper() + kind[1:]} rows over tokens seen: the mean alpha_1 of {len(over)} of {len(group)} cells rises "
                   f"above uniform attention's {u:.4f} at some evaluation (highest {top.alpha1[i][0]:.4f}, "
                   f"{_label(top)}, at {tokens_text(int(top.tokens[i]))} tokens); at the last evaluation the cells "
                   f"read {min(ends):.4f}-{max(ends):.4f}.")
    return out


def _plan_text(fit):
    """The 60M job file as analysis.plan sizes it, and the fit's onset there (when there is a fit)."""
    try:
        from analysis.plan import read_job, row
        job = read_job(PLAN_JOB, PLAN_JOB)
    except Exception as e:  # no binary to describe the job (analysis.describe), or the file is gone
        return f"The 60M job file ({PLAN_JOB}) could not be sized here ({e}); python -m analysis.plan sizes it."
    args = argparse.Namespace(peak_tflops=989.4, link_gbps=400.0)
    cells, hours = row(job, 0.40, False, args)
    batch, steps = job.int("global-batch-tokens"), job.int("steps")
    n_all, n = job.described.get("n_params"), job.described.get("n_params_non_embedding")
    text = (f"python -m analysis.plan {PLAN_JOB}: {_params(n_all)} parameters ({_params(n)} non-embedding), {steps:,} steps of {batch:,} tokens "
            f"({tokens_text(steps * batch)}), {hours:,.1f} GPU-hours at MFU 0.40 of an H100's 989.4 TFLOP/s "
            f"(sinklab's measured MFU on one H200 is far lower: bench/gpu_runs/2026-11-28-h200)")
    if fit and n:
        at = fit.predict(n)
        text += (f"; the fit puts the onset at {tokens_text(int(at))} tokens at {_params(n)} non-embedding parameters, "
                 f"{at / batch:,.0f} of its steps ({PAPER.split(' (')[0]}): the GPU run that would confirm the "
                 f"extrapolation is this job with evaluations on the same log grid")
    else:
        text += "; with no fit there is no extrapolation for a GPU run to confirm"
    return text + "."
