"""Section "Emergence atlas", the page's first: every sink-related design on Bigram-Backcopy, many seeds each,
run to convergence or to a fixed budget (jobs/atlas, issues 42 and 54), with the statistics of analysis/stats/atlas.py.

The atlas's runs are found by their run-name, atlas.<scale>.<cell>.s<seed>, among the files given (the report
takes directories too: every results.h5 under them). Each (scale, cell) is judged by two measures of the first
position's sink, Guo et al.'s BOS attention and the paper's Sink_1^eps (analysis.stats.atlas.MEASURES), each with its
own verdict: two rows of a forest plot (the median emergence step with its 95 % interval and every seed's step;
censored ones as arrows past the last step; the sink fraction with its interval beside it) and one row of the
table (the cell, its expectation with its source from cells/atlas.py, seeds, by each measure the sink
fraction, emergence step, converged value and verdict, where the sink went, copy loss, how the runs stopped). The
long forms (every cell's numbers with separate interval ends, every run's measures) are linked CSVs. The findings
quote the verdicts, and answer in lines generated from the runs the questions the atlas was built for: does the
sink move to k*/v* with KV biases (with and without BOS), is there a sink without BOS, and what does sigmoid
without normalisation show in absolute weights beside the paper's proxy scores. A cell run at two scales (the
principal cells: small and cheap) gets a row in a second table, atlas_scales (Fisher's exact test of the two
scales' counts, both scales' seeds together), and findings that say which cells differ across scales. The cells
of the paper's own setting have a section of their own after this one (analysis/sections/atlas_paper.py).
"""
import math

from analysis import figures
from analysis.stats.atlas import (FRACTION_RULE, MEAN_RULE, MEASURE_NAMES, MEASURES, MEDIAN_RULE, MOVED_RULE,
                                  SCALE_RULE, SINK_RULES, UNLEARNED_RULE, VERDICT_RULES, VERDICTS, atlas_cells,
                                  compare_scales, counted, decisive_count, step_text)
from analysis.results import is_atlas_run
from analysis.stats.bbm import KIND_TEXT
from analysis.tables import Table
from cells.atlas import ALL_CELLS

TITLE = "Emergence atlas"
# How a measure's converged value reads (Guo's: an attention share; the paper's: a share of heads, in %).
CONVERGED_TEXT = {"guo": "converged BOS attention", "paper": "converged Sink_1 (%)"}
CONVERGED_FORMAT = {"guo": ".3f", "paper": ".1f"}
MARKERS = {"guo": "D", "paper": "o"}  # the forest plot's median marker of each measure


def known_cells():
    """{name: Cell} of cells/atlas.py (every table, in order)."""
    return {c.name: c for c in ALL_CELLS}


def expectation_text(s):
    if s.spec is None:
        return "— (not in cells/atlas.py)"
    kind = KIND_TEXT.get(s.expect, s.expect.replace("_", " ")) if s.expect != "none" else "none stated"
    source = s.spec.source.strip()
    return f"{kind} ({source})" if source and source.lower() not in kind else kind


def name_of(s):
    star = " *" if any(r.proxy for r in s.runs) else ""
    return f"{s.scale} / {s.label}{star}"


def interval_text(x, lo, hi, fmt):
    return "—" if math.isnan(x) else f"{x:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def steps_text(m):
    """A MeasureStats' median emergence step with its interval."""
    return f"{step_text(m.median, m.censor_step)} [{step_text(m.median_ci[0], m.censor_step)}, " \
           f"{step_text(m.median_ci[1], m.censor_step)}]"


def proportion_text(k, n, interval):
    """"k/n = k/n as a decimal [lo, hi]" of k seeds of n and the proportion's interval."""
    return f"{k}/{n} = {k / n:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def fraction_text(s, m):
    return proportion_text(m.sinks, s.n, m.sink_ci)


def converged_text(m, fmt=None):
    return interval_text(*m.converged, fmt or CONVERGED_FORMAT[m.measure])


def outcomes_text(m):
    """Where the sink went by a measure: "moved 8, kept 0, split 0, none 0" ("—" without Sink_*)."""
    return ", ".join(f"{k} {v}" for k, v in m.outcomes.items()) if m.outcomes else "—"


def _star(s):
    return "*" if any(r.proxy for r in s.runs) else ""


def write_section(rep, data):
    """The forest plot, the table, the rules, the long forms; the findings."""
    runs = [r for r in data.runs if is_atlas_run(r)]
    if not runs:
        rep.skipped(TITLE, "no atlas run (run-name atlas.<scale>.<cell>.s<seed>) in the files")
        return
    specs = known_cells()
    cells, notes = atlas_cells(runs, specs, data.eps)
    for what, reason in notes:
        rep.skipped(what, reason)
    if not cells:
        rep.skipped(TITLE, "no atlas run with eval/first_attention")
        return
    eps = data.eps
    rep.section(TITLE, anchor="atlas")
    scales = list(dict.fromkeys(s.scale for s in cells))
    seeds = sorted({s.n for s in cells})
    rules = sorted({r.status_rule for s in cells for r in s.runs if r.status_rule})
    rep.para(f"Every sink-related design on the Bigram-Backcopy task, many seeds each, each run to convergence or to a "
             f"fixed budget (jobs/atlas): {sum(s.n for s in cells)} runs of {len(cells)} cell(s) at {len(scales)} "
             f"scale(s) ({', '.join(scales)}), "
             f"{'-'.join(map(str, (seeds[0], seeds[-1]) if len(seeds) > 1 else seeds))} seeds per cell. Each cell is "
             f"judged by two measures of the first position's sink, Guo et al.'s BOS attention and the paper's "
             f"Sink_1^{eps:g}, each with its own verdict; a verdict reads the intervals over the seeds, never one run. " +
             (f"A run stops by the rule: {'; '.join(rules)}." if rules else ""))
    fig = _forest(rep, cells, eps)
    table = _table(rep, cells, eps)
    pairs = compare_scales(cells)
    scales_table = _scales_table(rep, pairs) if pairs else None
    kinds = [k for k in VERDICT_RULES if any(s.expect == k for s in cells)]
    rep.heading(3, "How the atlas's numbers and verdicts are computed")
    rep.bullets([SINK_RULES[m].format(eps=f"{eps:g}") for m in MEASURES] +
                [FRACTION_RULE, MEDIAN_RULE, MEAN_RULE,
                 MOVED_RULE.format(eps=f"{eps:g}")] +
                [f"verdict (by each measure), {VERDICT_RULES[k]}" for k in kinds] +
                [f"verdict, {UNLEARNED_RULE}", _resolution(seeds)] + ([f"across scales, {SCALE_RULE}"] if pairs else []))
    _long_forms(rep, cells, eps)

    for measure in MEASURES:
        rep.finding(_tally(cells, measure), table, lead=measure == MEASURES[0])
    for line in _scale_lines(pairs):
        rep.finding(line, scales_table)
    old = [s for s in cells if not (s.spec is not None and getattr(s.spec, "design", ""))]  # the paper's: next section
    questions = _kv_lines(old, eps) + _no_bos_lines(old, eps) + _sigmoid_lines(old, eps) if old else []
    for line in questions + _unlearned_lines(cells):
        rep.finding(line, fig)
    for s in old:
        if "disagrees" in (s.guo.verdict, s.paper.verdict):
            rep.finding(f"{name_of(s)}: expected {expectation_text(s)}; " + "; ".join(
                f"by {MEASURE_NAMES[m]} {fraction_text(s, s.by[m])} seeds with a sink, median emergence step "
                f"{steps_text(s.by[m])}, {CONVERGED_TEXT[m]} {converged_text(s.by[m])}{_star(s)}: {s.by[m].verdict}"
                for m in MEASURES) + ".", fig)


def _forest(rep, cells, eps):
    rows = [dict(label=f"{name_of(s)} — {'Guo' if m == 'guo' else 'paper'}", median=s.by[m].median,
                 lo=s.by[m].median_ci[0], hi=s.by[m].median_ci[1], censor=s.by[m].censor_step,
                 seeds=[(r.onset_by(m) if r.onset_by(m) is not None else r.last_step, r.onset_by(m) is None)
                        for r in s.runs], fraction=s.by[m].sinks / s.n, frac_lo=s.by[m].sink_ci[0],
                 frac_hi=s.by[m].sink_ci[1], verdict=s.by[m].verdict, marker=MARKERS[m],
                 what=f" ({'Guo' if m == 'guo' else 'paper'})")
            for s in cells for m in MEASURES]
    return rep.figure("atlas_forest", "Emergence atlas: emergence step and sink fraction per cell and measure",
                      f"Two rows per cell and scale, one per measure: 'Guo' (diamond), the BOS attention of the "
                      f"non-trigger queries at its best head, a sink from the evaluation where it stays >= {eps:g}; "
                      f"'paper' (circle), Sink_1^{eps:g} (every query, share of heads), a sink from the evaluation "
                      "where it stays above 1 %. Left: the median emergence step with its 95 % bootstrap interval, "
                      "and each seed's step (grey dots; a seed without a sink as a hollow arrow at its last step). A "
                      "median or interval end that falls on a censored run is an arrow (\"> S\", the rule below the "
                      "table says which S). Right: the fraction of seeds with a sink with its 95 % Wilson interval; "
                      "dotted: 0.5, where the verdict rule reads it (for a cell expecting the sink on the bias "
                      "position the verdict reads the share of seeds that moved it there instead, in the table). "
                      "Colour: the measure's verdict (green agrees, red disagrees, grey inconclusive, gold disputed, "
                      "blue no expectation). * = proxy scores.", figures.forest, rows)


def _table(rep, cells, eps):
    cols = ["scale", "cell", "expectation (source)", "seeds"]
    for m in MEASURES:
        short = "Guo" if m == "guo" else "paper"
        cols += [f"{short}: sink fraction [95 % Wilson]", f"{short}: median emergence step [95 % bootstrap]",
                 f"{short}: {CONVERGED_TEXT[m]} [95 % bootstrap]", f"{short}: verdict"]
    cols += ["where the sink went (paper: seeds)", f"Sink_*^{eps:g} (%, mean)", "copy loss (mean)", "runs stopped",
             "read (Guo; paper)"]
    rows, stars = [], set()
    for s in cells:
        row = [s.scale, s.label, expectation_text(s), s.n]
        for m in MEASURES:
            row += [fraction_text(s, s.by[m]), steps_text(s.by[m]), converged_text(s.by[m]), s.by[m].verdict]
        row += [outcomes_text(s.paper), s.mean_of("sink_star"), s.mean_of("copy_loss"), s.stopped_text(),
                f"{s.guo.why}; {s.paper.why}"]
        rows.append(row)
        if _star(s):
            stars.update({(len(rows) - 1, cols.index(f"Guo: {CONVERGED_TEXT['guo']} [95 % bootstrap]"))})
    return rep.table(Table("atlas", f"Emergence atlas: each cell against its expectation, by each measure "
                                    f"(eps = {eps:g})", cols, rows,
                           {"copy loss (mean)": ".4f", f"Sink_*^{eps:g} (%, mean)": ".1f"}, stars,
                           note="Intervals are 95 %. A step \"> S\": censored, after the last step S of the cell's "
                                "runs without a sink (or after its latest observed emergence, if later). Guo: the BOS "
                                "attention of the non-trigger queries, best head; paper: Sink_1, the share of heads "
                                "whose mean attention of every query to the first token exceeds eps. The rules are "
                                "below the table; every cell's and every "
                                "run's numbers are in atlas_cells.csv and atlas_runs.csv."))


def _scales_table(rep, pairs):
    """One row per cell found at two scales: each scale's numbers, Fisher's p, both scales together."""
    cols = ["cell", "scales (more seeds / fewer)", "counted", "fraction (more seeds)", "fraction (fewer seeds)",
            "Fisher's exact p (two-sided)", "least p these seeds allow", "the scales",
            "median emergence step (more / fewer)", "converged BOS attention (more seeds)",
            "converged BOS attention (fewer seeds)", "verdicts (more / fewer)", "both together [95 % Wilson]",
            "verdict of both together"]
    rows = []
    for c in pairs:
        rows.append([c.ref.label, f"{c.ref.scale} / {c.other.scale}", c.what, _counted(c.ref), _counted(c.other),
                     c.p, c.least_p, "differ" if c.differs else "consistent",
                     f"{steps_text(c.ref.guo)} / {steps_text(c.other.guo)}", converged_text(c.ref.guo),
                     converged_text(c.other.guo), f"{c.ref.guo.verdict} / {c.other.guo.verdict}",
                     _counted(c.pooled), c.pooled.guo.verdict])
    return rep.table(Table("atlas_scales", "Emergence atlas: the cells run at two scales (Guo's measure)", cols, rows,
                           {cols[5]: ".3f", cols[6]: ".3f"},
                           note="The scale with more seeds first. 'counted' is what the verdict counts; the rule "
                                "(Fisher's exact test, both scales together) is below. Steps are each scale's own "
                                "(its tokens a step differ)."))


def _counted(s):
    k, interval, _ = counted(s)
    return proportion_text(k, s.n, interval)


def _scale_lines(pairs):
    """The findings of the cells at two scales: which differ, which are consistent, what both together say."""
    if not pairs:
        return []
    scales = sorted({(c.ref.scale, c.ref.n, c.other.scale, c.other.n) for c in pairs})

    def names(group):
        return ", ".join(c.ref.label for c in group) or "none"

    differ = [c for c in pairs if c.differs]
    same = [c for c in pairs if not c.differs]
    where = "; ".join(f"{a} with {na} seeds against {b} with {nb}" for a, na, b, nb in scales)
    least = sorted({f"{c.least_p:.3f}" for c in pairs}, key=float)
    out = [f"Across scales ({where}), by Fisher's exact test on the counts each verdict reads: {len(differ)} of "
           f"{len(pairs)} cells differ at p < 0.05 ({names(differ)}); {len(same)} of {len(pairs)} are consistent "
           f"({names(same)}). "
           f"With these seeds the test sees only large differences (the least p the counts allow: "
           f"{' to '.join(dict.fromkeys((least[0], least[-1])))})."]
    for c in differ:
        out.append(f"{c.ref.label}: {c.ref.scale} {_counted(c.ref)} {c.what}, {c.other.scale} {_counted(c.other)} "
                   f"(Fisher's p = {c.p:.3f}); converged BOS attention {converged_text(c.ref.guo, '.2f')} against "
                   f"{converged_text(c.other.guo, '.2f')}: at these two scales the design does not act alike.")
    moved = [c for c in same if c.pooled.guo.verdict != c.ref.guo.verdict]
    if same:
        text = "; ".join(f"{c.ref.label} {_counted(c.pooled)}, {c.pooled.guo.verdict}" for c in same)
        out.append(f"Both scales' seeds together, for the consistent cells (one population assumed, not proven): "
                   f"{text}" + (f"; the verdict changes from the larger scale's alone in {names(moved)}." if moved
                                else "; no verdict changes from the larger scale's alone."))
    return out


def _long_forms(rep, cells, eps):
    """Every cell's numbers with the interval ends in columns, and every run's measures (CSV, linked)."""
    cols = ["scale", "cell", "expectation", "seeds"]
    for m in MEASURES:
        cols += [f"{m}: {c}" for c in ("sinks", "sink fraction", "sink fraction low", "high", "median emergence step",
                                       "median low", "median high", "censored runs' earliest last step",
                                       "converged", "converged low", "converged high", "moved", "moved low",
                                       "moved high", "kept", "split", "none", "verdict")]
    cols += ["copy loss", "raw weight on BOS", "raw weight on BOS at step 0", "raw weight on an average other key",
             "||v_BOS|| / mean ||v_other||", "||h_BOS|| / mean ||h_other||", f"Sink_*^{eps:g} (%)",
             "alpha_* (converged, largest head)", "sink logit's share (converged, largest head)", "S_h (largest)",
             "||k*|| (largest)", "||v*|| (largest)", "where the sink sits (per layer, seeds)"]
    rows = []
    for s in cells:
        row = [s.scale, s.cell, s.expect, s.n]
        for m in (s.by[m] for m in MEASURES):
            row += [m.sinks, m.sinks / s.n, *m.sink_ci, m.median, *m.median_ci, m.censor_step, *m.converged, m.moved,
                    *m.moved_ci, *(m.outcomes.get(k) for k in ("kept", "split", "none")), m.verdict]
        row += [s.mean_of(a) for a in ("copy_loss", "bos_weight", "bos_weight_start", "other_weight", "value_ratio",
                                       "residual_ratio", "sink_star", "alpha_star", "logit_share", "sink_logit",
                                       "k_norm", "v_norm")] + [s.where_text()]
        rows.append(row)
    rep.table(Table("atlas_cells", "Emergence atlas: every cell's numbers by each measure (inf: censored, after the "
                                   "last step)", cols, rows, inline=False))
    cols = ["run", "scale", "cell", "seed", "evaluations", "last step", "Guo: emergence step", "Guo: sink",
            "converged BOS attention", "BOS attention at the last evaluation", "best layer", "best head",
            "paper: emergence step", "paper: sink", "converged Sink_1 (%)", "Sink_1 (%) at the last evaluation",
            "Sink_1 per sequence (%, the reference code's average) at the last evaluation",
            "Sink_* emergence step", "where the sink went (Guo)", "where the sink went (paper)", "copy loss",
            "raw weight on BOS", "raw weight on BOS at step 0", "raw weight on an average other key",
            "||v_BOS|| / mean ||v_other||", "||h_BOS|| / mean ||h_other||", f"Sink_*^{eps:g} (%)",
            "alpha_* (converged, largest head)", "sink logit's share (converged, largest head)", "S_h (largest)",
            "||k*|| (largest)", "||v*|| (largest)", "where the sink sits (per layer)", "BOS / <d> inside the rows",
            "proxy scores", "stopped", "steps (atlas_status.json)"]
    rows = [[r.run.name, r.scale, r.cell, r.seed, len(r.steps), r.last_step, r.onset, "yes" if r.has_sink else "no",
             r.converged, float(r.bos[-1]), r.layer, r.head, r.paper_onset, "yes" if r.paper_onset is not None else "no",
             r.paper_converged, None if r.sink1 is None else float(r.sink1[-1]), r.sink1_per_sequence, r.star_onset,
             r.outcome("guo"),
             r.outcome("paper"), r.copy_loss, r.bos_weight, r.bos_weight_start, r.other_weight, r.value_ratio,
             r.residual_ratio, r.sink_star, r.alpha_star, r.logit_share, r.sink_logit, r.k_norm, r.v_norm,
             "; ".join(f"layer {l + 1}: {', '.join(w) or 'none'}" for l, w in enumerate(r.where)), r.boundary,
             "yes" if r.proxy else "", r.stopped or "unknown", r.status_steps] for s in cells for r in s.runs]
    rep.table(Table("atlas_runs", "Emergence atlas: every run's measures (last evaluation unless said)", cols, rows,
                    inline=False))


def _resolution(seeds):
    """What the verdict rule can decide with the cells' seed counts."""
    parts = []
    for n in seeds:
        k = decisive_count(n)
        parts.append(f"with {n} seeds, never (the interval of {n}/{n} still holds 0.5)" if k is None else
                     f"with {n} seeds, when at least {k} of them point the same way")
    return "the rule can decide (agree or disagree) " + "; ".join(parts)


def _tally(cells, measure):
    """The verdicts by one measure in one sentence, the cells named."""
    by = {}
    for s in cells:
        by.setdefault(s.by[measure].verdict, []).append(name_of(s))
    parts = [f"{len(by[v])} {v} ({', '.join(by[v])})" for v in VERDICTS if v in by]
    return (f"The emergence atlas by {MEASURE_NAMES[measure]}: {len(cells)} cell(s), {sum(s.n for s in cells)} runs; "
            f"against its expectation each cell {'; '.join(parts)}.")


def _unlearned_lines(cells):
    """Cells whose verdict the task decided: most seeds stopped at the cap without learning the copy rule."""
    out = []
    for s in cells:
        if s.task_not_learned:
            out.append(f"{name_of(s)}: {s.guo.why}; mean copy loss {_mean(s, 'copy_loss', '.2f')} at the last "
                       f"evaluation (step {max(r.last_step for r in s.runs)}), converged BOS attention "
                       f"{converged_text(s.guo, '.2f')}: no verdict at this scale and cap.")
    return out


def _setting_cells(cells, test):
    """The cells whose every run's settings pass `test` (an AtlasRun -> bool)."""
    return [s for s in cells if all(test(r) for r in s.runs)]


def _mean(s, attr, fmt):
    v = s.mean_of(attr)
    return "?" if v is None else format(v, fmt)


def _kv_lines(cells, eps):
    """KV biases (with and without BOS): does the sink move to k*/v*?"""
    out = []
    for s in _setting_cells(cells, lambda r: r.setting("attn-bias") == "kv"):
        no_bos = all(r.setting("document-rows") == "false" for r in s.runs)
        head = f"KV biases{' without BOS' if no_bos else ''} ({name_of(s)}): does the sink move to k*/v*? "
        if s.paper.moved is None:
            out.append(head + f"the runs hold no Sink_* (eval/sink_star); {fraction_text(s, s.guo)} kept a sink on the "
                              "first position.")
            continue
        moved_lo, moved_hi = s.paper.moved_ci
        answer = "yes" if moved_lo > 0.5 else ("no" if moved_hi < 0.5 else "undecided at 95 %")
        out.append(f"{head}{answer}: by the paper's measure (both positions, every query) {outcomes_text(s.paper)} "
                   f"of {s.n} seeds (moved {s.paper.moved}/{s.n} [{moved_lo:.2f}, {moved_hi:.2f}]); by Guo's "
                   f"{outcomes_text(s.guo)}; mean Sink_*^{eps:g} {_mean(s, 'sink_star', '.1f')} %, converged BOS "
                   f"attention {converged_text(s.guo, '.2f')}, the first token's value norm "
                   f"{_mean(s, 'value_ratio', '.2f')}x the others' (runs stopped: {s.stopped_text()}). Verdicts "
                   f"against '{expectation_text(s)}': {s.guo.verdict} (Guo), {s.paper.verdict} (paper).")
    if not out:
        out.append("KV biases: no atlas cell with attn-bias = kv among the files' runs, so the question whether the "
                   "sink moves to k*/v* has no answer here.")
    return out


def _no_bos_lines(cells, eps):
    """Rows that start anywhere (no BOS first), without KV biases: is there a sink, and where?"""
    out = []
    for s in _setting_cells(cells, lambda r: r.setting("document-rows") == "false" and r.setting("attn-bias") != "kv"):
        inside = s.mean_of("boundary")
        where = "" if inside is None else f"; attention to BOS / <d> inside the rows {inside:.2f} (mean)"
        lo, hi = s.guo.sink_ci
        answer = "holds a sink" if lo > 0.5 else ("holds no sink" if hi < 0.5 else
                                                  "may or may not hold a sink (undecided at 95 %)")
        out.append(f"No BOS ({name_of(s)}): by Guo's measure the first position (any character) {answer}: "
                   f"{fraction_text(s, s.guo)} seeds reach {eps:g} to their last evaluation, median emergence step "
                   f"{steps_text(s.guo)}, converged attention to the first position {converged_text(s.guo, '.2f')}"
                   f"{where}; by the paper's Sink_1^{eps:g} {fraction_text(s, s.paper)} seeds with a sink, converged "
                   f"{converged_text(s.paper)} % (runs stopped: {s.stopped_text()}). Verdicts against "
                   f"'{expectation_text(s)}': {s.guo.verdict} (Guo), {s.paper.verdict} (paper).")
    if not out:
        out.append("No BOS: no atlas cell with document-rows = false (without KV biases) among the files' runs.")
    return out


def _sigmoid_lines(cells, eps):
    """Cells read through proxy scores (sigmoid without normalisation): the paper's measure beside absolute
    weights."""
    out = []
    for s in [s for s in cells if any(r.proxy for r in s.runs)]:
        bos, other = s.mean_of("bos_weight"), s.mean_of("other_weight")
        mean = s.guo.converged[0]
        sigmoid = all(r.setting("attn-sim") == "sigmoid" and r.setting("attn-norm") == "one" for r in s.runs)
        head = "Sigmoid question" if sigmoid else "Absolute weights against proxy scores"
        text = (f"{head} ({name_of(s)}): in proxy scores* (the paper's measure) BOS converges to "
                f"{converged_text(s.guo, '.2f')} of a non-trigger query's weight and {fraction_text(s, s.guo)} seeds "
                f"have a sink at {eps:g} (Sink_1^{eps:g}: {fraction_text(s, s.paper)} seeds)")
        if bos is not None and other is not None:
            text += (f"; in absolute weights BOS gets {bos:.3g} and an average other key {other:.3g} (means over "
                     f"seeds, {bos / other:.3g}x)" if other > 0 else
                     f"; in absolute weights BOS gets {bos:.3g} and an average other key 0 (means over seeds)")
            if mean >= eps and bos < eps:
                text += (": a large share of a small total, not softmax's sink, where a row's weights sum to one and "
                         "a query that needs nothing must put them somewhere")
            elif mean >= eps:
                text += ": a large absolute weight too, a sink in absolute terms as well as in shares"
            else:
                text += ": no sink in the paper's measure, the absolute weights as shown"
        out.append(text + f". Verdicts against '{expectation_text(s)}': {s.guo.verdict} (Guo), {s.paper.verdict} "
                          "(paper).")
    if not any(line.startswith("Sigmoid question") for line in out):
        out.insert(0, "Sigmoid question: no atlas cell of sigmoid attention without normalisation (attn-sim = "
                      "sigmoid, attn-norm = one) among the files' runs.")
    return out
