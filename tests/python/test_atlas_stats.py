"""The emergence atlas's statistics (analysis/stats/atlas.py) on constructed runs and cells:

- the median emergence step and its interval against the bootstrap computed by brute force (every one of the
  n^n resamples of a small sample) and against a hand-derived case; censored runs (+inf) in the median and
  at an interval's end;
- the Wilson score interval against published values (Newcombe 1998, Table II, method 3);
- the seeded bootstrap of the mean: deterministic, and near the exact bootstrap of a small sample;
- per run: the emergence step is the persistent onset (a transient crossing is none), the converged BOS
  attention the mean of the last 10 % of evaluations, how the run stopped from atlas_status.json;
- the verdict rule on constructed cells: each verdict reached for each expectation kind, by each measure (Guo's
  BOS attention, the paper's Sink_1 above 1 %); a disputed expectation names the side the runs take;
- where the sink went (the moved rule) on constructed runs: moved, kept, split, none, a transient; the measures
  parting where the non-trigger queries' BOS attention and the all-query Sink_1 disagree; where it sits per layer;
- the atlas's record (the BOS-first verdicts of docs/atlas) in both table forms;
- across scales: Fisher's exact test against enumeration and published values, and the comparison and pooling
  of one cell at two scales.
"""
import bisect
import itertools
import json
import math

import numpy as np
import pytest

from analysis.stats import atlas, convergence
from analysis.results import EvalSeries, Run

EPS = [0.2, 0.3, 0.4]
INF = math.inf


def brute_force_median_interval(values, confidence=0.95):
    """The percentile interval of the lower median over all n^n equally likely resamples."""
    n = len(values)
    medians = sorted(sorted(values[i] for i in idx)[math.ceil(n / 2) - 1]
                     for idx in itertools.product(range(n), repeat=n))
    tail = (1 - confidence) / 2
    # the smallest median whose share of resamples at or below it reaches the tail (and 1 - tail)
    at_or_below = {m: bisect.bisect_right(medians, m) for m in set(medians)}
    lo = min(m for m, c in at_or_below.items() if c >= tail * len(medians) - 1e-9)
    hi = min(m for m, c in at_or_below.items() if c >= (1 - tail) * len(medians) - 1e-9)
    return lo, hi


@pytest.mark.parametrize("sample", [
    [120, 80, 200, 160, 240],            # five seeds, all with a sink
    [100, 100, 140, 300, 220, 180],      # ties and an even count
    [60, 90, INF, 150, INF],             # two censored
    [400, INF, INF, INF, 250],           # most censored: the median itself censored
])
def test_median_interval_is_the_brute_force_bootstrap(sample):
    assert atlas.median_interval(sample) == brute_force_median_interval(sample)
    assert atlas.lower_median(sample) == sorted(sample)[math.ceil(len(sample) / 2) - 1]


def test_median_interval_of_a_hand_derived_case():
    # n = 3, median = the 2nd smallest. P(median* <= 100) = P(Bin(3, 1/3) >= 2) = 7/27 >= 0.025, so the
    # low end is 100; P(median* <= 200) = P(Bin(3, 2/3) >= 2) = 20/27 < 0.975, so the high end is 300.
    dist = dict(atlas.median_bootstrap_distribution([300, 100, 200]))
    assert dist[100.0] * 27 == 7 and dist[200.0] * 27 == 20 and dist[300.0] == 1
    assert atlas.median_interval([300, 100, 200]) == (100.0, 300.0)
    assert atlas.lower_median([300, 100, 200]) == 200.0
    # Eight seeds with a sink at steps 10..80: P(median* <= 10) = P(Bin(8, 1/8) >= 4) ~ 0.0042 < 0.025 <=
    # P(median* <= 20) = P(Bin(8, 2/8) >= 4) ~ 0.114; P(median* <= 60) = P(Bin(8, 6/8) >= 4) = 1 - 1789/65536
    # ~ 0.9727 < 0.975 <= P(median* <= 70).
    assert atlas.median_interval([10, 20, 30, 40, 50, 60, 70, 80]) == (20.0, 70.0)


def test_censored_runs_in_the_median_and_its_interval():
    s = [60, 90, INF, 150, INF]
    assert atlas.lower_median(s) == 150  # 3 of 5 had their sink by step 150
    lo, hi = atlas.median_interval(s)
    assert lo == 60 and hi == INF        # the high end falls on a censored run
    assert atlas.step_text(hi, 500) == "> 500" and atlas.step_text(lo, 500) == "60"
    assert atlas.lower_median([INF, INF, 400]) == INF


def test_wilson_interval_against_published_values():
    # Newcombe (1998), Statistics in Medicine 17:857, Table II, method 3 (score interval, no correction).
    for (k, n), (lo, hi) in {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605), (0, 20): (0.0, 0.1611),
                             (1, 29): (0.0061, 0.1718)}.items():
        got = atlas.wilson_interval(k, n)
        assert got == pytest.approx((lo, hi), abs=5e-5), (k, n)
    # k = n: the upper end is 1 and the lower one n / (n + z^2); k = 0 the mirror
    assert atlas.wilson_interval(8, 8) == pytest.approx((8 / (8 + 1.96 ** 2), 1.0), abs=1e-3)
    assert atlas.wilson_interval(0, 8)[0] == 0.0 and atlas.wilson_interval(8, 8)[1] == 1.0


def test_how_many_seeds_the_rule_needs():
    # Wilson's lower end n / (n + z^2) of n/n passes 0.5 from n = 4 on; of 8 seeds 7 must agree (7/8: 0.53).
    assert atlas.decisive_count(3) is None and atlas.decisive_count(4) == 4
    assert atlas.decisive_count(8) == 7 and atlas.wilson_interval(6, 8)[0] < 0.5 < atlas.wilson_interval(7, 8)[0]


def test_mean_interval_is_seeded_and_near_the_exact_bootstrap():
    x = [0.2, 0.5, 0.55, 0.9]
    assert atlas.mean_interval(x) == atlas.mean_interval(x)  # the same seed, the same interval
    exact = sorted(np.mean([x[i] for i in idx]) for idx in itertools.product(range(4), repeat=4))
    mean, lo, hi = atlas.mean_interval(x)
    assert mean == pytest.approx(np.mean(x))
    assert lo == pytest.approx(np.quantile(exact, 0.025), abs=0.02)
    assert hi == pytest.approx(np.quantile(exact, 0.975), abs=0.02)
    assert atlas.mean_interval([0.4]) == (0.4, 0.4, 0.4)


def _run(name, bos, steps=None, star=None, proxy=False, tmp=None, status=None, first=None):
    """An analysis.results.Run of an atlas run over constructed evaluations (one layer, one head): `bos` Guo's BOS
    attention per evaluation, `first` alpha_1 (every query; the paper's measure; None: 0), `star` alpha_* (a number
    or a series; None: no dataset), a results file path under `tmp` with atlas_status.json `status`."""
    n = len(bos)
    steps = np.arange(n) * 10 if steps is None else np.asarray(steps)
    fa = np.zeros((n, 1, 1, 2))
    fa[:, 0, 0, 0] = bos
    alpha = np.zeros((n, 1, 1)) if first is None else np.asarray(first, dtype=float).reshape(n, 1, 1)
    ev = EvalSeries(step=steps, valid_loss=np.ones(n), eps=EPS, sink=np.zeros((n, 3)), alpha=alpha, first_attention=fa,
                    first_weight_raw=fa * 0.5, rest_weight_raw=np.full((n, 1, 1, 2), 0.01),
                    copy_loss=np.linspace(3, 0.5, n), vnorm_first=np.full((n, 1), 0.2), vnorm_rest=np.ones((n, 1)),
                    hnorm_first=np.full((n, 1), 30.0), hnorm_rest=np.full((n, 1), 3.0), proxy=proxy,
                    bbm_meta="bbm.json")
    if star is not None:
        ev.alpha_star = np.broadcast_to(np.asarray(star, dtype=float), (n,)).reshape(n, 1, 1).copy()
        ev.sink_star = np.repeat(100.0 * (ev.alpha_star[:, 0] > 0.3), 3, axis=1)
    path = "results.h5"
    if tmp is not None:
        d = tmp / name
        d.mkdir(parents=True, exist_ok=True)
        path = str(d / "results.h5")
        if status is not None:
            (d / atlas.STATUS_FILE).write_text(json.dumps(status))
    return Run(name=name, file=path, eval=ev, config="attn-bias = kv\n")


def test_one_run_measured(tmp_path):
    # A transient crossing at step 20 is no emergence; the sink stays from step 50 on.
    bos = [0.0, 0.1, 0.35, 0.2, 0.25, 0.31, 0.4, 0.5, 0.6, 0.62, 0.64, 0.66]
    r = _run("atlas.small.softmax.s3", bos, tmp=tmp_path, status={"stopped": "converged", "steps": 110, "rule": "r"})
    a = atlas.measure_run(r)
    assert (a.scale, a.cell, a.seed) == ("small", "softmax", 3)
    assert a.onset == 50 and a.has_sink
    assert a.converged == pytest.approx(np.mean(bos[-2:]))  # 10 % of 12 evaluations, rounded up: 2
    assert a.copy_loss == pytest.approx(0.5) and a.bos_weight == pytest.approx(0.33) and a.other_weight == 0.01
    assert a.value_ratio == pytest.approx(0.2) and a.residual_ratio == pytest.approx(10.0)
    assert a.stopped == "converged" and a.status_steps == 110 and not a.notes
    short = atlas.measure_run(_run("atlas.small.softmax.s4", [0.0, 0.5, 0.2], tmp=tmp_path))
    assert short.onset is None and short.converged == pytest.approx(0.2) and short.stopped == ""
    assert short.notes == [("run atlas.small.softmax.s4", "no atlas_status.json beside the results file (how the "
                                                           "run stopped is unknown)")]
    assert atlas.measure_run(_run("bbm.softmax", bos)) is None
    assert atlas.parse_run_name("atlas.cheap.gated.headwise.s12") == ("cheap", "gated.headwise", 12)


class Spec:
    """A constructed cell of the atlas's table (the fields the statistics read)."""

    def __init__(self, expect, name="x", disputed_by=()):
        self.name, self.label, self.expect, self.source, self.principal, self.settings = \
            name, f"cell {name}", expect, "constructed", False, {}
        self.disputed_by = disputed_by


def _cell(expect, sinks, n=8, star=None, spec=True, scale="small", paper_sinks=0):
    """CellStats of n seeds, the first `sinks` with a sink at step 40 by Guo's measure (BOS attention 0.6), the
    rest without (0.05), the first `paper_sinks` with one by the paper's (alpha_1 0.5 from step 40, else 0.1); every
    run with alpha_* = star (None: no dataset)."""
    runs = []
    for k in range(n):
        bos = [0.0, 0.1, 0.2, 0.25, 0.6, 0.6] if k < sinks else [0.0, 0.02, 0.03, 0.04, 0.05, 0.05]
        first = [0, 0, 0, 0, 0.5, 0.5] if k < paper_sinks else [0, 0, 0.1, 0.1, 0.1, 0.1]
        runs.append(atlas.measure_run(_run(f"atlas.{scale}.x.s{k}", bos, star=star, first=first)))
    return atlas.cell_stats(runs, Spec(expect) if spec else None)


def enumerated_fisher_p(k1, n1, k2, n2):
    """Fisher's two-sided p by enumeration: every way to pick the first sample's n1 seeds out of all n1 + n2
    (hits = the first k1 + k2 of them) is equally likely under the null; p is the share of picks whose hit
    count is no more frequent than the one seen."""
    hits = k1 + k2
    ways = {}
    for pick in itertools.combinations(range(n1 + n2), n1):
        k = sum(i < hits for i in pick)
        ways[k] = ways.get(k, 0) + 1
    return sum(w for w in ways.values() if w <= ways[k1]) / math.comb(n1 + n2, n1)


@pytest.mark.parametrize("counts", [(8, 8, 3, 3), (8, 8, 0, 3), (2, 8, 3, 3), (5, 8, 1, 3), (0, 8, 0, 1),
                                    (4, 9, 2, 6), (3, 4, 1, 4)])
def test_fisher_exact_is_the_enumerated_test(counts):
    assert atlas.fisher_exact(*counts) == pytest.approx(enumerated_fisher_p(*counts), rel=1e-12)
    k1, n1, k2, n2 = counts
    assert atlas.fisher_exact(k2, n2, k1, n1) == pytest.approx(atlas.fisher_exact(*counts), rel=1e-12)


def test_fisher_exact_against_published_values():
    # Fisher's lady tasting tea (The Design of Experiments, 1935): 3 of 4 cups right, two-sided p = 34/70.
    assert atlas.fisher_exact(3, 4, 1, 4) == pytest.approx(34 / 70, rel=1e-12)
    # 8/8 against 0/3: the one table of its margins with nothing less likely, 1 / C(11, 3).
    assert atlas.fisher_exact(8, 8, 0, 3) == pytest.approx(1 / 165, rel=1e-12)
    assert atlas.least_fisher_p(8, 3) == pytest.approx(1 / 165, rel=1e-12)
    assert atlas.least_fisher_p(8, 1) == pytest.approx(1 / 9, rel=1e-12)   # one seed: never below 0.05


def test_holm_adjustment_of_a_hand_derived_case():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; made non-decreasing: 0.04 -> 0.06
    assert atlas.holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], rel=1e-12)
    assert atlas.holm_adjusted([0.5, 0.6]) == [1.0, 1.0]            # capped at 1
    assert atlas.holm_adjusted([0.02]) == [0.02] and atlas.holm_adjusted([]) == []


def test_cells_at_two_scales_are_compared_and_pooled():
    big, same, other = _cell("sink", 8), _cell("sink", 3, n=3, scale="cheap"), _cell("sink", 0, n=3, scale="cheap")
    (c,) = atlas.compare_scales([same, big])      # the scale with more seeds is the reference, given second
    assert c.ref is big and c.other is same and c.what == "seeds with a sink"
    assert c.p == 1.0 and not c.differs and c.least_p == pytest.approx(1 / 165)
    assert (c.pooled.n, c.pooled.guo.sinks, c.pooled.guo.verdict) == (11, 11, "agrees")
    assert c.pooled.scale == "small + cheap" and c.pooled.guo.sink_ci == pytest.approx(atlas.wilson_interval(11, 11))
    assert (same.guo.verdict, big.guo.verdict) == ("inconclusive", "agrees")  # the per-scale verdicts are untouched
    (d,) = atlas.compare_scales([big, other])
    assert d.differs and d.p == pytest.approx(1 / 165)
    # An expected move to the bias position compares the seeds that moved it, not the sinks.
    moved = _cell("moved_to_bias", 0, star=0.9)                       # 8/8 moved
    stayed = _cell("moved_to_bias", 0, n=3, star=0.05, scale="cheap")  # 0/3 moved, and 0/3 sinks as above
    (m,) = atlas.compare_scales([moved, stayed])
    assert m.what == "seeds that moved it" and m.differs and m.pooled.guo.moved == 8
    assert atlas.compare_scales([big, _cell("sink", 2)]) == []  # one scale: nothing to compare


def test_verdict_rule_reaches_every_verdict():
    assert _cell("sink", 8).guo.verdict == "agrees"          # 8/8: interval 0.68-1
    assert _cell("sink", 0).guo.verdict == "disagrees"       # 0/8: interval 0-0.32
    assert _cell("sink", 6).guo.verdict == "inconclusive"    # 6/8: 0.41-0.93 holds 0.5
    assert _cell("sink", 3, n=3).guo.verdict == "inconclusive"  # 3/3: three seeds cannot decide (0.44-1)
    assert _cell("no_sink", 0).guo.verdict == "agrees"
    assert _cell("no_sink", 8).guo.verdict == "disagrees"
    assert _cell("no_sink", 4).guo.verdict == "inconclusive"
    assert _cell("moved_to_bias", 0, star=0.9).guo.verdict == "agrees"      # no BOS sink, alpha_* 0.9
    assert _cell("moved_to_bias", 8, star=0.9).guo.verdict == "disagrees"   # BOS kept its sink too: split
    assert _cell("moved_to_bias", 0, star=0.05).guo.verdict == "disagrees"  # nothing on k*
    assert _cell("moved_to_bias", 4, star=0.9).guo.verdict == "inconclusive"
    assert _cell("moved_to_bias", 0).guo.verdict == "inconclusive"           # no eval/sink_star
    assert _cell("none", 8).guo.verdict == "no expectation"
    assert _cell("sink", 8, spec=False).guo.verdict == "no expectation"      # a cell the table lacks
    # The paper's measure has its own verdict from its own sinks: Guo 8/8 with a sink, the paper's 0/8.
    both = _cell("sink", 8, paper_sinks=0)
    assert (both.guo.verdict, both.paper.verdict) == ("agrees", "disagrees") and both.paper.sinks == 0
    assert _cell("no_sink", 8, paper_sinks=0).paper.verdict == "agrees"


def test_seeds_that_did_not_learn_the_task_make_the_verdict_inconclusive(tmp_path):
    # 5 of 8 seeds at the cap with a copy loss of 0.5 (the helper's last evaluation): more than half unlearned.
    def cell(capped):
        runs = []
        for k in range(8):
            status = {"stopped": "cap" if k < capped else "converged", "steps": 50, "rule": "r"}
            runs.append(atlas.measure_run(_run(f"atlas.small.x.s{k}", [0.0, 0.1, 0.2, 0.25, 0.6, 0.6],
                                               tmp=tmp_path / f"c{capped}", status=status)))
        return atlas.cell_stats(runs, Spec("sink"))
    assert cell(5).guo.verdict == cell(5).paper.verdict == "inconclusive"
    assert cell(5).guo.why == "5/8 seeds stopped at the cap or budget without learning the copy rule (copy loss > 0.1)"
    assert cell(4).guo.verdict == "agrees"   # half is not more than half: the intervals decide
    assert atlas.LEARNED_COPY_LOSS == convergence.COPY_MARGIN


def test_a_censored_end_never_reads_before_an_observed_emergence(tmp_path):
    """Seeds with sinks at 40 and runs without one stopped at 30 (converged early): the censored end reads
    "> 40", not "> 30", so the interval cannot end before it starts."""
    runs = []
    for k in range(6):
        late = k < 4   # four runs emerge at step 40; two converge without a sink at step 30
        bos = [0.0, 0.1, 0.2, 0.25, 0.6, 0.6] if late else [0.0, 0.1, 0.1, 0.1]
        status = {"stopped": "converged", "steps": 50 if late else 30, "rule": "r"}
        runs.append(atlas.measure_run(_run(f"atlas.small.x.s{k}", bos, tmp=tmp_path, status=status)))
    s = atlas.cell_stats(runs, Spec("sink")).guo
    assert s.censor_step == 40, s.censor_step
    assert atlas.step_text(s.median_ci[1], s.censor_step) == "> 40"


def test_cell_statistics_of_constructed_seeds():
    cell = _cell("sink", 5, paper_sinks=2)
    s = cell.guo
    assert (cell.n, s.sinks) == (8, 5)
    assert s.sink_ci == pytest.approx(atlas.wilson_interval(5, 8))
    assert s.median == 40 and s.median_ci == atlas.median_interval([40] * 5 + [INF] * 3)
    assert s.censor_step == 50 and atlas.step_text(s.median_ci[1], s.censor_step) == "> 50"
    mean, lo, hi = s.converged
    assert mean == pytest.approx((5 * 0.6 + 3 * 0.05) / 8) and lo < mean < hi
    assert cell.stopped_text() == "8 unknown"
    p = cell.paper  # the one head's alpha_1 above 0.3 from step 40 in 2 seeds (Sink_1 100 %), 0.1 in the others
    assert p.sinks == 2 and p.median == INF and p.converged[0] == pytest.approx(2 * 100 / 8)


def _moved_run(seed, bos, first, star):
    return atlas.measure_run(_run(f"atlas.paper.x.s{seed}", bos, star=star, first=first))


LOW, HIGH = [0.05] * 6, [0.0, 0.1, 0.2, 0.25, 0.6, 0.6]    # Guo's BOS attention: none, a sink from step 40
NONE_P, SINK_P = [0.1] * 6, [0, 0, 0, 0.35, 0.5, 0.6]      # alpha_1, every query: none, above 0.3 from step 30


def test_the_moved_rule_on_constructed_runs():
    """moved (the bias position only), kept (the first only), split (both), none (neither), by each measure: the
    bias position by Sink_*^eps over heads above 1 % to the last evaluation, the first position by the measure's
    rule."""
    moved = _moved_run(1, LOW, NONE_P, [0, 0, 0.3, 0.6, 0.8, 0.8])  # 0.3 is not above eps
    kept = _moved_run(2, HIGH, SINK_P, 0.0)
    split = _moved_run(3, HIGH, SINK_P, [0, 0.5, 0.5, 0.5, 0.5, 0.5])
    none = _moved_run(4, LOW, NONE_P, [0, 0, 0, 0.1, 0.2, 0.2])
    fell = _moved_run(5, LOW, NONE_P, [0, 0.6, 0.6, 0.6, 0.6, 0.02])  # a transient: no sink on k* at the end
    for run, want in ((moved, "moved"), (kept, "kept"), (split, "split"), (none, "none"), (fell, "none")):
        assert run.outcome("guo") == run.outcome("paper") == want, (run.cell, want)
    assert moved.star_onset == 30 and split.star_onset == 10 and none.star_onset is None
    # One consistent measure: non-trigger queries put 0.6 on BOS (Guo: a sink on the first position), yet over
    # every query the head's mean is 0.1 (the paper's: none) -- the measures part.
    parted = _moved_run(6, HIGH, NONE_P, 0.9)
    assert (parted.outcome("guo"), parted.outcome("paper")) == ("split", "moved")
    assert _moved_run(7, HIGH, SINK_P, None).outcome("paper") is None   # no Sink_*: no outcome
    # A cell: the paper's measure counts 6 moved of 8, Guo's none of them (they split).
    cell = atlas.cell_stats([_moved_run(k, HIGH, NONE_P, 0.9) for k in range(6)] +
                            [_moved_run(k, HIGH, SINK_P, 0.0) for k in range(6, 8)], Spec("moved_to_bias"))
    assert cell.paper.outcomes == {"moved": 6, "kept": 2, "split": 0, "none": 0}
    assert cell.guo.outcomes == {"moved": 0, "kept": 2, "split": 6, "none": 0}
    assert cell.paper.moved_ci == pytest.approx(atlas.wilson_interval(6, 8)) and cell.guo.verdict == "disagrees"
    assert atlas.counted(cell, "paper")[:1] == (6,) and atlas.counted(cell)[0] == 0


def test_a_disputed_expectation_says_which_side_the_runs_take():
    spec = Spec("disputed", disputed_by=("StreamingLLM", "Miller"))
    with_sink = atlas.cell_stats([_moved_run(k, HIGH, SINK_P, None) for k in range(8)], spec)
    assert with_sink.guo.verdict == with_sink.paper.verdict == "disputed"
    assert with_sink.paper.why.endswith("the runs side with StreamingLLM (a sink)"), with_sink.paper.why
    none = atlas.cell_stats([_moved_run(k, LOW, NONE_P, None) for k in range(8)], spec)
    assert none.paper.why.endswith("the runs side with Miller (no sink)")
    half = atlas.cell_stats([_moved_run(k, HIGH if k < 4 else LOW, NONE_P, None) for k in range(8)], spec)
    assert half.guo.why.endswith("the runs side with neither at 95 %")


def test_where_the_sink_sits_per_layer():
    """Two layers: layer 1 puts 0.5 on k* and 0.4 on BOS / <d> inside the rows, layer 2 0.8 on the first
    position and 0.2 (not above 0.3) in the sink logit; the converged values (the last 10 % of evaluations) decide,
    not an early one."""
    n = 10
    run = _run("atlas.paper.x.s1", [0.05] * n, star=0.8)
    ev = run.eval
    ev.alpha = np.zeros((n, 2, 2))
    ev.alpha[-1, 1, 1] = 0.8
    ev.alpha[0, 0, 0] = 0.9          # early only: not where it sits
    ev.alpha_star = np.zeros((n, 2, 2))
    ev.alpha_star[-1, 0, 0] = 0.5
    ev.sink_logit_share = np.full((n, 2, 2), 0.2)
    ev.boundary_attention = np.zeros((n, 2, 2))
    ev.boundary_attention[-1, 0, 1] = 0.4
    a = atlas.measure_run(run)
    assert a.where == [["k*", "BOS / <d> inside"], ["first position"]]
    assert a.alpha_star == pytest.approx(0.5) and a.logit_share == pytest.approx(0.2)
    run.config = "attn-bias = sink-token\n"
    assert atlas.measure_run(run).where[0] == ["sink token", "BOS / <d> inside"]
    cell = atlas.cell_stats([a, atlas.measure_run(_run("atlas.paper.x.s2", [0.05] * n))], Spec("none"))
    assert cell.where_text() == "layer 1: k* 1/2, BOS / <d> inside 1/2, none 1/2; layer 2: first position 1/2, none 1/2"


def test_the_atlas_record_is_read_in_both_table_forms(tmp_path):
    from cells.atlas import ATLAS_RECORD
    record = atlas.read_record(ATLAS_RECORD)   # the BOS-first scales' report (Guo's columns only)
    assert record[("small", "sigmoid")]["verdict"] == "disagrees" and record[("small", "sigmoid")]["sinks"] == 8
    assert record[("small", "kv_bias")]["moved"] == 0 and record[("cheap", "softmax")]["seeds"] == 3
    assert atlas.record_text(record[("small", "sigmoid")]) == "disagrees (8/8 seeds with a sink)"
    newer = tmp_path / "atlas_cells.csv"       # the table with both measures: "guo: ..." columns
    newer.write_text("scale,cell,expectation,seeds,guo: sinks,guo: moved,guo: verdict,paper: verdict\n"
                     "paper,kv_bias_3l,moved_to_bias,8,0,7,agrees,agrees\n")
    assert atlas.read_record(newer)[("paper", "kv_bias_3l")] == dict(seeds=8, sinks=0, moved=7, verdict="agrees",
                                                                     expect="moved_to_bias")
    assert atlas.read_record(tmp_path / "missing.csv") == {}
