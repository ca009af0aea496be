"""The emergence atlas's statistics (issue 42): every sink-related design on Bigram-Backcopy, many seeds each,
run to convergence (jobs/atlas). The report's section "Emergence atlas" (analysis/sections/atlas.py) shows
what this module computes.

A run of the atlas is a sinklab-pretrain --bbm-meta run named atlas.<scale>.<cell>.s<seed>, its results file
at <atlas>/<scale>/<cell>/seed<k>/results.h5 beside atlas_status.json ({"stopped": "converged" | "cap" |
"budget", "steps": N, "rule": "..."}, written by the atlas's runner).

Two measures of the first position's sink (MEASURES), each with its emergence step and verdict:
  - "guo", Guo et al.'s: the BOS attention, the mean attention of the non-trigger queries to position 0 at the
    layer and head where it is largest (analysis.results.bos_attention; proxy scores* where the rows are not
    distributions); a sink from the first evaluation from which it stays at or above eps (0.3, the report's --eps)
    to the run's last (analysis.stats.emergence.persistent_onset_step);
  - "paper", the paper's: Sink_1^eps, the share of heads (layer, head) whose mean attention of every query to
    the first token, alpha_1 averaged over the probe sequences (eval/alpha), exceeds eps (Sec. 3.2; T = the probe
    length, the paper's 64 at the small and paper scales); a sink from the first evaluation from which it stays
    above SINK_FREE_SHARE = 1 %, the paper's sink-free line, to the last: at these sizes (1-3 heads), from which
    some head holds one. The reference code's per-sequence average (eval/sink: the share of (sequence, layer,
    head) triples) is kept beside it; with 100 sequences and 3 heads a few triples pass 1 % in runs whose heads'
    mean attention to the first token is 0.1 (measured: the paper scale's softmax, 1.1 %), so its 1 % line
    reads noise as a sink here.
A run without a persistent sink is censored at its last step (its sink, if any, comes later than that).
Per run (measure_run): by each measure the emergence step and the converged value (the mean over the last
CONVERGED_SHARE of its evaluations, at least one); the bias position's Sink_*^eps (sink token / k*) and its onset
by the paper's rule; where the sink sits in each layer (WHERE_RULE: the first position, k* or the sink token, the
sink logit's share of the rows, BOS / <d> inside the rows); at the last evaluation the copy loss, the raw weight
on BOS and on an average other key (best layer and head; at step 0 too), the BOS value and residual norm ratios
(best layer), the sink logits S_h and ||k*||, ||v*||; how the run stopped (atlas_status.json).
Where the sink went, by each measure (MOVED_RULE): moved (on the bias position, not the first), kept, split (on
both), none: the bias position read by Sink_*^eps over heads (alpha_*) with the paper's 1 % line; the first
position by the measure.
Per cell and scale (cell_stats), for each measure: the fraction of seeds with a sink and its Wilson score
interval; the median emergence step (the lower median, censored runs as +inf) with the percentile interval of its
exact bootstrap distribution; the converged value's mean with a percentile bootstrap interval (seeded
resampling); the seeds that moved the sink; the verdict against the cell's expectation by VERDICT_RULES, which
read the intervals, never one run.
Across scales (compare_scales): a cell run at two scales (the principal cells at the small and the cheap one)
has the counts its verdict reads compared by Fisher's exact test, and both scales' seeds pooled (SCALE_RULE).
"""
import csv
import json
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from statistics import NormalDist

import numpy as np

from analysis.describe import DEFAULTS  # sinklab-pretrain's defaults of what a job file may leave out
from analysis.results import DEFAULT_EPS, bos_attention, ini_settings, match_eps
from analysis.stats.emergence import RULE_TEXT, SINK_FREE_SHARE, persistent_onset_step, rule_text

CONFIDENCE = 0.95
CONVERGED_SHARE = 0.10     # the converged BOS attention: mean over this share of the last evaluations
BOOTSTRAP_RESAMPLES = 10000
BOOTSTRAP_SEED = 42        # fixed: the same files give the same intervals
STATUS_FILE = "atlas_status.json"
RUN_NAME = re.compile(r"^atlas\.(?P<scale>[^.]+)\.(?P<cell>.+)\.s(?P<seed>\d+)$")
EXPECT_KINDS = ("sink", "no_sink", "moved_to_bias", "disputed", "none")
VERDICTS = ("agrees", "disagrees", "inconclusive", "disputed", "no expectation")
MEASURES = ("guo", "paper")
MEASURE_NAMES = {"guo": "Guo's BOS attention", "paper": "the paper's Sink_1"}
STOPS = {"converged": "converged", "cap": "at the cap", "budget": "at the budget"}  # atlas_status.json's "stopped"

# The statistics as the report states them.
SINK_RULES = {
    "guo": ("Guo's measure: a run has a sink when its BOS attention (the mean attention of the non-trigger queries "
            "to position 0, best layer and head) has an emergence step at {eps}: " + RULE_TEXT),
    "paper": ("the paper's measure: a run has a sink when its Sink_1^{eps} (the share of heads whose mean attention "
              "of every query to the first token, over the probe sequences, exceeds {eps}; T = the probe length) "
              "has an emergence step at " f"{SINK_FREE_SHARE:g} %, the paper's sink-free line (App. C): " +
              rule_text("Sink_1^{eps}", f"{SINK_FREE_SHARE:g} %", strict=True)),
}
MOVED_RULE = ("where the sink went, by each measure: the bias position (sink token x* or k*) holds one when its "
              "Sink_*^{eps} (the share of heads whose mean attention of every query to it exceeds {eps}) stays above "
              f"{SINK_FREE_SHARE:g} %" " to the last "
              "evaluation (the paper's line); the first position holds one by the measure's sink rule; moved = "
              "the bias position only, kept = the first only, split = both, none = neither. The paper's column "
              "reads both positions alike (every query, share of heads); Guo's reads the first position by the "
              "non-trigger queries' best head")
WHERE_RULE = ("where the sink sits in a layer: each place whose attention, the mean over the last "
              "{share} of the evaluations of the layer's largest head, exceeds {eps}: the first position (alpha_1, "
              "every query), the bias position (alpha_*: k* or the sink token), the sink logit (its share of the "
              "rows, e^S_h / Z), BOS / <d> inside the rows (rows that start anywhere); the count of seeds per place")
# The place of WHERE_RULE for the document tokens inside rows that start anywhere.
INSIDE_ROWS = "BOS / <d> inside"
MEDIAN_RULE = ("median emergence step: the lower median of the seeds' emergence steps (the smallest step by which at "
               "least half of the seeds had their sink), a run without a sink counted as +inf (censored: its sink, if "
               "any, comes after its last step); its 95 % interval is the 2.5 and 97.5 percentiles of the median's "
               "exact bootstrap distribution (P(median* <= x_(j)) = P(Binomial(n, j/n) >= ceil(n/2)), the limit of "
               "resampling the seeds), so an end that falls on a censored run reads \"> S\", S the later of the "
               "earliest last step of the cell's censored runs and its latest observed emergence step (censored "
               "runs rank after every observed one)")
FRACTION_RULE = "sink fraction: the share of seeds with a sink, with its 95 % Wilson score interval"
MEAN_RULE = (f"converged value of each measure (the BOS attention; Sink_1^eps in %): each run's mean over the last "
             f"{CONVERGED_SHARE:.0%} of its evaluations (at "
             f"least one); per cell the mean over seeds with a 95 % percentile bootstrap interval "
             f"({BOOTSTRAP_RESAMPLES} resamples of the seeds, seed {BOOTSTRAP_SEED})")
VERDICT_RULES = {
    "sink": "expected a sink: agrees when the sink fraction's 95 % interval lies above 0.5, disagrees when it lies "
            "below 0.5, inconclusive when it holds 0.5",
    "no_sink": "expected no sink: agrees when the sink fraction's 95 % interval lies below 0.5, disagrees when it "
               "lies above 0.5, inconclusive when it holds 0.5",
    "moved_to_bias": "expected the sink to move to the bias position (sink token / k*): a seed has moved it by the "
                     "rule of where the sink went; agrees when the 95 % Wilson interval of the share of seeds that "
                     "moved it lies above 0.5, disagrees when below 0.5, inconclusive when it holds 0.5 or without "
                     "eval/sink_star",
    "disputed": "the sources disagree (one expects a sink, another none): the verdict is 'disputed', and the sink "
                "fraction's 95 % interval says which side the runs take (above 0.5: the one expecting a sink; below: "
                "the other; holding 0.5: neither)",
    "none": "no expectation stated: no verdict",
}
SCALE_RULE = ("a cell run at two scales: the seeds its verdict counts (with a sink; for an expected move to the "
              "bias position, those that moved it) at the scale with fewer seeds against the one with more, by "
              "Fisher's exact test (two-sided); the scales differ when p < 0.05, else the smaller one is "
              "consistent with the larger (a weak statement with few seeds: the least p their counts allow is in "
              "the table). Both scales' seeds together give a fraction, its Wilson interval and a verdict by the "
              "rules above; that reading treats the two scales as one population, which a consistent test does not "
              "prove, so the per-scale verdicts stay the atlas's")
# A run learned the copy rule when its last copy loss is at most this many nats: the runner's convergence margin
# (analysis/stats/convergence.py COPY_MARGIN; tests/python/test_atlas_stats.py checks they agree).
LEARNED_COPY_LOSS = 0.1
UNLEARNED_RULE = ("every expectation: inconclusive when more than half of the seeds stopped at the step cap or "
                  f"budget without learning the copy rule (copy loss > {LEARNED_COPY_LOSS:g} nats at the last "
                  "evaluation): the expectations are about trained models, and such a model's attention is not yet "
                  "the one they mean")


@dataclass
class AtlasRun:
    """One run of the atlas and what is measured of it (None: the file lacks the dataset)."""
    run: object               # analysis.results.Run
    scale: str
    cell: str
    seed: int
    steps: np.ndarray = None
    bos: np.ndarray = None    # [n] Guo's measure: BOS attention, best layer and head
    layer: int = 0
    head: int = 0
    onset: int = None         # the emergence step by Guo's measure; None: censored at last_step
    converged: float = None   # mean BOS attention over the last CONVERGED_SHARE of the evaluations
    sink1: np.ndarray = None  # [n] the paper's measure: Sink_1^eps (%) over heads of the sample-mean alpha_1
    sink1_per_sequence: float = None  # the reference code's Sink_1^eps (%, per-sequence indicator), last evaluation
    paper_onset: int = None   # the emergence step by the paper's measure; None: censored
    paper_converged: float = None  # mean Sink_1^eps (%) over the last CONVERGED_SHARE
    star: np.ndarray = None   # [n] Sink_*^eps (%) over heads of the sample-mean alpha_*: sink token / k*
    star_onset: int = None    # Sink_*^eps above SINK_FREE_SHARE from this step to the last; None: never
    copy_loss: float = None
    bos_weight: float = None  # raw weight on BOS, last evaluation, best layer and head
    bos_weight_start: float = None  # the same at step 0 (the initial weights)
    other_weight: float = None  # raw weight on an average other visible key
    value_ratio: float = None   # ||v_BOS|| / mean ||v_other||, best layer, last evaluation
    residual_ratio: float = None  # ||h_BOS|| / mean ||h_other||
    sink_star: float = None   # Sink_*^eps (%), last evaluation
    alpha_star: float = None  # alpha_* (sink token / k*), largest head, mean over the last CONVERGED_SHARE
    logit_share: float = None  # the sink logit's share of the rows, largest head, the same mean
    logit_onset: int = None   # the step from which the largest head's sink-logit share stays >= eps; None: never
    sink_logit: float = None  # the largest S_h at the last evaluation
    k_norm: float = None      # the largest ||k*|| at the last evaluation
    v_norm: float = None      # the largest ||v*||
    where: list = field(default_factory=list)  # per layer: the places that hold a sink (WHERE_RULE)
    stopped: str = ""         # atlas_status.json: "converged" | "cap" | "budget"; "" when there is none
    status_steps: int = None
    status_rule: str = ""
    boundary: float = None    # rows that start anywhere: attention to BOS / <d> inside the rows (best layer)
    settings: dict = field(default_factory=dict)  # the run's config (sinklab-pretrain's names)
    proxy: bool = False
    notes: list = field(default_factory=list)  # (what, why) left out or unknown

    @property
    def last_step(self):
        return int(self.steps[-1])

    @property
    def has_sink(self):
        return self.onset is not None

    def onset_by(self, measure):
        """The emergence step by `measure` (MEASURES); None: censored."""
        return self.onset if measure == "guo" else self.paper_onset

    def converged_by(self, measure):
        return self.converged if measure == "guo" else self.paper_converged

    def outcome(self, measure):
        """Where the sink went by `measure` (MOVED_RULE): "moved", "kept", "split" or "none"; None without Sink_*."""
        if self.star is None:
            return None
        first, bias = self.onset_by(measure) is not None, self.star_onset is not None
        return {(False, True): "moved", (True, False): "kept", (True, True): "split", (False, False): "none"}[
            (first, bias)]

    def setting(self, key):
        return str(self.settings.get(key, DEFAULTS.get(key, ""))).strip().lower()


def read_record(path):
    """{(scale, cell): dict(seeds, sinks, moved (None: not counted), verdict, expect)} of an atlas report's
    atlas_cells.csv by Guo's measure (the columns "sinks", "verdict" of the tables before the paper's measure, "guo:
    sinks", "guo: verdict" after); {} when the file is missing."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {}

    def col(r, name):
        return r.get(name) or r.get(f"guo: {name}") or ""

    moved = "moved to the bias position"
    return {(r["scale"], r["cell"]): dict(seeds=int(r["seeds"]), sinks=int(float(col(r, "sinks") or 0)),
                                          moved=int(float(r.get(moved) or r.get("guo: moved") or "nan"))
                                          if (r.get(moved) or r.get("guo: moved")) else None,
                                          verdict=col(r, "verdict"), expect=r.get("expectation", ""))
            for r in rows}


def record_text(entry):
    """One record entry as the page writes it: "disagrees (8/8 seeds with a sink)"."""
    counted = (f"{entry['moved']}/{entry['seeds']} moved" if entry["moved"] is not None else
               f"{entry['sinks']}/{entry['seeds']} seeds with a sink")
    return f"{entry['verdict']} ({counted})"


def parse_run_name(name):
    """(scale, cell, seed) of an atlas run-name atlas.<scale>.<cell>.s<seed>; None for other names."""
    m = RUN_NAME.match(name)
    return None if m is None else (m["scale"], m["cell"], int(m["seed"]))


def read_status(run_file):
    """atlas_status.json beside a run's results file: (dict, ""); ({}, why) when absent or unreadable."""
    path = Path(run_file).parent / STATUS_FILE
    if not path.is_file():
        return {}, f"no {STATUS_FILE} beside the results file (how the run stopped is unknown)"
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return {}, f"{STATUS_FILE} unreadable ({e})"
    if not isinstance(status, dict) or status.get("stopped") not in STOPS:
        return {}, f"{STATUS_FILE} without \"stopped\": one of {', '.join(STOPS)}"
    return status, ""


def converged_value(values, share=CONVERGED_SHARE):
    """The mean of the last `share` of `values` (at least one value; over the first axis)."""
    v = np.asarray(values, dtype=float)
    return v[-max(1, math.ceil(share * len(v))):].mean(axis=0)


def heads_above(alpha, eps):
    """Sink^eps (%) of each evaluation as the issue states the paper's measure: the share of (layer, head) whose
    mean over the probe sequences of alpha (every query) exceeds eps; alpha [n, L, H]."""
    return 100.0 * (np.asarray(alpha, dtype=float) > eps).reshape(len(alpha), -1).mean(axis=1)


def _largest_converged(series):
    """The largest head's converged value of an [n, L, H] series (None for None)."""
    return None if series is None else float(np.nanmax(converged_value(series)))


def _where(a, ev, eps):
    """Per layer, the places whose converged attention (the layer's largest head) exceeds eps (WHERE_RULE)."""
    bias = "sink token" if a.setting("attn-bias") == "sink-token" else "k*"
    places = [("first position", ev.alpha), (bias, ev.alpha_star), ("sink logit", ev.sink_logit_share),
              (INSIDE_ROWS, ev.boundary_attention)]
    layers = ev.alpha.shape[1] if ev.alpha is not None else 0
    out = []
    for l in range(layers):
        out.append([name for name, series in places if series is not None
                    and np.nanmax(converged_value(series[:, l]), initial=-np.inf) > eps])
    return out


def _measure_sink_places(a, ev, eps):
    """The paper's measure and where a sink sits besides the first position (the bias position, the sink logit)."""
    if ev.alpha is not None:
        a.sink1 = heads_above(ev.alpha, eps)
        a.paper_onset = persistent_onset_step(ev.step, a.sink1, SINK_FREE_SHARE, strict=True)
        a.paper_converged = float(converged_value(a.sink1))
    if ev.alpha_star is not None:
        a.star = heads_above(ev.alpha_star, eps)
        a.star_onset = persistent_onset_step(ev.step, a.star, SINK_FREE_SHARE, strict=True)
    i = match_eps(ev.eps, eps)
    if i is not None:
        a.sink1_per_sequence = float(ev.sink[-1, i])
        if ev.sink_star is not None:
            a.sink_star = float(ev.sink_star[-1, i])
    a.alpha_star, a.logit_share = _largest_converged(ev.alpha_star), _largest_converged(ev.sink_logit_share)
    if ev.sink_logit_share is not None:
        largest = np.asarray(ev.sink_logit_share, dtype=float).reshape(len(ev.step), -1).max(axis=1)
        a.logit_onset = persistent_onset_step(ev.step, largest, eps)
    for series, attr in ((ev.sink_logit, "sink_logit"), (ev.k_bias_norm, "k_norm"), (ev.v_bias_norm, "v_norm")):
        if series is not None:
            setattr(a, attr, float(np.nanmax(series[-1])))
    a.where = _where(a, ev, eps)


def measure_run(run, eps=DEFAULT_EPS):
    """The AtlasRun of an atlas run (None for a run of another name or without evaluations)."""
    parsed = parse_run_name(run.name)
    ev = run.eval
    if parsed is None or ev is None or not len(ev.step):
        return None
    a = AtlasRun(run=run, scale=parsed[0], cell=parsed[1], seed=parsed[2], steps=ev.step, proxy=bool(ev.proxy),
                 settings=ini_settings(run.config))
    a.bos, a.layer, a.head = bos_attention(ev)
    if a.bos is not None:
        a.onset = persistent_onset_step(ev.step, a.bos, eps)
        a.converged = float(converged_value(a.bos))
        for name, attr, row in (("first_weight_raw", "bos_weight", -1), ("rest_weight_raw", "other_weight", -1),
                                ("first_weight_raw", "bos_weight_start", 0)):
            raw = getattr(ev, name)
            if raw is not None:
                setattr(a, attr, float(raw[row, a.layer, a.head, 0]))
    else:
        a.notes.append((f"run {run.name}", "no eval/first_attention (no BOS attention): left out of the atlas"))
    if ev.copy_loss is not None:
        a.copy_loss = float(ev.copy_loss[-1])
    for first, rest, attr in ((ev.vnorm_first, ev.vnorm_rest, "value_ratio"),
                              (ev.hnorm_first, ev.hnorm_rest, "residual_ratio")):
        if first is not None and rest is not None and a.layer < first.shape[1]:
            setattr(a, attr, float(first[-1, a.layer] / rest[-1, a.layer]))
    _measure_sink_places(a, ev, eps)
    status, note = read_status(run.file)
    if note:
        a.notes.append((f"run {run.name}", note))
    ba = ev.boundary_attention
    if ba is not None and np.isfinite(ba[-1]).any():
        a.boundary = float(np.nanmax(ba[-1]))
    a.stopped, a.status_rule = status.get("stopped", ""), str(status.get("rule", ""))
    a.status_steps = status.get("steps")
    return a


# -- statistics ----------------------------------------------------------------------------------------------

def _z(confidence):
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(k, n, confidence=CONFIDENCE):
    """The Wilson score interval of a proportion k / n; (nan, nan) for n = 0."""
    if n == 0:
        return float("nan"), float("nan")
    z, p = _z(confidence), k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # k = 0 and k = n: the ends are exactly 0 and 1 (rounding leaves them a hair off)
    return (0.0 if k == 0 else centre - half), (1.0 if k == n else centre + half)


def decisive_count(n, confidence=CONFIDENCE):
    """The fewest of n seeds that must agree for a proportion's interval to clear 0.5 (VERDICT_RULES can then
    decide); None when not even n of n do."""
    return next((k for k in range(n + 1) if wilson_interval(k, n, confidence)[0] > 0.5), None)


def lower_median(values):
    """The ceil(n/2)-th smallest value (+inf may stand for a censored run); nan for no values."""
    v = np.sort(np.asarray(values, dtype=float))
    return float(v[math.ceil(len(v) / 2) - 1]) if len(v) else float("nan")


def median_bootstrap_distribution(values):
    """The exact bootstrap distribution of lower_median: [(value, P(median* <= value))] over the distinct
    values, as exact fractions. A resample's median is <= x when at least ceil(n/2) of its n draws are <= x,
    each draw with probability #{values <= x} / n."""
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    k = math.ceil(n / 2)
    out = []
    for x in np.unique(v):
        c = int(np.count_nonzero(v <= x))
        ways = sum(math.comb(n, i) * c ** i * (n - c) ** (n - i) for i in range(k, n + 1))
        out.append((float(x), Fraction(ways, n ** n)))
    return out


def median_interval(values, confidence=CONFIDENCE):
    """The percentile interval of lower_median's exact bootstrap distribution: the smallest values whose
    cumulative probability reaches (1 - confidence) / 2 and (1 + confidence) / 2; (nan, nan) for no values."""
    if not len(values):
        return float("nan"), float("nan")
    dist = median_bootstrap_distribution(values)
    tail = (1 - Fraction(confidence).limit_denominator(10 ** 6)) / 2
    lo = next(x for x, p in dist if p >= tail)
    hi = next(x for x, p in dist if p >= 1 - tail)
    return lo, hi


def median_onset(runs, onset_of, confidence=CONFIDENCE):
    """(lower median, its interval, censored end) of the runs' onset steps onset_of(run) (None: censored at the
    run's last step), as the cell statistics compute the emergence step's."""
    onsets = [math.inf if onset_of(r) is None else onset_of(r) for r in runs]
    return lower_median(onsets), median_interval(onsets, confidence), censored_end(onsets, [r.last_step for r in runs])


def censored_end(onsets, lasts):
    """S of a censored median or interval end, which reads "> S": `onsets` per run (+inf: censored), `lasts`
    each run's last step (or tokens). A censored end lies past the earliest censored run's last and, as the
    ranking puts censored runs after every observed onset, past the latest observed one too: the later of the
    two (else an interval [450, > 300] would end before it starts). None when no run is censored."""
    censored = [last for o, last in zip(onsets, lasts) if math.isinf(o)]
    if not censored:
        return None
    return max([min(censored)] + [int(o) for o in onsets if math.isfinite(o)])


def mean_interval(values, confidence=CONFIDENCE, resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED):
    """(mean, low, high): the percentile bootstrap interval of the mean from `resamples` resamples drawn with
    a fixed seed (deterministic); one value gives (x, x, x), none (nan, nan, nan)."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    if not len(x):
        return float("nan"), float("nan"), float("nan")
    if len(x) == 1:
        return float(x[0]), float(x[0]), float(x[0])
    idx = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))
    lo, hi = np.quantile(x[idx].mean(axis=1), [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(x.mean()), float(lo), float(hi)


def fisher_exact(k1, n1, k2, n2):
    """Two-sided p of Fisher's exact test that k1 of n1 and k2 of n2 seeds come from one probability: the
    hypergeometric probability (margins fixed) of every table no more likely than the one seen, summed, in
    exact fractions (so a tie is a tie)."""
    total, hits = n1 + n2, k1 + k2

    def chance(k):   # k of the hits among the first sample's n1 seeds
        return Fraction(math.comb(n1, k) * math.comb(n2, hits - k), math.comb(total, hits))

    seen = chance(k1)
    return float(sum(c for c in map(chance, range(max(0, hits - n2), min(n1, hits) + 1)) if c <= seen))


def holm_adjusted(ps):
    """Holm's step-down adjustment of p values for their number of comparisons, in their order: the i-th smallest
    times (m - i), made non-decreasing in that order, capped at 1. A family rejected by adjusted p < alpha keeps the
    chance of any false rejection below alpha."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def least_fisher_p(n1, n2):
    """The smallest two-sided p fisher_exact can give n1 and n2 seeds: what the test can show at all."""
    return min(fisher_exact(a, n1, b, n2) for a in range(n1 + 1) for b in range(n2 + 1))


def interval_verdict(lo, hi, expect_above):
    """agrees / disagrees / inconclusive of a proportion's interval against 0.5."""
    if math.isnan(lo):
        return "inconclusive"
    if lo > 0.5:
        return "agrees" if expect_above else "disagrees"
    if hi < 0.5:
        return "disagrees" if expect_above else "agrees"
    return "inconclusive"


OUTCOMES = ("moved", "kept", "split", "none")  # where the sink went (AtlasRun.outcome)


@dataclass
class MeasureStats:
    """A cell's statistics by one measure of MEASURES."""
    measure: str
    measured: bool = True     # every run has the measure's series (else its verdict is inconclusive)
    sinks: int = 0
    sink_ci: tuple = (float("nan"), float("nan"))
    median: float = float("nan")          # +inf: censored
    median_ci: tuple = (float("nan"), float("nan"))
    censor_step: int = None   # a censored end reads "> censor_step" (censored_end)
    converged: tuple = (float("nan"), float("nan"), float("nan"))  # mean, low, high
    outcomes: dict = field(default_factory=dict)  # OUTCOMES -> seeds; empty without Sink_* in every run
    moved: int = None         # seeds whose sink moved to the bias position (None without Sink_*)
    moved_ci: tuple = (float("nan"), float("nan"))
    verdict: str = ""
    why: str = ""


@dataclass
class CellStats:
    """One cell of the atlas at one scale: its runs and their statistics by each measure (by[measure])."""
    scale: str
    cell: str
    runs: list                # AtlasRun, by seed
    spec: object = None       # cells.atlas.Cell, None when the table lacks the cell
    by: dict = field(default_factory=dict)  # MEASURES -> MeasureStats

    @property
    def guo(self):
        return self.by["guo"]

    @property
    def paper(self):
        return self.by["paper"]

    @property
    def n(self):
        return len(self.runs)

    @property
    def expect(self):
        return self.spec.expect if self.spec is not None else "none"

    @property
    def label(self):
        return self.spec.label if self.spec is not None else self.cell

    def seeds_holding(self, place):
        """The seeds whose sink sits at `place` (WHERE_RULE) in some layer."""
        return sum(any(place in layer for layer in r.where) for r in self.runs)

    def stopped_text(self):
        """How the runs stopped: "8 converged", "6 converged, 2 at the cap", "8 at the budget", "3 unknown"."""
        counts = {}
        for r in self.runs:
            what = STOPS.get(r.stopped, "unknown")
            counts[what] = counts.get(what, 0) + 1
        return ", ".join(f"{n} {what}" for what, n in counts.items())

    @property
    def unlearned(self):
        """Seeds that stopped at the cap or budget without learning the copy rule (UNLEARNED_RULE)."""
        return sum(r.stopped in ("cap", "budget") and r.copy_loss is not None and r.copy_loss > LEARNED_COPY_LOSS
                   for r in self.runs)

    @property
    def task_not_learned(self):
        """UNLEARNED_RULE decides the cell: more than half of its seeds never learned the task."""
        return self.spec is not None and self.expect != "none" and 2 * self.unlearned > self.n

    def mean_of(self, attr):
        v = [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]
        return float(np.mean(v)) if v else None

    def where_text(self):
        """Where the sink sits, per layer (WHERE_RULE): "layer 1: k* 8/8; layer 2: none 8/8"."""
        layers = max((len(r.where) for r in self.runs), default=0)
        parts = []
        for l in range(layers):
            counts = {}
            for r in self.runs:
                for place in (r.where[l] if l < len(r.where) else []) or ["none"]:
                    counts[place] = counts.get(place, 0) + 1
            parts.append(f"layer {l + 1}: " + ", ".join(f"{place} {k}/{self.n}" for place, k in counts.items()))
        return "; ".join(parts)


def measure_stats(s, measure, confidence=CONFIDENCE):
    """The MeasureStats of cell `s` (its runs and spec set) by `measure`."""
    m = MeasureStats(measure, measured=all(r.converged_by(measure) is not None for r in s.runs))
    m.sinks = sum(r.onset_by(measure) is not None for r in s.runs)
    m.sink_ci = wilson_interval(m.sinks, s.n, confidence)
    m.median, m.median_ci, m.censor_step = median_onset(s.runs, lambda r: r.onset_by(measure), confidence)
    m.converged = mean_interval([r.converged_by(measure) for r in s.runs], confidence)
    outcomes = [r.outcome(measure) for r in s.runs]
    if all(o is not None for o in outcomes):
        m.outcomes = {k: outcomes.count(k) for k in OUTCOMES}
        m.moved = m.outcomes["moved"]
        m.moved_ci = wilson_interval(m.moved, s.n, confidence)
    m.verdict, m.why = verdict(s, m)
    return m


def cell_stats(runs, spec=None, confidence=CONFIDENCE):
    """The CellStats of one cell's runs (AtlasRun with a BOS attention, one scale) against `spec`."""
    s = CellStats(scale=runs[0].scale, cell=runs[0].cell, runs=sorted(runs, key=lambda r: r.seed), spec=spec)
    s.by = {measure: measure_stats(s, measure, confidence) for measure in MEASURES}
    return s


def verdict(s, m):
    """(verdict, what it read) of cell `s` by its MeasureStats `m` against its expectation, by VERDICT_RULES."""
    kind = s.expect
    frac = f"{m.sinks}/{s.n} seeds with a sink, interval {m.sink_ci[0]:.2f}-{m.sink_ci[1]:.2f}"
    if s.spec is None:
        return "no expectation", "the cell is not in the atlas's table (cells/atlas.py)"
    if kind == "none":
        return "no expectation", "none stated"
    if s.task_not_learned:
        return "inconclusive", (f"{s.unlearned}/{s.n} seeds stopped at the cap or budget without learning the copy "
                                f"rule (copy loss > {LEARNED_COPY_LOSS:g})")
    if not m.measured:
        return "inconclusive", f"not every run has {MEASURE_NAMES[m.measure]} at this eps"
    if kind == "sink":
        return interval_verdict(*m.sink_ci, expect_above=True), frac
    if kind == "no_sink":
        return interval_verdict(*m.sink_ci, expect_above=False), frac
    if kind == "moved_to_bias":
        if m.moved is None:
            return "inconclusive", "no eval/sink_star (Sink_*) in every run"
        text = f"{m.moved}/{s.n} seeds moved it, interval {m.moved_ci[0]:.2f}-{m.moved_ci[1]:.2f}"
        return interval_verdict(*m.moved_ci, expect_above=True), text
    if kind == "disputed":
        with_sink, without = s.spec.disputed_by or ("those expecting a sink", "those expecting none")
        side = {"agrees": f"the runs side with {with_sink} (a sink)", "disagrees": f"the runs side with {without} (no "
                "sink)"}.get(interval_verdict(*m.sink_ci, expect_above=True), "the runs side with neither at 95 %")
        return "disputed", f"{frac}: {side}"
    return "inconclusive", f"unknown expectation '{kind}'"


def counted(s, measure="guo"):
    """(k, its Wilson interval, what) of a cell by `measure`: the seeds its verdict counts (those that moved the
    sink to the bias position where that is expected, else those with a sink)."""
    m = s.by[measure]
    if s.expect == "moved_to_bias" and m.moved is not None:
        return m.moved, m.moved_ci, "seeds that moved it"
    return m.sinks, m.sink_ci, "seeds with a sink"


@dataclass
class ScaleComparison:
    """One cell at two scales: the reference (the scale with more seeds) against the other (SCALE_RULE)."""
    ref: CellStats
    other: CellStats
    p: float                  # Fisher's exact test, two-sided
    least_p: float            # the smallest p the two seed counts allow
    pooled: CellStats         # both scales' seeds as one cell (its fraction and verdict; steps not comparable)

    @property
    def what(self):
        """What the counts are: counted() of the reference scale (the other scale counts alike when its runs
        hold Sink_* too)."""
        return counted(self.ref)[2]

    @property
    def differs(self):
        return self.p < 1 - CONFIDENCE


def compare_scales(cells, confidence=CONFIDENCE):
    """The ScaleComparison of every cell found at more than one scale, in the order of `cells`: each other
    scale against the one with the most seeds (the first of them on a tie)."""
    by_cell = {}
    for s in cells:
        by_cell.setdefault(s.cell, []).append(s)
    out = []
    for group in by_cell.values():
        ref = max(group, key=lambda s: s.n)   # max keeps the first of equals
        for other in (s for s in group if s.scale != ref.scale):
            k1, k2 = counted(ref)[0], counted(other)[0]
            pooled = cell_stats(ref.runs + other.runs, ref.spec, confidence)
            pooled.scale = f"{ref.scale} + {other.scale}"
            out.append(ScaleComparison(ref, other, fisher_exact(k1, ref.n, k2, other.n),
                                       least_fisher_p(ref.n, other.n), pooled))
    return out


def step_text(x, censor_step):
    """An emergence step as the page writes it: "240", or "> 1000" for a censored (+inf) one."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"> {censor_step}" if math.isinf(x) else f"{int(x)}"


def atlas_cells(runs, specs, eps=DEFAULT_EPS):
    """The atlas's runs (analysis.results.Run) grouped into CellStats, in the order of `specs` ({name: Cell},
    the table's order) within each scale (in order of appearance), cells not in the table last; and the notes
    (runs left out, and why)."""
    measured, notes, seen = [], [], set()
    for r in runs:
        a = measure_run(r, eps)
        if a is None:
            continue
        key = (a.scale, a.cell, a.seed)
        if key in seen:
            notes.append((f"run {r.name}", "given twice: the first one kept"))
            continue
        seen.add(key)
        notes += a.notes
        if a.bos is not None:
            measured.append(a)
    scales = list(dict.fromkeys(a.scale for a in measured))
    order = {name: i for i, name in enumerate(specs)}
    groups = {}
    for a in measured:
        groups.setdefault((a.scale, a.cell), []).append(a)
    keys = sorted(groups, key=lambda k: (scales.index(k[0]), order.get(k[1], len(order)), k[1]))
    return [cell_stats(groups[k], specs.get(k[1])) for k in keys], notes
