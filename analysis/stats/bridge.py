"""From the toy to text (issue 46): the statistics of jobs/bridge's runs, small LLaMA-style models on real text,
several seeds a cell, evaluated at a log-spaced grid of tokens seen. The report's section "From the toy to text"
(analysis/sections/bridge.py) shows what this module computes.

A run is a sinklab-pretrain run named bridge.<scale>.<cell>.s<seed> (cell = <size>_<rows>_lr<lr>,
cells/bridge.py), its results file beside bridge_status.json (written by the runner at the budget).

Per run (measure_run), at every evaluation: tokens seen (results.tokens_at), Sink_1^eps in % and mean alpha_1
over layers and heads, both measured as the run was trained (a BOS-first run on probe inputs that start with
BOS: eval/sink_k_intervened, eval/alpha_k_intervened), beside uniform attention's alpha_1 (H_T / T). Its onset:
the first evaluation from which Sink_1^eps stays above ONSET_SHARE = 1 % to the last one (analysis.stats.emergence's
persistent rule), in tokens; a run without one is censored at its last tokens. Why 1 % and not the training
runs' 0 %: Sink_1^eps is a share of (probe sequence, layer, head) triples, so one head of one of 100 sequences
above eps already reads 0.06 % in a 16-head model, which real text at these sizes shows within a few hundred
thousand tokens; the paper calls LMs whose Sink_1^eps "maintains a very small value (less than 1%)" sink-free
(App. C, Fig. 28). The 0 % onset is kept beside it (onset_any) for the runs' long form.
Per cell (cell_stats): at each common evaluation the mean over seeds of Sink_1^eps and of mean alpha_1 with a
95 % Student-t interval (t_interval: n - 1 degrees of freedom; with 3 seeds the half-width is 2.48 standard
deviations, wide and honest about 3 draws); the fraction of seeds with an onset (Wilson interval) and the median
onset in tokens (the atlas's lower median with its exact bootstrap interval, censored runs as +inf).
BOS first against packed (compare_rows): for the same size and learning rate, at the same tokens seen, the
difference of the means with a conservative Welch interval (t with min(n_a, n_b) - 1 degrees of freedom).
Onset against size (fit_onsets): a least-squares line of log10(onset tokens) against log10(non-embedding
parameters, the count of Kaplan et al.'s scaling laws: at these sizes the 4096-token embeddings are most of the
weights) over the runs with an onset, where at least two sizes have one.
"""
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analysis.results import DEFAULT_EPS, mean_alpha1, probe_length, sink_series, tokens_at, uniform_alpha1
from analysis.stats.atlas import censored_end, lower_median, median_interval, wilson_interval
from analysis.stats.emergence import SINK_FREE_SHARE, persistent_onset, rule_text

STATUS_FILE = "bridge_status.json"
ONSET_SHARE = SINK_FREE_SHARE  # % of (sequence, layer, head) triples: the onset's threshold (the docstring says why)
RUN_NAME = re.compile(r"^bridge\.(?P<scale>[^.]+)\.(?P<cell>[^.]+)\.s(?P<seed>\d+)$")
CELL_NAME = re.compile(r"^(?P<size>[^_]+)_(?P<rows>bos|packed)_lr(?P<lr>.+)$")
# Student's t, the 97.5 % quantile for 1..30 degrees of freedom (two-sided 95 %); the normal 1.960 beyond.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

ONSET_RULE = rule_text("Sink_1^{eps}", f"{ONSET_SHARE:g} %", strict=True)
CURVE_RULE = ("curves: the mean over a cell's seeds at each evaluation with its 95 % Student-t interval (mean +- "
              "t(0.975, n - 1) s / sqrt(n)); BOS-first runs measured on probe inputs that start with BOS, as they were "
              "trained; packed runs on the probe's plain inputs")
COMPARE_RULE = ("BOS first minus packed: the difference of the two cells' means at the same tokens seen (same size, "
                "same learning rate), with a conservative Welch 95 % interval (t with min(n_a, n_b) - 1 degrees of "
                "freedom); an interval that excludes 0 is a difference at 95 %")


def t_quantile(df):
    """t(0.975, df); nan for df < 1."""
    if df < 1:
        return float("nan")
    return T_975[df - 1] if df <= len(T_975) else 1.960


def t_interval(values):
    """(mean, low, high), the 95 % Student-t interval of the mean; (x, nan, nan) for one value."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if not len(x):
        return float("nan"), float("nan"), float("nan")
    m = float(x.mean())
    if len(x) == 1:
        return m, float("nan"), float("nan")
    half = t_quantile(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - half, m + half


def difference_interval(a, b):
    """(mean(a) - mean(b), low, high): a conservative Welch 95 % interval, min(n_a, n_b) - 1 degrees of freedom."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = float(a.mean() - b.mean())
    df = min(len(a), len(b)) - 1
    if df < 1:
        return d, float("nan"), float("nan")
    half = t_quantile(df) * math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    return d, d - half, d + half


@dataclass
class BridgeRun:
    run: object          # analysis.results.Run
    scale: str
    cell: str
    seed: int
    size: str
    rows: str            # "bos" | "packed"
    lr: str
    n_params: int = None         # every weight (attribute n_params)
    n_params_non_embedding: int = None  # without the token and position embeddings: the fit's x
    steps: np.ndarray = None
    tokens: np.ndarray = None    # [n] tokens seen at each evaluation
    sink: np.ndarray = None      # [n] Sink_1^eps in %
    alpha1: np.ndarray = None    # [n] mean alpha_1 over layers and heads
    uniform: float = None        # alpha_1 of uniform attention at the probe length
    valid_loss: np.ndarray = None
    onset: int = None            # index of the onset evaluation (Sink_1^eps above ONSET_SHARE); None: censored
    onset_any: int = None        # the same above 0 % (the training runs' rule)
    stopped: str = ""            # bridge_status.json's "stopped" ("budget"), "" when absent
    measured_on: str = ""        # what the probe fed (BOS-first runs: inputs that start with BOS)

    @property
    def has_sink(self):
        return self.onset is not None

    @property
    def onset_tokens(self):
        return None if self.onset is None else int(self.tokens[self.onset])

    @property
    def onset_any_tokens(self):
        return None if self.onset_any is None else int(self.tokens[self.onset_any])

    @property
    def last_tokens(self):
        return int(self.tokens[-1])


def parse_run_name(name):
    """(scale, cell, seed, size, rows, lr) of a run-name bridge.<scale>.<size>_<rows>_lr<lr>.s<seed>; None else."""
    m = RUN_NAME.match(name)
    c = None if m is None else CELL_NAME.match(m["cell"])
    return None if c is None else (m["scale"], m["cell"], int(m["seed"]), c["size"], c["rows"], c["lr"])


def is_bridge_run(run):
    return parse_run_name(run.name) is not None


def _series(run, eps):
    """(Sink_1^eps per evaluation, mean alpha_1 per evaluation, what the probe fed), as the run was trained
    (results.sink_series and results.mean_alpha1: a BOS-first run on inputs that start with BOS)."""
    got, m = sink_series(run, eps), mean_alpha1(run)
    if got is None:
        return None, None, ""
    _, sink, fed = got
    return (np.asarray(sink, dtype=float), None if m is None else np.asarray(m[2], dtype=float),
            "inputs that start with BOS" if fed else "the probe's inputs")


def measure_run(run, eps=DEFAULT_EPS):
    """A BridgeRun, or (None, why) when the run cannot be measured."""
    parsed = parse_run_name(run.name)
    ev = run.eval
    if ev is None or not len(ev.step):
        return None, "no evaluations"
    sink, alpha1, fed = _series(run, eps)
    if sink is None or alpha1 is None:
        return None, f"no Sink_1^{eps:g} or alpha_1 in its evaluations"
    scale, cell, seed, size, rows, lr = parsed
    tokens = np.asarray([tokens_at(run, int(s)) or 0 for s in ev.step], dtype=np.int64)
    r = BridgeRun(run, scale, cell, seed, size, rows, lr, steps=np.asarray(ev.step), tokens=tokens, sink=sink,
                  alpha1=alpha1, uniform=uniform_alpha1(probe_length(run) or 64),
                  valid_loss=np.asarray(ev.valid_loss, dtype=float),
                  onset=persistent_onset(sink, ONSET_SHARE, strict=True),
                  onset_any=persistent_onset(sink, 0.0, strict=True), measured_on=fed)
    for attr in ("n_params", "n_params_non_embedding"):
        n = run.attrs.get(attr)
        setattr(r, attr, None if n is None else int(n))
    status = Path(run.file).parent / STATUS_FILE
    try:
        r.stopped = json.loads(status.read_text()).get("stopped", "") if status.is_file() else ""
    except (OSError, ValueError):
        r.stopped = ""
    return r, ""


@dataclass
class BridgeCell:
    scale: str
    cell: str
    size: str
    rows: str
    lr: str
    runs: list
    tokens: np.ndarray = None          # the evaluations every seed has
    sink: list = field(default_factory=list)    # [(mean, lo, hi)] per common evaluation
    alpha1: list = field(default_factory=list)
    sink_ci: tuple = (float("nan"), float("nan"))
    median_onset: float = float("nan")   # tokens; inf: censored
    median_ci: tuple = (float("nan"), float("nan"))
    censor_tokens: int = None            # a censored end reads "> censor_tokens" (atlas.censored_end)

    @property
    def n(self):
        return len(self.runs)

    @property
    def sinks(self):
        return sum(r.has_sink for r in self.runs)

    @property
    def n_params(self):
        return self.runs[0].n_params

    @property
    def n_params_non_embedding(self):
        return self.runs[0].n_params_non_embedding

    @property
    def uniform(self):
        return self.runs[0].uniform

    def at(self, tokens):
        """Index of `tokens` among the common evaluations, or None."""
        hit = np.nonzero(self.tokens == tokens)[0]
        return int(hit[0]) if len(hit) else None

    def values_at(self, what, i):
        """Every seed's `what` ("sink" | "alpha1") at common evaluation i."""
        t = self.tokens[i]
        return [float(getattr(r, what)[np.nonzero(r.tokens == t)[0][0]]) for r in self.runs]


def cell_stats(runs):
    """A BridgeCell of one (scale, cell)'s runs (sorted by seed)."""
    runs = sorted(runs, key=lambda r: r.seed)
    r0 = runs[0]
    s = BridgeCell(r0.scale, r0.cell, r0.size, r0.rows, r0.lr, runs)
    common = set(int(t) for t in r0.tokens)
    for r in runs[1:]:
        common &= set(int(t) for t in r.tokens)
    s.tokens = np.asarray(sorted(common), dtype=np.int64)
    s.sink = [t_interval(s.values_at("sink", i)) for i in range(len(s.tokens))]
    s.alpha1 = [t_interval(s.values_at("alpha1", i)) for i in range(len(s.tokens))]
    s.sink_ci = wilson_interval(s.sinks, s.n)
    onsets = [float(r.onset_tokens) if r.has_sink else math.inf for r in runs]
    s.median_onset = lower_median(onsets)
    s.median_ci = median_interval(onsets)
    s.censor_tokens = censored_end(onsets, [r.last_tokens for r in runs])
    return s


def bridge_cells(runs, eps=DEFAULT_EPS):
    """(cells in scale, size (largest first), rows, lr order; notes [(what, why)]) of the bridge runs among `runs`."""
    by, notes = {}, []
    for run in runs:
        if not is_bridge_run(run):
            continue
        r, why = measure_run(run, eps)
        if r is None:
            notes.append((f"bridge run {run.name}", why))
            continue
        by.setdefault((r.scale, r.cell), []).append(r)
    cells = [cell_stats(v) for v in by.values()]
    cells.sort(key=lambda c: (c.scale, -(c.n_params or 0), c.rows != "bos", float(c.lr)))
    return cells, notes


@dataclass
class Comparison:
    scale: str
    size: str
    lr: str
    bos: BridgeCell
    packed: BridgeCell
    tokens: np.ndarray            # common evaluations of the two cells
    alpha1: list                  # [(difference, lo, hi)] BOS first - packed, per common evaluation
    sink: list


def compare_rows(cells):
    """BOS first against packed for every (scale, size, lr) that has both cells."""
    out = []
    for b in [c for c in cells if c.rows == "bos"]:
        p = next((c for c in cells if c.rows == "packed" and (c.scale, c.size, c.lr) == (b.scale, b.size, b.lr)), None)
        if p is None:
            continue
        tokens = np.asarray(sorted(set(map(int, b.tokens)) & set(map(int, p.tokens))), dtype=np.int64)
        alpha = [difference_interval(b.values_at("alpha1", b.at(t)), p.values_at("alpha1", p.at(t))) for t in tokens]
        sink = [difference_interval(b.values_at("sink", b.at(t)), p.values_at("sink", p.at(t))) for t in tokens]
        out.append(Comparison(b.scale, b.size, b.lr, b, p, tokens, alpha, sink))
    return out


@dataclass
class OnsetFit:
    slope: float          # d log10(onset tokens) / d log10(non-embedding parameters)
    intercept: float
    points: list          # [(non-embedding parameters, onset tokens)]
    sizes: int            # distinct parameter counts among the points

    def predict(self, n_params):
        return 10 ** (self.intercept + self.slope * math.log10(n_params))


def fit_onsets(cells):
    """OnsetFit of log10(onset tokens) against log10(non-embedding parameters) over the runs with an onset, or
    (None, why)."""
    points = [(r.n_params_non_embedding, r.onset_tokens) for c in cells for r in c.runs
              if r.has_sink and r.n_params_non_embedding and r.onset_tokens]
    sizes = len({p for p, _ in points})
    if sizes < 2:
        return None, (f"onsets at {sizes} model size{'' if sizes == 1 else 's'} ({len(points)} run"
                      f"{'' if len(points) == 1 else 's'}): a line needs onsets at two sizes or more")
    x = np.log10([p for p, _ in points])
    y = np.log10([t for _, t in points])
    slope, intercept = np.polyfit(x, y, 1)
    return OnsetFit(float(slope), float(intercept), points, sizes), ""
