"""Section "The atlas in the paper's setting", after the emergence atlas: the cells of cells/atlas.py's
PAPER_CELLS (issue 54), Bigram-Backcopy rows that start anywhere in the packed stream (no BOS first), 3 layers and
1, each run to a fixed budget, judged by both measures (analysis/stats/atlas.py).

It shows
  - the earlier disagreements (cells.EARLIER_DISAGREEMENTS: the small atlas's cells whose BOS-first verdict
    disagreed with the literature) side by side with their designs in the paper's setting, by each measure, at 1
    and 3 layers (and for the learned sinks with BOS first at 3 layers), and one line per cell on whether the
    disagreement survives there (the BOS-first verdict from the small scale's runs when the files hold them, else
    from its record, cells.ATLAS_RECORD, which has Guo's measure only);
  - where the sink sits, per layer (the first position, k* or the sink token, the sink logit's share of the rows,
    BOS / <d> inside the rows) or that none forms, with alpha_*, the sink logit's share, S_h, ||k*||, ||v*|| and
    the raw weight on the first position at step 0 and at the end (table atlas_where);
  - the sink inside the rows (BOS / <d>, the document tokens a packed row holds at any position): softmax's seeds
    that hold one against each design's at 3 layers, by Fisher's exact test with Holm's adjustment (INSIDE_RULE;
    table atlas_inside_rows): a design that moves the sink off the first position is not thereby sink-free;
  - which verdicts hold only with a constant first token (each learned sink at 3 layers, BOS first against rows
    anywhere);
  - whether the sink logit and k*/v* are limited by their learning rate (cells.SINK_AXES: S_h's initial value 0
    or log T, a 10x lr on the sink tensors): a table (atlas_sink_lr) and S_h and the sink logit's share over
    training, the mean over seeds with its 95 % bootstrap interval (figure atlas_sink_logit).
"""
import math

import numpy as np

from analysis import figures
from analysis.stats.atlas import (CONFIDENCE, CONVERGED_SHARE, INSIDE_ROWS, MEASURES, WHERE_RULE, atlas_cells,
                                  fisher_exact, holm_adjusted, mean_interval, median_onset, read_record, record_text,
                                  step_text, wilson_interval)
from analysis.results import is_atlas_run
from analysis.sections.atlas import (converged_text, expectation_text, fraction_text, known_cells, outcomes_text,
                                     proportion_text)
from analysis.tables import Table
from cells import atlas as atlas_table

TITLE = "The atlas in the paper's setting"


def write_section(rep, data):
    runs = [r for r in data.runs if is_atlas_run(r)]
    specs = known_cells()
    cells, _ = atlas_cells(runs, specs, data.eps) if runs else ([], [])
    paper = {s.cell: s for s in cells if s.spec is not None and getattr(s.spec, "design", "")}
    if not paper:
        rep.skipped(TITLE, "no run of the paper-setting cells (cells/atlas.py PAPER_CELLS) in the files")
        return
    eps = data.eps
    c = atlas_table  # the table of cells (cells/atlas.py) the helpers below read
    rep.section(TITLE, anchor="atlas-paper")
    scales = sorted({s.scale for s in paper.values()})
    stopped = sorted({s.stopped_text() for s in paper.values()})
    rep.para(f"The paper trains on packed chunks that start with any token and measures Sink_1^{eps:g} on sequences "
             f"of T = 64 with no BOS (Sec. 3.2); the atlas's other scales start every row with BOS, a constant first "
             f"token that is itself a learnable k*/v* pair. Here rows are cut anywhere from the stream (BOS and <d> "
             f"occur inside rows, as document boundaries do in packed text), {len(paper)} cells at scale(s) "
             f"{', '.join(scales)}: softmax and every sink design at 3 layers and at 1, the learned sinks also with "
             f"BOS first at 3 layers, and the learning-rate axes of the sink tensors. Runs stopped: "
             f"{'; '.join(stopped)} (a fixed budget: the convergence rule watches BOS only, and a sink on k*, the "
             f"sink token or the sink logit can grow where it does not look).")
    table = _disagreements_table(rep, c, paper, cells)
    where = _where_table(rep, paper, eps)
    inside, inside_line = _inside_rows(rep, c, paper)
    lr_table, lr_fig = _sink_lr(rep, c, paper)
    rep.bullets([WHERE_RULE.format(share=f"{CONVERGED_SHARE:.0%}", eps=f"{eps:g}"), SURVIVAL_RULE, INSIDE_RULE])
    softmax = paper.get(c.paper_cell_name("softmax"))
    if softmax is not None:
        rep.finding(_softmax_line(softmax, paper.get(c.paper_cell_name("softmax", layers=1)), eps), where, lead=True)
        for line in _baseline_lines(c, paper):
            rep.finding(line, table)
    if inside_line:
        rep.finding(inside_line, inside)
    for line in _survival_lines(c, paper, cells):
        rep.finding(line, table)
    for line in _constant_first_token_lines(c, paper):
        rep.finding(line, table)
    for line in _where_lines(c, paper):
        rep.finding(line, where)
    for line in _lr_lines(c, paper):
        rep.finding(line, lr_fig or lr_table)


def _design_cell(c, paper, design, layers=None, bos_first=False, axis=""):
    return paper.get(c.paper_cell_name(design, layers or c.PAPER_DEPTH, bos_first, axis))


def _verdicts(s):
    """"Guo disagrees (8/8), paper agrees (0/8)" of a cell, with the counts each verdict read."""
    if s is None:
        return "not run"
    parts = []
    for m in MEASURES:
        k = s.by[m].moved if s.expect == "moved_to_bias" and s.by[m].moved is not None else s.by[m].sinks
        what = "moved" if s.expect == "moved_to_bias" else "with a sink"
        parts.append(f"{'Guo' if m == 'guo' else 'paper'} {s.by[m].verdict} ({k}/{s.n} {what})")
    return ", ".join(parts)


def _bos_first(small_name, cells, record):
    """The BOS-first verdict of a small-scale cell: from its runs in the files, else its record (Guo only)."""
    run = next((s for s in cells if s.scale == "small" and s.cell == small_name), None)
    if run is not None:
        return _verdicts(run) + ", small scale, runs in these files"
    entry = record.get(("small", small_name))
    if entry is None:
        return "— (neither runs nor the record)"
    now = getattr(atlas_table.CELL_BY_NAME.get(small_name), "expect", entry["expect"])
    earlier = f", against the then expectation '{entry['expect']}'" if entry["expect"] not in ("", now) else ""
    return f"Guo {record_text(entry)}, small scale, the record{earlier}"


def survival(expect, verdicts):
    """Whether a disagreement survives in the paper's setting, from the paper's-measure verdicts there (one per
    depth): "survives", "does not survive", "depends on depth", "disputed" or "undecided" (SURVIVAL_RULE)."""
    if expect == "disputed":
        return "disputed"
    if verdicts and all(v == "disagrees" for v in verdicts):
        return "survives"
    if "agrees" in verdicts and "disagrees" in verdicts:
        return "depends on depth"
    if "agrees" in verdicts:
        return "does not survive"
    return "undecided"


SURVIVAL_RULE = ("an earlier disagreement in the paper's setting, read from the paper's-measure verdicts of its design "
                 "there at 1 and 3 layers: survives when both disagree with the expectation; does not survive when "
                 "neither disagrees and one agrees; depends on depth when one agrees and the other disagrees; "
                 "disputed when the sources disagree; otherwise undecided (inconclusive verdicts)")


def _disagreement_rows(c, paper, cells):
    record = read_record(c.ATLAS_RECORD)
    rows = []
    for small_name, design in c.EARLIER_DISAGREEMENTS.items():
        one, three = _design_cell(c, paper, design, layers=1), _design_cell(c, paper, design)
        bos3 = _design_cell(c, paper, design, bos_first=True) if design in c.BOS_FIRST_DESIGNS else None
        text = _bos_first(small_name, cells, record)
        spec = c.CELL_BY_NAME.get(small_name)
        present = [s for s in (one, three) if s is not None]
        verdict = survival(present[0].expect if present else "", [s.paper.verdict for s in present])
        rows.append(dict(small=small_name, label=spec.label if spec else small_name, design=design, bos_first=text,
                         one=one, three=three, bos3=bos3, survival=verdict,
                         expect=expectation_text(three or one) if (three or one) else ""))
    return rows


def _disagreements_table(rep, c, paper, cells):
    cols = ["earlier cell (small scale, BOS first, 1 layer)", "its BOS-first verdict", "design here",
            "expectation here (source)", "rows anywhere, 1 layer", "rows anywhere, 3 layers", "BOS first, 3 layers",
            "in the paper's setting"]
    rows = [[r["label"], r["bos_first"], r["design"], r["expect"], _verdicts(r["one"]), _verdicts(r["three"]),
             _verdicts(r["bos3"]) if r["design"] in c.BOS_FIRST_DESIGNS else "—", r["survival"]]
            for r in _disagreement_rows(c, paper, cells)]
    return rep.table(Table("atlas_paper_disagreements", "The atlas's earlier disagreements in the paper's setting, by "
                                                        "each measure", cols, rows,
                           note="Guo: the BOS attention of the non-trigger queries, best head (a sink when it stays >= "
                                "eps); paper: Sink_1^eps, the share of heads whose mean attention of every query to "
                                "the first token exceeds eps (a sink when it stays above 1 %: some head holds one). "
                                "For the learned sinks the counts are the seeds that moved the sink to "
                                "k* / the sink token. The BOS-first verdicts of the record read Guo's measure only."))


def _survival_lines(c, paper, cells):
    out = []
    for r in _disagreement_rows(c, paper, cells):
        depths = "; ".join(f"{what}: {_verdicts(s)}" for what, s in (("1 layer", r["one"]), ("3 layers", r["three"]))
                           if s is not None)
        if not depths:
            continue
        verdict = {"survives": "the disagreement survives in the paper's setting",
                   "does not survive": "the disagreement does not survive in the paper's setting",
                   "depends on depth": "in the paper's setting the disagreement depends on the depth",
                   "undecided": "undecided in the paper's setting"}.get(r["survival"], "")
        if r["survival"] == "disputed":
            verdict = f"the expectation is now disputed ({(r['three'] or r['one']).paper.why})"
        out.append(f"{r['label']} (BOS first: {r['bos_first']}) in the paper's setting, rows anywhere: {depths}: "
                   f"{verdict}.")
    return out


def _constant_first_token_lines(c, paper):
    """The learned sinks at 3 layers with BOS first against rows anywhere: which verdicts need the constant token."""
    out, only_bos = [], []
    for design in c.BOS_FIRST_DESIGNS:
        bos, anywhere = _design_cell(c, paper, design, bos_first=True), _design_cell(c, paper, design)
        if bos is None or anywhere is None:
            continue
        differs = bos.paper.verdict != anywhere.paper.verdict
        out.append(f"{c.DESIGNS[design].label} at 3 layers: BOS first {_verdicts(bos)}, where the sink went (paper) "
                   f"{outcomes_text(bos.paper)}; rows anywhere {_verdicts(anywhere)}, {outcomes_text(anywhere.paper)}: "
                   + ("the constant first token changes the verdict." if differs else
                      "the constant first token does not change the verdict."))
        if differs:
            only_bos.append(f"{c.DESIGNS[design].label} ({bos.paper.verdict} with BOS first, {anywhere.paper.verdict} "
                            "with rows anywhere)")
    if out:
        out.insert(0, "Verdicts that hold only with a constant first token (the paper's measure, 3 layers): " +
                   (", ".join(only_bos) if only_bos else "none of the learned sinks'") + ".")
    return out


def _baseline_lines(c, paper):
    """Where softmax itself forms no first-position sink at a depth, a design's "no sink" there cannot show that
    the design prevents one: the cells whose agreement is only that (paper's measure)."""
    out = []
    for layers in (c.PAPER_DEPTH, 1):
        base = _design_cell(c, paper, "softmax", layers=layers)
        if base is None or base.paper.verdict != "disagrees":
            continue
        vacuous = [s.label for s in paper.values() if s.expect == "no_sink" and s.paper.verdict == "agrees"
                   and s.runs[0].setting("n-layers") == str(layers) and s.runs[0].setting("document-rows") == "false"]
        if vacuous:
            out.append(f"At {layers} layer{'s' if layers > 1 else ''} with rows anywhere softmax itself forms no sink "
                       f"on the first position ({fraction_text(base, base.paper)} seeds by the paper's measure), so "
                       f"the 'no sink' agreements there show no design preventing one: {'; '.join(vacuous)}.")
    return out


def _softmax_line(three, one, eps):
    def said(s):
        where = s.where_text()
        return (f"{fraction_text(s, s.paper)} seeds with a sink by Sink_1^{eps:g} (converged "
                f"{converged_text(s.paper)} %), {fraction_text(s, s.guo)} by Guo's measure (converged "
                f"{converged_text(s.guo, '.2f')}); where it sits: {where}")
    text = f"Softmax in the paper's setting (rows anywhere, no BOS first), 3 layers: {said(three)}"
    if one is not None:
        text += f"; 1 layer: {said(one)}"
    return text + f". Verdicts against 'a sink on the first position': {three.guo.verdict} (Guo), " \
                  f"{three.paper.verdict} (paper) at 3 layers."


def _where_table(rep, paper, eps):
    cols = ["cell", "seeds", "where the sink sits (per layer: seeds)", "paper: sink fraction",
            "paper: converged Sink_1 (%)", "where the sink went (paper)", f"Sink_*^{eps:g} (%, last)",
            "alpha_* (converged, largest head)", "sink logit's share (converged)", "S_h (largest, last)",
            "||k*|| (largest, last)", "||v*|| (largest, last)", "raw weight on the first position at step 0",
            "raw weight on the first position, last", "BOS / <d> inside the rows", "copy loss", "runs stopped"]
    rows = [[s.label, s.n, s.where_text(), fraction_text(s, s.paper), converged_text(s.paper),
             outcomes_text(s.paper)] + [s.mean_of(a) for a in ("sink_star", "alpha_star", "logit_share", "sink_logit",
                                                               "k_norm", "v_norm", "bos_weight_start", "bos_weight",
                                                               "boundary", "copy_loss")] + [s.stopped_text()]
            for s in paper.values()]
    fmt = {c: ".3f" for c in cols[6:16]}
    return rep.table(Table("atlas_where", "The paper's setting: where the sink sits, per cell and layer", cols, rows,
                           fmt, note="Means over seeds. 'where the sink sits' counts, per layer, the seeds whose "
                                     f"converged attention (largest head) exceeds {eps:g} at each place (the rule "
                                     "below); 'none': no place does."))


INSIDE_RULE = ("the sink inside the rows: a seed holds one when some layer's largest head gives BOS / <d> inside the "
               "rows more than eps (WHERE_RULE); each design at 3 layers, rows anywhere, against softmax's seeds by "
               "Fisher's exact test (two-sided), the p values adjusted by Holm's method for the designs compared; "
               f"fewer or more than softmax when the adjusted p < {1 - CONFIDENCE:.2g}, else not told apart")


def _inside_rows(rep, c, paper):
    """Softmax's sink inside the rows against each design's at 3 layers, rows anywhere (INSIDE_RULE): the table
    atlas_inside_rows and its finding line (None, "" without the softmax cell)."""
    base = _design_cell(c, paper, "softmax")
    if base is None:
        return None, ""
    others = [s for s in (_design_cell(c, paper, d) for d in c.DESIGNS if d != "softmax") if s is not None]
    k0 = base.seeds_holding(INSIDE_ROWS)
    ks = [s.seeds_holding(INSIDE_ROWS) for s in others]
    ps = [fisher_exact(k0, base.n, k, s.n) for s, k in zip(others, ks)]
    adjusted = holm_adjusted(ps)
    readings = ["not told from softmax" if q >= 1 - CONFIDENCE else
                "fewer than softmax" if k / s.n < k0 / base.n else "more than softmax"
                for s, k, q in zip(others, ks, adjusted)]

    def count(s, k):
        return proportion_text(k, s.n, wilson_interval(k, s.n))

    rows = [[base.label, base.n, count(base, k0), base.mean_of("boundary"), None, None, "the reference"]]
    rows += [[s.label, s.n, count(s, k), s.mean_of("boundary"), p, q, reading]
             for s, k, p, q, reading in zip(others, ks, ps, adjusted, readings)]
    cols = ["cell", "seeds", "seeds with a sink inside the rows [95 % Wilson]",
            "attention to BOS / <d> inside the rows (largest, mean)", "Fisher p against softmax",
            "Holm-adjusted p", "against softmax"]
    table = rep.table(Table("atlas_inside_rows", "The paper's setting: the sink inside the rows, each design against "
                                                 "softmax (3 layers)", cols, rows,
                            {cols[3]: ".3f", cols[4]: ".2g", cols[5]: ".2g"}, note=INSIDE_RULE))
    parts = [f"{c.DESIGNS[s.spec.design].label} {k}/{s.n} ({reading}, p {p:.2g}, Holm {q:.2g})"
             for s, k, p, q, reading in zip(others, ks, ps, adjusted, readings)]
    line = (f"Softmax's sink inside the rows (BOS / <d>, rows anywhere, 3 layers): {count(base, k0)} seeds"
            + (f"; against it {'; '.join(parts)}." if parts else " (no other design at 3 layers in the files)."))
    return table, line


def _where_lines(c, paper):
    """One line per design at 3 layers, rows anywhere: where its sink sits, layer by layer."""
    return [f"Where the sink sits ({s.label}): {s.where_text()}." for s in
            (_design_cell(c, paper, design) for design in c.DESIGNS) if s is not None]


def _lr_cells(c, paper):
    """The cells of the lr question: each design of SINK_AXES at 3 layers, rows anywhere, then its axes."""
    out = []
    for design, axes in c.SINK_AXES.items():
        for suffix in [""] + [a[0] for a in axes]:
            s = _design_cell(c, paper, design, axis=suffix)
            if s is not None:
                out.append(s)
    return out


def _series_band(cells, name):
    """(label, steps, mean, low, high) over seeds of the largest head's eval/<name> per evaluation, per cell (cells
    whose runs share the evaluation steps and hold the dataset)."""
    out = []
    for s in cells:
        arrays = [getattr(r.run.eval, name) for r in s.runs]
        steps = s.runs[0].steps
        if any(a is None for a in arrays) or any(len(r.steps) != len(steps) for r in s.runs):
            continue
        per_run = np.stack([a.reshape(len(steps), -1).max(axis=1) for a in arrays])
        bands = [mean_interval(per_run[:, i]) for i in range(len(steps))]
        out.append((s.label, steps, *(np.array([b[k] for b in bands]) for k in range(3)), "-"))
    return out


def _learned_sink_onset(s):
    """The median step [95 % interval] from which the learned place holds a sink: the sink logit's share (sink
    logit cells) or Sink_* (k*), per seed the persistent onset, censored runs as +inf."""
    onset_of = (lambda r: r.logit_onset) if s.spec.design == "sink_logit" else (lambda r: r.star_onset)
    median, (lo, hi), censor = median_onset(s.runs, onset_of)
    return median, lo, hi, f"{step_text(median, censor)} [{step_text(lo, censor)}, {step_text(hi, censor)}]"


def _sink_lr(rep, c, paper):
    cells = _lr_cells(c, paper)
    if not cells:
        rep.skipped("the sink logit's learning rate", "no cell of cells.SINK_AXES' designs in the files")
        return None, None
    cols = ["cell", "seeds", "the learned sink from step (median [95 % bootstrap])",
            "S_h at the end (largest, mean [95 % bootstrap])", "sink logit's share (converged)",
            "||k*|| (largest, last)", "||v*|| (largest, last)", "alpha_* (converged)", "paper: Sink_1 (converged, %)",
            "where the sink went (paper)", "paper: verdict", "where the sink sits (per layer: seeds)"]
    rows = [[s.label, s.n, _learned_sink_onset(s)[3], seeds_mean_text(s, "sink_logit"), s.mean_of("logit_share"),
             s.mean_of("k_norm"), s.mean_of("v_norm"), s.mean_of("alpha_star"), converged_text(s.paper),
             outcomes_text(s.paper), s.paper.verdict, s.where_text()] for s in cells]
    table = rep.table(Table("atlas_sink_lr", "Is the sink logit (and k*, v*) limited by its learning rate?", cols, rows,
                            {c: ".3f" for c in cols[4:8]},
                            note="3 layers, rows anywhere. S_h starts at 0 (gpt-oss) or log T = log 64; the lr of the "
                                 "sink tensors is the run's (1x) or 10x (--sink-lr-scale). The learned sink from: "
                                 "the step from which the sink logit's share of the rows (largest head) stays >= eps, "
                                 "or Sink_* above 1 % (k*), to the end; '> S': not by the budget."))
    logit_cells = [s for s in cells if s.spec.design == "sink_logit"]
    panels = [dict(ylabel=ylabel, series=_series_band(logit_cells, name), logx=False)
              for ylabel, name in (("S_h (largest head)", "sink_logit"),
                                   ("the sink logit's share of a row (largest head)", "sink_logit_share"))]
    fig = None
    if all(p["series"] for p in panels):
        fig = rep.figure("atlas_sink_logit", "The sink logit over training, by its initial value and lr",
                         "The sink logit S_h of the largest head and its share of a text row (e^S_h / Z_i, mean over "
                         "the probe's rows), mean over seeds with its 95 % bootstrap interval, for each sink-logit cell "
                         "at 3 layers with rows anywhere: S_h from 0 or log 64, at 1x or 10x the run's lr.",
                         figures.band_panels, panels, xlabel="step")
    return table, fig


def seeds_mean_text(s, attr):
    """The mean over a cell's seeds of a run attribute with its 95 % bootstrap interval."""
    mean, lo, hi = mean_interval([getattr(r, attr) for r in s.runs])
    return "—" if math.isnan(mean) else f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def _lr_lines(c, paper):
    """Per design of SINK_AXES: each axis's learned sink (from which step, S_h or ||k*||) against the design as it
    is, and whether the intervals of the steps tell them apart."""
    out = []
    for design in c.SINK_AXES:
        group = [s for s in _lr_cells(c, paper) if s.spec.design == design]
        if not group:
            continue
        base = group[0] if not group[0].spec.axis else None
        parts = []
        for s in group:
            median, lo, hi, text = _learned_sink_onset(s)
            compared = ""
            if base is not None and s is not base:
                _, base_lo, base_hi, _ = _learned_sink_onset(base)
                compared = ("; earlier than at 1x from 0" if hi < base_lo else "; later than at 1x from 0"
                            if lo > base_hi else "; the intervals do not tell it from 1x from 0")
            parts.append(f"{s.spec.axis or 'at 1x, from the default start'}: the learned sink from step {text}"
                         f"{compared}, {_lr_measure(s)}, {_verdicts(s)}")
        out.append(f"Is {c.DESIGNS[design].label} limited by its learning rate? " + "; ".join(parts) + ".")
    return out


def _lr_measure(s):
    if s.spec.design == "sink_logit":
        return (f"S_h at the end {seeds_mean_text(s, 'sink_logit')}, its share of the rows "
                f"{_fmt(s.mean_of('logit_share'))}")
    return f"||k*|| {_fmt(s.mean_of('k_norm'))}, alpha_* {_fmt(s.mean_of('alpha_star'))}"


def _fmt(x):
    return "?" if x is None else f"{x:.3f}"
