"""The Bigram-Backcopy study's statistics (sinklab's own study of the paper's axes on Guo et al.'s task, data_prep
bbm): which cell of the study a run is, what is measured of it, and the agreement rule of each expectation kind.
The report's section "Sink emergence (Bigram-Backcopy)" (analysis/sections/bbm.py) shows what this module
computes; the emergence atlas's section (analysis/sections/atlas.py) states its expectations in KIND_TEXT's words.

Runs are matched to the study's cells (cells/pretrain.py, group "bbm", through analysis.job_index) by their job
file's run-name, else by their settings (CELL_KEYS, then the closest OPTIMISER_KEYS) when they single out one
cell (study_runs). Each cell's expect_kind is checked by the rule RULES states (judge): every condition of the
kind must agree; a run that stopped short of its steps cannot disagree yet.

"BOS attention" is Guo's measure: the mean attention of the non-trigger queries (the BOS query included) to
position 0, eval/first_attention[..., 0], taken at the layer and head where it is largest ("best layer").
For runs whose attention rows are not distributions (sigmoid without normalisation) it is read through
proxy scores, as the paper's Table 6 measures them, and the raw weights (eval/first_weight_raw beside
eval/rest_weight_raw) are kept too. A sink emerged at the step from which the BOS attention stays at or above eps
to the last evaluation (analysis/stats/emergence.py's rule; a crossing that falls back is none).
"""
from dataclasses import dataclass, field

import numpy as np

from analysis.describe import DEFAULTS  # sinklab-pretrain's defaults of what a job file may leave out
from analysis.job_index import cell_status
from analysis.results import bos_attention, ini_settings, is_atlas_run, is_bbm, match_eps, tokens_at
from analysis.stats.emergence import persistent_onset_step

STUDY = "bbm"         # the group of cells/pretrain.py
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
    cell: object = None       # cells.pretrain.Cell, None when the run is none of the study's cells
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
        the sink emerged, analysis/stats/emergence.py's rule), None if it is below eps at the last one."""
        if self.bos is None:
            return None
        return persistent_onset_step(self.steps, self.bos, eps)

    def last_step(self):
        return int(self.steps[-1])

    def at_step(self, step):
        """The BOS attention at evaluation step `step` (None if the run has no evaluation there)."""
        hit = np.nonzero(self.steps == step)[0]
        return None if self.bos is None or not len(hit) else float(self.bos[hit[0]])


def _norm(value):
    """A setting for comparison: numbers as floats, words lower-case."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value).strip().lower()


def measure(b, eps):
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


def study_runs(runs, labels, job_index, eps):
    """(the study's Group or None, [(cell, job file, settings, key)] of its cells, [BbmRun] of every Bigram-Backcopy
    run of `runs` (named by `labels`), matched to its cell where one is)."""
    group = next((g for g in job_index.studies if g.folder == STUDY), None)
    cells = []  # (cell, job file, settings, key)
    if group is not None:
        for cell in group.cells:
            job, settings = job_index.job(group, cell)
            name = settings.get("run-name", "")
            cells.append((cell, job, settings, name.split(".", 1)[1] if name.startswith(STUDY + ".") else name))
    out = []
    for label, r in zip(labels, runs):
        if not is_bbm(r) or is_atlas_run(r):  # the atlas's many seeds: their own section (analysis/sections/atlas.py)
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
        measure(b, eps)
        out.append(b)
    return group, cells, out


def conditions(kind):
    """'sink+more_than:wd_0' -> [('sink', None), ('more_than', 'wd_0')]."""
    out = []
    for part in filter(None, (p.strip() for p in kind.split("+"))):
        name, _, ref = part.partition(":")
        out.append((name, ref or None))
    return out


def rule_text(name, ref, eps):
    return RULES[name].format(eps=f"{eps:g}", ref=f"{STUDY}.{ref}" if ref else "")


def expectation_text(kind):
    return ", ".join(KIND_TEXT.get(n, n).format(ref=f"{STUDY}.{r}" if r else "") for n, r in conditions(kind))


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
    results = [_judge_one(n, r, b, by_key, eps) for n, r in conditions(b.cell.expect_kind)]
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
