"""Section "Sink emergence (Bigram-Backcopy)", the page's first after the emergence atlas (sections/atlas.py, whose
runs it leaves out): sinklab's own study of the paper's axes on the Bigram-Backcopy task (data_prep bbm, Guo et
al. 2024), where a sink emerges on a CPU in minutes. Every
Bigram-Backcopy run of the files (sinklab-pretrain --bbm-meta: eval/copy_loss, eval/first_attention by query
group) is drawn on one plot of BOS attention against steps (the form of the paper's Fig. 4 middle) beside its
copy and bigram validation losses, then the first token's residual (hidden-state) and value norms against
the others', the raw weights of the runs whose attention rows are not distributions, and one table: per run
its variant, final Sink_1^eps, the step from which the BOS attention stays at or above eps to the last
evaluation (where a sink emerged), the copy loss, the paper's expectation for the cell and whether the run
agrees, then each rule in use. The statistics (which cell a run is, BOS attention, the agreement rules) are
analysis/stats/bbm.py's; a cell without a run is listed as not run.
"""
import json
from pathlib import Path

from analysis import figures
from analysis.results import match_eps, tokens_at, tokens_text
from analysis.sections.labels import run_labels
from analysis.job_index import steps_setting
from analysis.stats import convergence
from analysis.stats.atlas import read_record, record_text
from analysis.stats.bbm import STUDY, conditions, expectation_text, judge, rule_text, study_runs
from analysis.tables import Table, plain_float
from cells.atlas import ATLAS_RECORD


def _loss_floor(bs):
    """The bigram loss floor (nats) of the task, from the bbm.json the runs name (data_prep bbm's
    loss_floor_nats), when it can be read here; None otherwise."""
    for b in bs:
        meta = b.run.eval.bbm_meta
        for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
            p = base / meta if meta else None
            if p is not None and p.is_file():
                try:
                    return float(json.loads(p.read_text())["loss_floor_nats"]["bigram"])
                except (ValueError, KeyError, TypeError, OSError):
                    return None
    return None


def _name(b):
    return b.label + (" *" if b.proxy else "")


def write_section(rep, data):
    """The section: the figures, the table of every cell, the no-sink runs' verdicts, the rules; findings."""
    group, cells, bs = study_runs(data.runs, run_labels(data.runs), data.job_index, data.eps)
    eps = data.eps
    if not bs:
        rep.skipped("Sink emergence (Bigram-Backcopy)", "no Bigram-Backcopy run (sinklab-pretrain --bbm-meta) in "
                    "the files")
        return
    rep.section("Sink emergence (Bigram-Backcopy)", anchor="bbm")
    rep.para("The paper's axes on the Bigram-Backcopy task (data_prep bbm; Guo et al. 2024): a small transformer "
             "learns to copy the token before each trigger character and to predict the others from bigram "
             "statistics; a sink on BOS lets its non-trigger queries do nothing. BOS attention: the mean attention "
             "of the non-trigger queries (the BOS query included) to position 0, Guo's measure, at the layer and "
             "head where it is largest (best layer). The paper's 60M models grow a sink after 1-2k steps of 1M "
             "tokens; Guo's one-layer model after about 200-300 steps of 131k tokens.")
    by_key = {}
    for b in bs:  # a run named as its job file serves as the cell's reference before one matched by settings
        if b.cell is not None and (b.key not in by_key or b.matched == "run-name"):
            by_key[b.key] = b
    fig, raw_fig = _figures(rep, bs, eps)
    table, verdicts = _table(rep, cells, bs, by_key, eps)
    bases = [b for b in bs if b.cell is not None and b.cell.expect_kind == "sink" and not b.proxy
             and b.extra["first_weight_raw"] is not None]
    base = min(bases, key=lambda b: b.key != "softmax", default=None)  # the softmax base cell first
    no_sink = {id(b): _sigmoid_text(b, base, eps) for b in bs}
    for b in bs:
        if no_sink[id(b)]:
            rep.para(no_sink[id(b)])
    missing = [key for cell, job, settings, key in cells if not any(b.cell is cell for b in bs)]
    if missing:
        rep.para(f"Not run (no results file given holds them): {', '.join(f'{STUDY}.{k}' for k in missing)}.",
                 cls="note")
    used = sorted({(n, r) for cell, *_ in cells for n, r in conditions(cell.expect_kind)},
                  key=lambda t: (t[0], t[1] or ""))
    if used:
        rep.heading(3, "The agreement rules (a cell's rule: its conditions joined by +, each of them must hold)")
        rep.bullets([f"{n}" + (f":{r}" if r else "") + " — " + rule_text(n, r, eps) for n, r in used])
    _series_table(rep, bs, eps)

    # Findings: the tally first, then each run (those expected to have no sink: their verdict paragraph).
    for b, verdict, measured in verdicts:
        if no_sink[id(b)]:
            rep.finding(no_sink[id(b)], raw_fig or fig)
        else:
            rep.finding(_run_finding(b, verdict, measured, eps), fig)
    judged = [(b, v) for b, v, _ in verdicts if v]
    if judged:
        rep.finding(_tally(bs, judged, missing, eps), table, lead=True)


def _figures(rep, bs, eps):
    """BOS attention and the losses of every run, the norms, the raw weights; (their anchors: emergence, raw)."""
    drawn = [b for b in bs if b.bos is not None]
    for b in bs:
        if b.bos is None:
            rep.skipped(f"run {b.label}", "no eval/first_attention (the BOS attention figure and rules)")
    if not drawn:
        return None, None
    floor = _loss_floor(bs)
    panels = [dict(ylabel="BOS attention, best layer", title="non-trigger queries to BOS",
                   series=[(_name(b), b.steps, b.bos) for b in drawn], hlines=[(f"eps = {eps:g}", eps)])]
    losses = [b for b in drawn if b.run.eval.copy_loss is not None]
    if losses:
        panels.append(dict(ylabel="copy loss (nats)", title="copy positions",
                           series=[(_name(b), b.steps, b.run.eval.copy_loss) for b in losses]))
        panels.append(dict(ylabel="bigram loss (nats)", title="bigram positions",
                           series=[(_name(b), b.steps, b.run.eval.bigram_loss) for b in losses],
                           hlines=[] if floor is None else [(f"bigram floor {floor:.3f} (bbm.json)", floor)]))
    colours = figures.label_colours([_name(b) for b in drawn])  # a run keeps its colour in every figure
    fig = rep.figure("bbm_emergence", "Sink emergence on Bigram-Backcopy",
                     "BOS attention of non-trigger queries (best layer) against training steps for every "
                     "Bigram-Backcopy run (the form of the paper's Fig. 4 middle), with the copy and bigram "
                     f"validation losses beside it; dotted: eps = {eps:g} and the task's bigram loss floor. "
                     "Runs marked * are read through proxy scores; for the no-BOS run the first position holds "
                     "any character; for the window run only the first w queries see BOS.",
                     figures.run_panels, panels, colours=colours)
    _norms_figure(rep, drawn, colours)
    return fig, _raw_figure(rep, drawn, colours)


def _table(rep, cells, bs, by_key, eps):
    """The table of every cell of the study (a row per run, "not run" without one), then the runs that are
    none; (its anchor, [(run, verdict, measured)])."""
    settings_of = {id(cell): settings for cell, job, settings, key in cells}
    rows, stars, verdicts, seen = [], set(), [], set()
    cols = ["variant", "run", "the paper's expectation", "rule", f"Sink_1^{eps:g} (%)", "BOS attention",
            f"step from which BOS attention stays >= {eps:g}", "copy loss", "measured", "agrees"]

    def add(variant, b, expect, kind):
        if b is None:
            rows.append([variant, "not run", expect, kind, None, None, None, None, None, "not run"])
            return
        job_steps = None if b.cell is None else steps_setting(settings_of.get(id(b.cell), {}))
        verdict, measured = judge(b, by_key, eps, job_steps)
        cross = b.cross(eps)
        first = cross if cross is not None else (None if b.bos is None else f"not in {b.last_step()} steps")
        row = [variant, b.label + (" (matched by its settings)" if b.matched == "settings" else ""), expect, kind,
               b.extra["sink1"], None if b.bos is None else float(b.bos[-1]), first, b.extra["copy"], measured,
               verdict or "—"]
        if b.proxy:
            stars.update({(len(rows), 4), (len(rows), 5)})
        rows.append(row)
        verdicts.append((b, verdict, measured))

    for cell, job, settings, key in cells:
        mine = [b for b in bs if b.cell is cell]
        for b in mine or [None]:
            add(cell.label, b, cell.expect, cell.expect_kind)
        seen.update(id(b) for b in mine)
    for b in bs:
        if id(b) not in seen:
            add("(not a cell of the study)", b, "—", "—")
    table = rep.table(Table("bbm", f"Bigram-Backcopy: each run against the paper's expectation (last evaluation; eps = "
                            f"{eps:g})", cols, rows, {cols[4]: ".2f", "BOS attention": ".3f", "copy loss": ".4f"},
                            stars, note="BOS attention: of non-trigger queries, best layer, last evaluation. agrees: "
                                        "the rule of the cell's kind below; undecided where the files cannot decide "
                                        "it (why in 'measured')."))
    return table, verdicts


def _tally(bs, judged, missing, eps):
    """The study in one sentence: how many runs grew a sink, how many agree, which disagree or are undecided."""
    agree = sum(v == "agrees" for _, v in judged)
    sinks = sum(b.cross(eps) is not None for b in bs)
    text = (f"A sink (BOS attention >= {eps:g}) emerged in {sinks} of {len(bs)} Bigram-Backcopy run(s); {agree} of "
            f"{len(judged)} agree with the paper's expectation")
    dis = [b.label for b, v in judged if v == "disagrees"]
    und = [b.label for b, v in judged if v == "undecided"]
    text += f"; {len(dis)} disagree ({', '.join(dis)})" if dis else "; none disagrees"
    if und:
        text += f"; {len(und)} undecided ({', '.join(und)})"
    if missing:
        text += f"; not run: {len(missing)} cell(s)"
    return text + "."


def atlas_context(b):
    """For a judged run of the study, which ran a fixed number of steps: whether the atlas's convergence rule
    (analysis/stats/convergence.py) held at its last evaluation, and the emergence atlas's verdicts of its cell,
    run to convergence (their record, cells/atlas.py ATLAS_RECORD); "" when neither can be said."""
    ev, last = b.run.eval, b.last_step()
    if b.bos is None or ev.copy_loss is None:
        text = f"a verdict at step {last}, where the run's job file stopped it"
    elif convergence.check(b.steps, ev.copy_loss, b.bos)[0]:
        text = f"a verdict at step {last}, where the atlas's convergence rule holds"
    else:
        text = f"a verdict of a run cut off at step {last}, before the atlas's convergence rule held"
    record = read_record(ATLAS_RECORD)
    found = [(scale, record[(scale, b.key)]) for scale in ("small", "cheap") if (scale, b.key) in record]
    if found:
        text += ("; the emergence atlas's verdict of its cell, run to convergence (Guo's measure, "
                 f"{ATLAS_RECORD.parent.parent.name}): " +
                 ", ".join(f"{scale} scale {record_text(entry)}" for scale, entry in found))
    return text


def _run_finding(b, verdict, measured, eps):
    """One run's sentence: when its BOS attention reached eps (or that it did not in its steps and tokens) and
    its value at the last evaluation, then the paper's expectation, the verdict and what else the rule read."""
    star = "*" if b.proxy else ""
    head = f"{b.label} ({b.cell.label})" if b.cell is not None else b.label
    last = b.last_step()
    if b.bos is None:
        text = f"{head}: no BOS attention in the file ({last} steps)"
    else:
        cross = b.cross(eps)
        v = float(b.bos[-1])
        if cross is not None:
            text = (f"{head}: a sink emerged at step {cross} ({tokens_text(tokens_at(b.run, cross))} tokens; BOS "
                    f"attention >= {eps:g}), {v:.2f}{star} at step {last}")
        else:
            text = f"{head}: no sink in {last} steps ({tokens_text(b.extra['tokens'])} tokens; BOS attention " \
                   f"{v:.2f}{star})"
    if verdict:
        kind = b.cell.expect_kind
        extra = measured if kind != "sink" else measured.partition("; ")[2]
        text += f" — the paper expects {expectation_text(kind)}: {verdict}" + (f" ({extra})" if extra else "")
        context = atlas_context(b)
        text += f" ({context})" if context else ""
    return text + "."


def _norms_figure(rep, drawn, colours):
    """The first token's residual and value norms against the mean of the others', at each run's best layer."""
    res, val = [], []
    for b in drawn:
        ev, l = b.run.eval, b.layer
        if ev.hnorm_first is not None and ev.hnorm_rest is not None:
            res.append((_name(b), b.steps, ev.hnorm_first[:, l] / ev.hnorm_rest[:, l]))
        if ev.vnorm_first is not None and ev.vnorm_rest is not None:
            val.append((_name(b), b.steps, ev.vnorm_first[:, l] / ev.vnorm_rest[:, l]))
    if not res and not val:
        rep.skipped("Bigram-Backcopy: BOS norms", "no eval/hnorm_first or vnorm_first")
        return
    panels = []
    if res:
        panels.append(dict(ylabel="||h_BOS|| / mean ||h_other||", title="residual stream (layer output)",
                           series=res, hlines=[("equal norms", 1.0)]))
    if val:
        panels.append(dict(ylabel="||v_BOS|| / mean ||v_other||", title="value vectors", series=val,
                           hlines=[("equal norms", 1.0)]))
    rep.figure("bbm_norms", "BOS residual and value norms over training",
               "The first token's l2 norms against the mean of the other tokens' at each run's best layer (where "
               "its BOS attention is largest at the last evaluation): the hidden state leaving the layer (the "
               "residual stream) and the value vector. A sink token grows a large residual norm and a small value "
               "(paper Sec. 3, Fig. 2).", figures.run_panels, panels, colours=colours)


def _raw_figure(rep, drawn, colours):
    """Raw weights on BOS (solid) and on an average other key (dashed) of the runs read through proxy scores,
    with the softmax runs' for comparison."""
    proxy = [b for b in drawn if b.proxy and b.run.eval.first_weight_raw is not None]
    if not proxy:
        return None
    ref = [b for b in drawn if not b.proxy and b.run.eval.first_weight_raw is not None and b.cell is not None
           and b.cell.expect_kind == "sink"][:2]
    series, dashed = [], []
    for b in proxy + ref:
        ev = b.run.eval
        series.append((_name(b), b.steps, ev.first_weight_raw[:, b.layer, b.head, 0]))
        dashed.append((_name(b), b.steps, ev.rest_weight_raw[:, b.layer, b.head, 0]))
    return rep.figure("bbm_raw_weights", "Raw attention weights: BOS against the other keys",
               "The absolute weight a non-trigger query gives BOS (solid) and an average other visible key "
               "(dashed), at the best layer, for the runs whose attention rows are not distributions (read "
               "through proxy scores*) and softmax runs for comparison (their weights are the attention).",
               figures.run_panels, [dict(ylabel="raw attention weight", series=series, dashed=dashed, logy=True,
                                                solid_label="on BOS", dashed_label="on an average other key")],
               colours=colours)


def _series_table(rep, bs, eps):
    """Every evaluation of every run, the numbers of the figures (CSV, linked)."""
    cols = ["run", "step", "tokens", "valid loss", "copy loss", "bigram loss", "BOS attention (best layer)",
            "trigger queries' BOS attention", "raw weight on BOS", "raw weight on another key",
            f"Sink_1^{eps:g} (%)", "||h_BOS|| / mean ||h_other||", "||v_BOS|| / mean ||v_other||"]
    rows = []
    for b in bs:
        ev, l, h = b.run.eval, b.layer, b.head
        i = match_eps(ev.eps, eps)

        def at(a, k, *idx):
            return None if a is None else plain_float(a[(k,) + idx])

        for k, s in enumerate(ev.step):
            ratio = [None if f is None or r is None else plain_float(f[k, l] / r[k, l])
                     for f, r in ((ev.hnorm_first, ev.hnorm_rest), (ev.vnorm_first, ev.vnorm_rest))]
            trig = None if ev.first_attention is None or ev.first_attention.shape[3] < 2 else \
                plain_float(ev.first_attention[k, l, h, 1])
            rows.append([b.label, int(s), tokens_at(b.run, int(s)), plain_float(ev.valid_loss[k]), at(ev.copy_loss, k),
                         at(ev.bigram_loss, k), None if b.bos is None else plain_float(b.bos[k]), trig,
                         at(ev.first_weight_raw, k, l, h, 0), at(ev.rest_weight_raw, k, l, h, 0),
                         None if i is None else plain_float(ev.sink[k, i])] + ratio)
    rep.table(Table("bbm_series", "Bigram-Backcopy runs: every evaluation (the numbers of the figures)", cols, rows,
                    inline=False))


def _sigmoid_text(b, base, eps):
    """For a run expected to have no sink: whether it agrees with the paper's "no sink without normalisation",
    in the paper's measure (proxy scores) and in absolute weights, and why; None for other runs."""
    if b.cell is None or "no_sink" not in b.cell.expect_kind or b.bos is None:
        return None
    x, v = b.extra, float(b.bos[-1])
    a, r = x["first_weight_raw"], x["rest_weight_raw"]
    measure = "proxy scores*" if b.proxy else "attention weights"
    head = f"{b.label} ({b.cell.label}), after {b.last_step()} steps ({tokens_text(x['tokens'])} tokens)"
    if v < eps:
        text = (f"{head}, agrees with the paper's \"no sink without normalisation\": in {measure} (the paper's "
                f"measure) BOS gets {v:.2f} of a non-trigger query's weight, below {eps:g}")
    else:
        text = (f"{head}, disagrees with the paper's \"no sink without normalisation\" in the paper's own "
                f"measure: in {measure} BOS gets {v:.2f} of a non-trigger query's weight, at least {eps:g}")
    if a is not None and r is not None:
        text += f". In absolute weights BOS gets {a:.3g} and an average other key {r:.3g}"
        if v >= eps:
            if a < eps:
                text += (": a large share of a small total. The queries give BOS little weight in absolute terms; "
                         "that is not softmax's sink, where a row's weights sum to one and a query that needs "
                         "nothing must put them somewhere")
            else:
                text += (": BOS carries a large absolute weight as well, a sink in absolute terms too, which the "
                         "paper's finding does not predict")
        if base is not None:
            text += f" (softmax run {base.label}: {base.extra['first_weight_raw']:.3g} on BOS, " \
                    f"{base.extra['rest_weight_raw']:.3g} on another key)"
    context = atlas_context(b)
    return text + (f". This is {context}" if context else "") + "."
