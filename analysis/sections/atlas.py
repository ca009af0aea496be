"""Section "Emergence atlas", the page's first: every sink-related design on Bigram-Backcopy, many seeds each,
run to convergence (jobs/atlas, issue 42), with the statistics of analysis/atlas.py.

The atlas's runs are found by their run-name, atlas.<scale>.<cell>.s<seed>, among the files given (the report
takes directories too: every results.h5 under them). Each (scale, cell) is one row of a forest plot (the
median emergence step with its 95 % interval and every seed's step; censored ones as arrows past the last
step; the sink fraction with its interval beside it) and of the table (the cell, its expectation with its
source from jobs/atlas/cells.py, seeds, sink fraction, emergence step, converged BOS attention, copy loss, how
the runs stopped, the verdict). The long forms (every cell's numbers with separate interval ends, every run's
measures) are linked CSVs. The findings quote the verdicts, and answer in lines generated from the runs the
questions the atlas was built for: does the sink move to k*/v* with KV biases (with and without BOS), is
there a sink without BOS, and what does sigmoid without normalisation show in absolute weights beside the
paper's proxy scores. A cell run at two scales (the principal cells: small and cheap) gets a row in a second
table, atlas_scales (Fisher's exact test of the two scales' counts, both scales' seeds together), and findings
that say which cells differ across scales.
"""
import math

from analysis import figures
from analysis.atlas import (FRACTION_RULE, MEAN_RULE, MEDIAN_RULE, SCALE_RULE, SINK_RULE, UNLEARNED_RULE,
                            atlas_cells, compare_scales, counted, decisive_count, step_text, verdict_rules)
from analysis.results import is_atlas_run
from analysis.sections.bbm import KIND_TEXT
from analysis.tables import Table

TITLE = "Emergence atlas"


def known_cells():
    """({name: Cell} of jobs/atlas/cells.py in its order, why it is empty)."""
    try:
        from jobs.atlas.cells import CELLS
    except ImportError as e:
        return {}, f"jobs/atlas/cells.py cannot be imported ({e})"
    cells = CELLS.values() if isinstance(CELLS, dict) else CELLS
    return {c.name: c for c in cells}, ""


def expectation_text(s):
    if s.spec is None:
        return "— (not in jobs/atlas/cells.py)"
    kind = KIND_TEXT.get(s.expect, "none stated") if s.expect != "none" else "none stated"
    source = s.spec.source.strip()
    return f"{kind} ({source})" if source and source.lower() not in kind else kind


def _name(s):
    star = " *" if any(r.proxy for r in s.runs) else ""
    return f"{s.scale} / {s.label}{star}"


def _interval(x, lo, hi, fmt):
    return "—" if math.isnan(x) else f"{x:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def _steps(s):
    return f"{step_text(s.median, s.censor_step)} [{step_text(s.median_ci[0], s.censor_step)}, " \
           f"{step_text(s.median_ci[1], s.censor_step)}]"


def _fraction(s):
    return f"{s.sinks}/{s.n} = {s.sinks / s.n:.2f} [{s.sink_ci[0]:.2f}, {s.sink_ci[1]:.2f}]"


def _star(s):
    return "*" if any(r.proxy for r in s.runs) else ""


def write_section(rep, data):
    """The forest plot, the table, the rules, the long forms; the findings."""
    runs = [r for r in data.runs if is_atlas_run(r)]
    if not runs:
        rep.skipped(TITLE, "no atlas run (run-name atlas.<scale>.<cell>.s<seed>) in the files")
        return
    specs, why = known_cells()
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
    rep.para(f"Every sink-related design on the Bigram-Backcopy task, many seeds each, each run to convergence "
             f"(jobs/atlas): {sum(s.n for s in cells)} runs of {len(cells)} cell(s) at {len(scales)} scale(s) "
             f"({', '.join(scales)}), {'-'.join(map(str, (seeds[0], seeds[-1]) if len(seeds) > 1 else seeds))} seeds "
             f"per cell. A verdict reads the intervals over the seeds, never one run. " +
             (f"A run stops by the rule: {'; '.join(rules)}." if rules else ""))
    if why:
        rep.para(f"No expectations: {why}; every cell reads 'no expectation'.", cls="note")
    fig = _forest(rep, cells, eps)
    table = _table(rep, cells, eps)
    pairs = compare_scales(cells)
    scales_table = _scales_table(rep, pairs) if pairs else None
    kinds = [k for k in ("sink", "no_sink", "moved_to_bias", "none") if any(s.expect == k for s in cells)]
    rep.heading(3, "How the atlas's numbers and verdicts are computed")
    rules_text = verdict_rules(eps)
    rep.bullets([SINK_RULE.format(eps=f"{eps:g}"), FRACTION_RULE, MEDIAN_RULE, MEAN_RULE] +
                [f"verdict, {rules_text[k]}" for k in kinds] + [f"verdict, {UNLEARNED_RULE}", _resolution(seeds)] +
                ([f"across scales, {SCALE_RULE}"] if pairs else []))
    _long_forms(rep, cells, eps)

    rep.finding(_tally(cells), table, lead=True)
    for line in _scale_lines(pairs):
        rep.finding(line, scales_table)
    for line in _kv_lines(cells, eps) + _no_bos_lines(cells, eps) + _sigmoid_lines(cells, eps) + _unlearned_lines(cells):
        rep.finding(line, fig)
    for s in cells:
        if s.verdict == "disagrees":
            rep.finding(f"{_name(s)}: expected {expectation_text(s)}; {_fraction(s)} seeds with a sink, median "
                        f"emergence step {_steps(s)}, converged BOS attention "
                        f"{_interval(*s.converged, '.2f')}{_star(s)}: disagrees.", fig)


def _forest(rep, cells, eps):
    rows = [dict(label=_name(s), median=s.median, lo=s.median_ci[0], hi=s.median_ci[1], censor=s.censor_step,
                 seeds=[(r.onset if r.has_sink else r.last_step, not r.has_sink) for r in s.runs],
                 fraction=s.sinks / s.n, frac_lo=s.sink_ci[0], frac_hi=s.sink_ci[1], verdict=s.verdict)
           for s in cells]
    return rep.figure("atlas_forest", "Emergence atlas: emergence step and sink fraction per cell",
                      f"One row per cell and scale. Left: the median emergence step (the first evaluation from which "
                      f"the BOS attention stays >= {eps:g}) with its 95 % bootstrap interval, and each seed's step "
                      "(grey dots; a seed without a sink as a hollow arrow at its last step). A median or interval "
                      "end that falls on a censored run is an arrow (\"> S\", the rule below the table says which S). "
                      "Right: the "
                      "fraction of seeds with a sink with its 95 % Wilson interval; dotted: 0.5, where the verdict "
                      "rule reads it (for a cell expecting the sink on the bias position the verdict reads the share "
                      "of seeds that moved it there instead, in the table). Colour: the cell's verdict (green agrees, "
                      "red disagrees, grey inconclusive, blue no expectation). * = proxy scores.", figures.forest, rows)


def _table(rep, cells, eps):
    cols = ["scale", "cell", "expectation (source)", "seeds", "sink fraction [95 % Wilson]",
            "median emergence step [95 % bootstrap]", "converged BOS attention [95 % bootstrap]",
            "copy loss (mean)", f"Sink_*^{eps:g} (%, mean)", "runs stopped", "verdict", "read"]
    rows, stars = [], set()
    for s in cells:
        star = s.mean_of("sink_star")
        rows.append([s.scale, s.label, expectation_text(s), s.n, _fraction(s), _steps(s),
                     _interval(*s.converged, ".3f"), s.mean_of("copy_loss"), star, s.stopped_text(), s.verdict,
                     s.why])
        if _star(s):
            stars.update({(len(rows) - 1, 6), (len(rows) - 1, 8)} if star is not None else {(len(rows) - 1, 6)})
    return rep.table(Table("atlas", f"Emergence atlas: each cell against its expectation (eps = {eps:g})", cols, rows,
                           {"copy loss (mean)": ".4f", cols[8]: ".1f"}, stars,
                           note="Intervals are 95 %. A step \"> S\": censored, after the last step S of the cell's "
                                "runs without a sink (or after its latest observed emergence, if later). The rules are below the table; every cell's and every run's "
                                "numbers are in atlas_cells.csv and atlas_runs.csv."))


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
                     f"{_steps(c.ref)} / {_steps(c.other)}", _interval(*c.ref.converged, ".3f"),
                     _interval(*c.other.converged, ".3f"), f"{c.ref.verdict} / {c.other.verdict}",
                     _counted(c.pooled), c.pooled.verdict])
    return rep.table(Table("atlas_scales", "Emergence atlas: the cells run at two scales", cols, rows,
                           {cols[5]: ".3f", cols[6]: ".3f"},
                           note="The scale with more seeds first. 'counted' is what the verdict counts; the rule "
                                "(Fisher's exact test, both scales together) is below. Steps are each scale's own "
                                "(its tokens a step differ)."))


def _counted(s):
    k, (lo, hi), _ = counted(s)
    return f"{k}/{s.n} = {k / s.n:.2f} [{lo:.2f}, {hi:.2f}]"


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
                   f"(Fisher's p = {c.p:.3f}); converged BOS attention {_interval(*c.ref.converged, '.2f')} against "
                   f"{_interval(*c.other.converged, '.2f')}: at these two scales the design does not act alike.")
    moved = [c for c in same if c.pooled.verdict != c.ref.verdict]
    if same:
        text = "; ".join(f"{c.ref.label} {_counted(c.pooled)}, {c.pooled.verdict}" for c in same)
        out.append(f"Both scales' seeds together, for the consistent cells (one population assumed, not proven): "
                   f"{text}" + (f"; the verdict changes from the larger scale's alone in {names(moved)}." if moved
                                else "; no verdict changes from the larger scale's alone."))
    return out


def _long_forms(rep, cells, eps):
    """Every cell's numbers with the interval ends in columns, and every run's measures (CSV, linked)."""
    cols = ["scale", "cell", "expectation", "seeds", "sinks", "sink fraction", "sink fraction low", "high",
            "median emergence step", "median low", "median high", "censored runs' earliest last step",
            "converged BOS attention", "converged low", "converged high", "copy loss", "raw weight on BOS",
            "raw weight on an average other key", "||v_BOS|| / mean ||v_other||", "||h_BOS|| / mean ||h_other||",
            f"Sink_*^{eps:g} (%)", "moved to the bias position", "moved low", "moved high", "verdict"]
    rows = [[s.scale, s.cell, s.expect, s.n, s.sinks, s.sinks / s.n, *s.sink_ci, s.median, *s.median_ci,
             s.censor_step, *s.converged, s.mean_of("copy_loss"), s.mean_of("bos_weight"), s.mean_of("other_weight"),
             s.mean_of("value_ratio"), s.mean_of("residual_ratio"), s.mean_of("sink_star"), s.moved, *s.moved_ci,
             s.verdict] for s in cells]
    rep.table(Table("atlas_cells", "Emergence atlas: every cell's numbers (inf: censored, after the last step)", cols,
                    rows, inline=False))
    cols = ["run", "scale", "cell", "seed", "evaluations", "last step", "emergence step", "sink",
            "converged BOS attention", "BOS attention at the last evaluation", "best layer", "best head",
            "copy loss", "raw weight on BOS", "raw weight on an average other key", "||v_BOS|| / mean ||v_other||",
            "||h_BOS|| / mean ||h_other||", f"Sink_*^{eps:g} (%)", "BOS / <d> inside the rows", "proxy scores",
            "stopped", "steps (atlas_status.json)"]
    rows = [[r.run.name, r.scale, r.cell, r.seed, len(r.steps), r.last_step, r.onset, "yes" if r.has_sink else "no",
             r.converged, float(r.bos[-1]), r.layer, r.head, r.copy_loss, r.bos_weight, r.other_weight, r.value_ratio,
             r.residual_ratio, r.sink_star, r.boundary, "yes" if r.proxy else "", r.stopped or "unknown",
             r.status_steps] for s in cells for r in s.runs]
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


def _tally(cells):
    """The verdicts in one sentence, the cells named."""
    by = {}
    for s in cells:
        by.setdefault(s.verdict, []).append(_name(s))
    parts = [f"{len(by[v])} {v} ({', '.join(by[v])})" for v in ("agrees", "disagrees", "inconclusive", "no expectation")
             if v in by]
    return (f"The emergence atlas: {len(cells)} cell(s), {sum(s.n for s in cells)} runs; against its expectation "
            f"each cell {'; '.join(parts)}.")


def _unlearned_lines(cells):
    """Cells whose verdict the task decided: most seeds stopped at the cap without learning the copy rule."""
    out = []
    for s in cells:
        if s.task_not_learned:
            out.append(f"{_name(s)}: {s.why}; mean copy loss {_mean(s, 'copy_loss', '.2f')} at the last evaluation "
                       f"(the cap, step {max(r.last_step for r in s.runs)}), converged BOS attention "
                       f"{_interval(*s.converged, '.2f')}: no verdict at this scale and cap.")
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
        head = f"KV biases{' without BOS' if no_bos else ''} ({_name(s)}): does the sink move to k*/v*? "
        if s.moved is None:
            out.append(head + f"the runs hold no Sink_* (eval/sink_star); {_fraction(s)} kept a sink on the first "
                              "position.")
            continue
        moved_lo, moved_hi = s.moved_ci
        answer = "yes" if moved_lo > 0.5 else ("no" if moved_hi < 0.5 else "undecided at 95 %")
        text = (f"{head}{answer}: in {s.moved}/{s.n} seeds [{moved_lo:.2f}, {moved_hi:.2f}] Sink_*^{eps:g} is >= 50 % "
                f"with no sink on the first position; the first position kept one in {_fraction(s)}; mean Sink_*^"
                f"{eps:g} {_mean(s, 'sink_star', '.1f')} %, converged BOS attention {_interval(*s.converged, '.2f')}, "
                f"the first token's value norm {_mean(s, 'value_ratio', '.2f')}x the others' (runs stopped: "
                f"{s.stopped_text()}). Verdict against '{expectation_text(s)}': {s.verdict}.")
        out.append(text)
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
        answer = "holds a sink" if s.sink_ci[0] > 0.5 else ("holds no sink" if s.sink_ci[1] < 0.5 else
                                                             "may or may not hold a sink (undecided at 95 %)")
        text = (f"No BOS ({_name(s)}): the first position (any character) {answer} in runs to convergence: "
                f"{_fraction(s)} seeds reach {eps:g} to their last evaluation, median emergence step {_steps(s)}, "
                f"converged attention to the first position {_interval(*s.converged, '.2f')}{where} (runs stopped: "
                f"{s.stopped_text()}). Verdict against '{expectation_text(s)}': {s.verdict}.")
        out.append(text)
    if not out:
        out.append("No BOS: no atlas cell with document-rows = false (without KV biases) among the files' runs.")
    return out


def _sigmoid_lines(cells, eps):
    """Cells read through proxy scores (sigmoid without normalisation): the paper's measure beside absolute
    weights."""
    out = []
    for s in [s for s in cells if any(r.proxy for r in s.runs)]:
        bos, other = s.mean_of("bos_weight"), s.mean_of("other_weight")
        mean = s.converged[0]
        sigmoid = all(r.setting("attn-sim") == "sigmoid" and r.setting("attn-norm") == "one" for r in s.runs)
        head = "Sigmoid question" if sigmoid else "Absolute weights against proxy scores"
        text = (f"{head} ({_name(s)}): in proxy scores* (the paper's measure) BOS converges to "
                f"{_interval(*s.converged, '.2f')} of a non-trigger query's weight and {_fraction(s)} seeds have a "
                f"sink at {eps:g}")
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
        out.append(text + f". Verdict against '{expectation_text(s)}': {s.verdict}.")
    if not any(line.startswith("Sigmoid question") for line in out):
        out.insert(0, "Sigmoid question: no atlas cell of sigmoid attention without normalisation (attn-sim = "
                      "sigmoid, attn-norm = one) among the files' runs.")
    return out
