"""Section "Sink emergence (Bigram-Backcopy)", the page's first after the emergence atlas (sections/atlas.py, whose
runs it leaves out): sinklab's own study of the paper's axes on the Bigram-Backcopy task (data_prep bbm, Guo et
al. 2024), where a sink emerges on a CPU in minutes. Every
Bigram-Backcopy run of the files (sinklab-pretrain --bbm-meta: eval/copy_loss, eval/first_attention by query
group) is drawn on one plot of BOS attention against steps (the form of the paper's Fig. 4 middle) beside its
copy and bigram validation losses, then the first token's residual (hidden-state) and value norms against
the others', the raw weights of the runs whose attention rows are not distributions, and one table: per run
its variant, final Sink_1^eps, the step from which the BOS attention stays at or above eps to the last
evaluation (where a sink emerged: analysis/emergence.py's rule; a crossing that falls back is none), the copy
loss, the paper's expectation for the cell and whether the run agrees.

Runs are matched to the study's cells (jobs/pretrain/make_jobs.py, group "bbm", through analysis.job_index)
by their job file's run-name, else by their settings (CELL_KEYS, then the closest OPTIMISER_KEYS) when they
single out one cell. Each cell's expect_kind is checked by the
rule RULES states (the page prints each rule in use); a cell without a run is listed as not run.

"BOS attention" is Guo's measure: the mean attention of the non-trigger queries (the BOS query included) to
position 0, eval/first_attention[..., 0], taken at the layer and head where it is largest ("best layer").
For runs whose attention rows are not distributions (sigmoid without normalisation) it is read through
proxy scores, as the paper's Table 6 measures them, and the raw weights (eval/first_weight_raw beside
eval/rest_weight_raw) are shown too.
"""
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analysis import figures
from analysis.describe import DEFAULTS  # sinklab-pretrain's defaults of what a job file may leave out
from analysis.emergence import persistent_onset_step
from analysis.results import bos_attention, ini_settings, is_atlas_run, is_bbm, match_eps, tokens_at, tokens_text
from analysis.sections.labels import run_labels
from analysis.sections.paper_tables import cell_status
from analysis.tables import Table, plain_float

STUDY = "bbm"         # the group of jobs/pretrain/make_jobs.py
MOVED_SHARE = 50.0    # moved_to_bias: Sink_*^eps of at least this many % of the heads
# The settings that tell the study's cells apart: a run not named as its job file is matched to the cell whose
# model and data settings (CELL_KEYS) it has, and among those to the one that has most of its optimiser's
# (OPTIMISER_KEYS; a run made smaller or faster, e.g. with another batch, still finds its cell).
CELL_KEYS = ("attn-sim", "attn-norm", "attn-bias", "document-rows", "attn-window", "n-layers")
OPTIMISER_KEYS = ("weight-decay", "lr", "global-batch-tokens")

# The agreement rule of each expect_kind, as the page states it ({eps}: the threshold; {ref}: the other cell).
RULES = {
    "sink": "sink: the best layer's BOS attention of non-trigger queries is >= {eps} at the last evaluation.",
    "no_sink": "no sink: the best layer's BOS attention is < {eps} at the last evaluation, as the sink metric "
               "reads the weights (proxy scores* where the rows are not distributions, as the paper's Table 6 "
               "measures them); the raw weights on BOS and on an average other key are shown beside it.",
    "moved_to_bias": "moved to the bias position: Sink_*^{eps} >= " f"{MOVED_SHARE:g}" " % (the share of heads "
                     "whose attention to the sink token or k* exceeds {eps}) and the BOS attention < {eps} at the "
                     "last evaluation.",
    "first_position": "the first position still: rows start anywhere, so position 0 holds any character; the "
                      "non-trigger queries' attention to it is >= {eps} and their attention to BOS and <d> inside "
                      "the rows (eval/boundary_attention, best layer and head) < {eps} at the last evaluation.",
    "absolute_not_window_start": "not on the window's first key: the attention of the queries with a full "
                                 "window to the first key of their window (eval/alpha_k_window, k = 1, best layer "
                                 "and head) is < {eps} at the last evaluation. The BOS attention is no measure "
                                 "here: only the first w of T queries see BOS, so it averages in zeros.",
    "more_than": "larger than in {ref}: the BOS attention at the last evaluation step both runs have is larger.",
    "less_than": "smaller than in {ref}: the BOS attention at the last evaluation step both runs have is smaller.",
    "later_than": "later than in {ref}: the BOS attention reaches {eps} for good (stays there to the last "
                  "evaluation) at a later evaluation step than in "
                  "{ref}, or not at all in a run at least as long as the step where {ref}'s did.",
}
KIND_TEXT = {"sink": "a sink", "no_sink": "no sink", "moved_to_bias": "the sink moved to the bias position",
             "first_position": "the sink on the first position",
             "absolute_not_window_start": "no sink on the window start",
             "more_than": "a larger one than {ref}", "less_than": "a smaller one than {ref}",
             "later_than": "a later one than {ref}"}


@dataclass
class BbmRun:
    """One Bigram-Backcopy run and what the section measures of it (arrays over its evaluations)."""
    label: str
    run: object
    cell: object = None       # make_jobs.Cell, None when the run is none of the study's cells
    job: str = ""             # the cell's job file
    key: str = ""             # the cell's name in the rules (its run-name without "bbm.")
    matched: str = ""         # how: "run-name" or "settings"
    steps: np.ndarray = None
    bos: np.ndarray = None    # [n] best layer's BOS attention of non-trigger queries
    layer: int = 0            # where it is largest at the last evaluation
    head: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def proxy(self):
        return bool(self.run.eval.proxy)

    def cross(self, eps):
        """The evaluation step from which the BOS attention stays at or above eps to the last evaluation (where
        the sink emerged, analysis/emergence.py's rule), None if it is below eps at the last one."""
        if self.bos is None:
            return None
        return persistent_onset_step(self.steps, self.bos, eps)

    def last_step(self):
        return int(self.steps[-1])

    def at_step(self, step):
        """The BOS attention at evaluation step `step` (None if the run has no evaluation there)."""
        hit = np.nonzero(self.steps == step)[0]
        return None if self.bos is None or not len(hit) else float(self.bos[hit[0]])


def _int(text):
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return None


def _norm(value):
    """A setting for comparison: numbers as floats, words lower-case."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value).strip().lower()


def _measure(b, eps):
    """Fills b's arrays from its evaluations."""
    ev = b.run.eval
    b.steps = ev.step
    b.bos, b.layer, b.head = bos_attention(ev)
    x = b.extra
    x["tokens"] = tokens_at(b.run, b.last_step())
    i = match_eps(ev.eps, b.extra["eps"])
    x["sink1"] = None if i is None else float(ev.sink[-1, i])
    x["sink_star"] = None if i is None or ev.sink_star is None else float(ev.sink_star[-1, i])
    x["copy"] = None if ev.copy_loss is None else float(ev.copy_loss[-1])
    x["bigram"] = None if ev.bigram_loss is None else float(ev.bigram_loss[-1])
    for name in ("first_weight_raw", "rest_weight_raw"):
        a = getattr(ev, name)
        x[name] = None if a is None or b.bos is None else float(a[-1, b.layer, b.head, 0])
    x["window_start"] = None if ev.alpha_k_window is None else float(ev.alpha_k_window[-1, :, :, 0].max())
    ba = ev.boundary_attention
    x["boundary"] = None if ba is None or not np.isfinite(ba[-1]).any() else float(np.nanmax(ba[-1]))
    x["boundary_seen"] = ba is not None


def study_runs(data):
    """(the study's Group or None, [BbmRun] of every Bigram-Backcopy run, matched to its cell where one is)."""
    eps = data.eps
    labels = run_labels(data.runs)
    group = next((g for g in data.job_index.studies if g.folder == STUDY), None)
    cells = []  # (cell, job file, settings, key)
    if group is not None:
        for cell in group.cells:
            job, settings = data.job_index.job(group, cell)
            name = settings.get("run-name", "")
            cells.append((cell, job, settings, name.split(".", 1)[1] if name.startswith(STUDY + ".") else name))
    out = []
    for label, r in zip(labels, data.runs):
        if not is_bbm(r) or is_atlas_run(r):  # the atlas's many seeds: their own section (sections/atlas.py)
            continue
        b = BbmRun(label=label, run=r, extra={"eps": eps})
        hit = [c for c in cells if c[2].get("run-name") == r.name]
        how = "run-name"
        if not hit:
            have = ini_settings(r.config)
            hit = [c for c in cells if all(_norm(have.get(k, DEFAULTS.get(k))) == _norm(c[2].get(k, DEFAULTS.get(k)))
                                           for k in CELL_KEYS)]
            score = [sum(_norm(have.get(k)) == _norm(c[2].get(k)) for k in OPTIMISER_KEYS) for c in hit]
            hit = [c for c, n in zip(hit, score) if n == max(score)]
            how = "settings"
        if len(hit) == 1:
            b.cell, b.job, _, b.key = hit[0]
            b.matched = how
        _measure(b, eps)
        out.append(b)
    return group, cells, out


def _kinds(kind):
    """'sink+more_than:wd_0' -> [('sink', None), ('more_than', 'wd_0')]."""
    out = []
    for part in filter(None, (p.strip() for p in kind.split("+"))):
        name, _, ref = part.partition(":")
        out.append((name, ref or None))
    return out


def rule_text(name, ref, eps):
    return RULES[name].format(eps=f"{eps:g}", ref=f"{STUDY}.{ref}" if ref else "")


def expectation_text(kind):
    return ", ".join(KIND_TEXT.get(n, n).format(ref=f"{STUDY}.{r}" if r else "") for n, r in _kinds(kind))


def _judge_one(name, ref, b, by_key, eps):
    """(verdict: 'agrees' | 'disagrees' | 'undecided', what was measured) of one condition."""
    x, star = b.extra, "*" if b.proxy else ""
    if name not in RULES:
        return "undecided", f"no rule for '{name}'"
    if b.bos is None and name != "absolute_not_window_start":
        return "undecided", "no eval/first_attention in the file"
    v = None if b.bos is None else float(b.bos[-1])
    if name == "sink":
        return ("agrees" if v >= eps else "disagrees"), f"BOS attention {v:.2f}{star} at the last evaluation"
    if name == "no_sink":
        raw = ""
        if x["first_weight_raw"] is not None and x["rest_weight_raw"] is not None:
            raw = f" (raw weight on BOS {x['first_weight_raw']:.3g}, on an average other key " \
                  f"{x['rest_weight_raw']:.3g})"
        return ("agrees" if v < eps else "disagrees"), f"BOS attention {v:.2f}{star}{raw}"
    if name == "moved_to_bias":
        if x["sink_star"] is None:
            return "undecided", "no eval/sink_star (Sink_*) in the file"
        ok = x["sink_star"] >= MOVED_SHARE and v < eps
        return ("agrees" if ok else "disagrees"), f"Sink_*^{eps:g} {x['sink_star']:.2f} %{star}"
    if name == "first_position":
        if x["boundary"] is None:
            why = "no BOS or <d> inside the probed rows" if x["boundary_seen"] else "no eval/boundary_attention"
            return ("agrees" if v >= eps else "disagrees"), f"first position {v:.2f}{star}; {why}"
        ok = v >= eps and x["boundary"] < eps
        return ("agrees" if ok else "disagrees"), f"first position {v:.2f}{star}, BOS and <d> inside the rows " \
                                                  f"{x['boundary']:.2f}{star}"
    if name == "absolute_not_window_start":
        if x["window_start"] is None:
            return "undecided", "no eval/alpha_k_window (a probe length below the window)"
        text = f"attention to the window start {x['window_start']:.2f}{star}"
        return ("agrees" if x["window_start"] < eps else "disagrees"), text
    other = by_key.get(ref)
    if other is None:
        return "undecided", f"{STUDY}.{ref} not run"
    if other.bos is None:
        return "undecided", f"{STUDY}.{ref} has no eval/first_attention"
    if name in ("more_than", "less_than"):
        common = sorted(set(b.steps.tolist()) & set(other.steps.tolist()))
        if not common:
            return "undecided", f"no evaluation step in common with {STUDY}.{ref}"
        s = int(common[-1])
        mine, theirs = b.at_step(s), other.at_step(s)
        ok = mine > theirs if name == "more_than" else mine < theirs
        return ("agrees" if ok else "disagrees"), f"{mine:.3f} against {theirs:.3f} in {STUDY}.{ref} at step {s}"
    if name == "later_than":
        mine, theirs = b.cross(eps), other.cross(eps)
        if theirs is None:
            if mine is None:
                return "undecided", f"neither this run nor {STUDY}.{ref} reached {eps:g}"
            return ("disagrees" if other.last_step() >= mine else "undecided"), \
                f"reached {eps:g} at step {mine}; {STUDY}.{ref} not in {other.last_step()} steps"
        if mine is None:
            text = f"not reached in {b.last_step()} steps; {STUDY}.{ref} at step {theirs}"
            return ("agrees" if b.last_step() > theirs else "undecided"), text
        return ("agrees" if mine > theirs else "disagrees"), f"step {mine} against {theirs} in {STUDY}.{ref}"
    return "undecided", f"no rule for '{name}'"


def judge(b, by_key, eps, job_steps=None):
    """(verdict, measured) of a run against its cell's expect_kind: every condition must agree. A run that
    stopped short of its steps (in progress, or cut) cannot disagree yet: it is undecided; one that ran fewer
    steps than its job file's says so."""
    if b.cell is None or not b.cell.expect_kind:
        return "", ""
    results = [_judge_one(n, r, b, by_key, eps) for n, r in _kinds(b.cell.expect_kind)]
    verdicts = {v for v, _ in results}
    verdict = "disagrees" if "disagrees" in verdicts else ("undecided" if "undecided" in verdicts else "agrees")
    measured = "; ".join(t for _, t in results)
    status, note = cell_status(b.run, job_steps)
    if status != "done":
        measured += f"; {status}"
        if verdict == "disagrees":
            verdict = "undecided"
    elif note:
        measured += f"; a shortened run, the job file has {job_steps} steps"
    return verdict, measured


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
    group, cells, bs = study_runs(data)
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
    used = sorted({(n, r) for cell, *_ in cells for n, r in _kinds(cell.expect_kind)}, key=lambda t: (t[0], t[1] or ""))
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
        job_steps = None if b.cell is None else _int(settings_of.get(id(b.cell), {}).get("steps"))
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
    (jobs/atlas/convergence.py) held at its last evaluation, and the emergence atlas's verdicts of its cell, run to
    convergence (their record, jobs/atlas/cells.py ATLAS_RECORD); "" when neither can be said."""
    try:
        from jobs.atlas import cells, convergence
    except ImportError:
        return ""
    from analysis.atlas import read_record, record_text
    ev, last = b.run.eval, b.last_step()
    if b.bos is None or ev.copy_loss is None:
        text = f"a verdict at step {last}, where the run's job file stopped it"
    elif convergence.check(b.steps, ev.copy_loss, b.bos)[0]:
        text = f"a verdict at step {last}, where the atlas's convergence rule holds"
    else:
        text = f"a verdict of a run cut off at step {last}, before the atlas's convergence rule held"
    record = read_record(cells.ATLAS_RECORD)
    found = [(scale, record[(scale, b.key)]) for scale in ("small", "cheap") if (scale, b.key) in record]
    if found:
        text += ("; the emergence atlas's verdict of its cell, run to convergence (Guo's measure, "
                 f"{cells.ATLAS_RECORD.parent.parent.name}): " +
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
