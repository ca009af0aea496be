"""The report's first section, "Sink emergence (Bigram-Backcopy)" (analysis/sections/bbm.py):

- every agreement rule (cells/pretrain.py's Cell.expect_kind) on constructed evaluations, agreeing, disagreeing and
  undecided, and a run short of its steps that cannot disagree yet;
- the section on real results files: Bigram-Backcopy runs of the study's job files trained at a tiny size
  by sinklab-pretrain on a small data_prep bbm build (one of them under another run-name, matched to its
  cell by its settings): the table's numbers are the files' (final Sink_1^0.3, the best layer's BOS
  attention, the first step it reached 0.3, the copy loss), every cell without a run is listed as not run,
  the figures are drawn, the section comes first after the findings, and each run's finding quotes its
  numbers.

The binaries come from $SINKLAB_BIN_DIR; the real-file test skips only when sinklab-pretrain is absent.
"""
import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
pytest.importorskip("matplotlib")

from analysis.stats.emergence import persistent_onset_step  # noqa: E402
from analysis.results import EvalSeries, Run  # noqa: E402
from analysis.sections import bbm  # noqa: E402
from analysis.stats import bbm as bbm_stats  # noqa: E402
from cells import pretrain  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", REPO_ROOT / "build" / "bin"))
PRETRAIN = BIN / "sinklab-pretrain"
EPS = [0.2, 0.3, 0.4]
CELLS = next(g for g in pretrain.GROUPS if g.folder == "bbm").cells


def _cell(kind):
    return pretrain.Cell("x", "a cell", expect="what the paper says", expect_kind=kind, base="bbm")


def _run(name, bos, steps=(0, 10, 20), raw=None, star=None, window=None, boundary=None, proxy=False,
         config_steps=None):
    """A BbmRun over constructed evaluations: `bos` the best layer's BOS attention per evaluation."""
    n = len(steps)
    fa = np.zeros((n, 1, 1, 2))
    fa[:, 0, 0, 0] = bos
    ev = EvalSeries(step=np.array(steps), valid_loss=np.ones(n), eps=EPS, sink=np.zeros((n, 3)),
                    first_attention=fa, first_weight_raw=fa if raw is None else raw,
                    rest_weight_raw=np.full((n, 1, 1, 2), 0.05), copy_loss=np.linspace(3, 1, n),
                    bigram_loss=np.linspace(3, 2.5, n), proxy=proxy, bbm_meta="bbm.json")
    if star is not None:
        ev.sink_star = np.full((n, 3), star)
    if window is not None:
        ev.alpha_k_window = np.full((n, 1, 1, 4), window)
    if boundary is not None:
        ev.boundary_attention = np.full((n, 1, 1), boundary)
    last, planned = steps[-1], config_steps if config_steps is not None else steps[-1]
    r = Run(name=f"bbm.{name}", file=__file__, eval=ev, config=f"steps = {planned}\nglobal-batch-tokens = 100\n",
            train={"step": np.arange(last), "loss": np.ones(last), "tokens": 100 * np.arange(1, last + 1)})
    b = bbm_stats.BbmRun(label=r.name, run=r, key=name, matched="run-name", extra={"eps": 0.3})
    bbm_stats.measure(b, 0.3)
    return b


def _verdict(kind, b, others=()):
    b.cell = _cell(kind)
    by_key = {o.key: o for o in others}
    by_key[b.key] = b
    return bbm_stats.judge(b, by_key, 0.3, job_steps=None)[0]


def test_every_expect_kind_of_the_study_has_a_rule():
    for cell in CELLS:
        assert cell.expect_kind, cell.label
        for name, ref in bbm_stats.conditions(cell.expect_kind):
            assert name in bbm_stats.RULES, cell.expect_kind
            if ref is not None:
                assert any(c.stem == ref or (not c.stem and ref == "softmax") for c in CELLS), ref
            assert "{" not in bbm_stats.rule_text(name, ref, 0.3)


def test_rules_agree_disagree_and_undecided():
    rising, flat = [0.0, 0.2, 0.5], [0.02, 0.03, 0.04]
    assert _verdict("sink", _run("a", rising)) == "agrees"
    assert _verdict("sink", _run("a", flat)) == "disagrees"
    assert _verdict("no_sink", _run("a", flat, proxy=True)) == "agrees"
    assert _verdict("no_sink", _run("a", rising, proxy=True)) == "disagrees"
    assert _verdict("moved_to_bias", _run("a", flat, star=100.0)) == "agrees"
    assert _verdict("moved_to_bias", _run("a", flat, star=25.0)) == "disagrees"
    assert _verdict("moved_to_bias", _run("a", rising, star=100.0)) == "disagrees"  # BOS kept its sink
    assert _verdict("moved_to_bias", _run("a", flat)) == "undecided"  # no eval/sink_star
    assert _verdict("first_position", _run("a", rising, boundary=0.05)) == "agrees"
    assert _verdict("first_position", _run("a", rising, boundary=0.6)) == "disagrees"
    assert _verdict("first_position", _run("a", flat, boundary=0.05)) == "disagrees"
    assert _verdict("first_position", _run("a", rising, boundary=np.nan)) == "agrees"  # no BOS inside the rows
    assert _verdict("absolute_not_window_start", _run("a", flat, window=0.05)) == "agrees"
    assert _verdict("absolute_not_window_start", _run("a", flat, window=0.8)) == "disagrees"
    assert _verdict("absolute_not_window_start", _run("a", flat)) == "undecided"
    ref = _run("ref", [0.0, 0.3, 0.4])
    assert _verdict("more_than:ref", _run("a", [0.0, 0.3, 0.5]), [ref]) == "agrees"
    assert _verdict("less_than:ref", _run("a", [0.0, 0.3, 0.5]), [ref]) == "disagrees"
    assert _verdict("sink+more_than:ref", _run("a", [0.0, 0.2, 0.35]), [ref]) == "disagrees"
    assert _verdict("more_than:gone", _run("a", rising), [ref]) == "undecided"  # the other cell not run
    # later_than: reached 0.3 at step 20 against the reference's 10; never, in a run past its step; earlier.
    assert _verdict("later_than:ref", _run("a", [0.0, 0.1, 0.4]), [ref]) == "agrees"
    assert _verdict("later_than:ref", _run("a", flat), [ref]) == "agrees"
    assert _verdict("later_than:ref", _run("a", flat, steps=(0, 5, 10)), [ref]) == "undecided"
    assert _verdict("later_than:ref", _run("a", [0.5, 0.5, 0.5]), [ref]) == "disagrees"
    assert _verdict("later_than:ref", _run("a", flat), [_run("ref", flat)]) == "undecided"


def test_a_sink_emerged_where_the_bos_attention_stays_above_eps():
    """emergence.py's rule (issue 44, item 7): a crossing of 0.3 that falls back is no emergence, and a run that
    crossed, fell back and crossed again emerged at its second crossing; the tally and the findings count it so."""
    steps = (0, 10, 20, 30)
    blip, dip, rising = _run("a", [0.0, 0.35, 0.1, 0.1], steps), _run("b", [0.0, 0.4, 0.2, 0.5], steps), \
        _run("c", [0.0, 0.2, 0.3, 0.5], steps)
    assert (blip.cross(0.3), dip.cross(0.3), rising.cross(0.3)) == (None, 30, 20)
    assert bbm._tally([blip, dip, rising], [], [], 0.3).startswith("A sink (BOS attention >= 0.3) emerged in 2 of 3 ")
    assert bbm._run_finding(blip, None, "", 0.3).startswith("bbm.a: no sink in 30 steps (")
    assert bbm._run_finding(dip, None, "", 0.3).startswith("bbm.b: a sink emerged at step 30 (")
    # later_than: the reference's sink is dated from 30, so a run that keeps it from 20 is earlier, not later.
    assert _verdict("later_than:b", rising, [dip]) == "disagrees"


def test_a_run_short_of_its_steps_cannot_disagree_yet():
    b = _run("a", [0.0, 0.01, 0.02], config_steps=400)  # stopped at step 20 of 400 (in progress or cut)
    b.cell = _cell("sink")
    verdict, measured = bbm_stats.judge(b, {"a": b}, 0.3, job_steps=400)
    assert verdict == "undecided" and "step 20 of 400" in measured
    done = _run("a", [0.0, 0.01, 0.02])
    done.cell = _cell("sink")
    verdict, measured = bbm_stats.judge(done, {"a": done}, 0.3, job_steps=400)
    assert verdict == "disagrees" and "a shortened run, the job file has 400 steps" in measured


# ---------------------------------------------------------------------------------------------------------
# The section on real results files.

CONTEXT = 32
STEPS = 30
TINY = ["--vocab-size=85", f"--context={CONTEXT}", "--d-model=32", "--ffn-hidden=64", f"--steps={STEPS}",
        f"--global-batch-tokens={8 * CONTEXT}", "--micro-batch-rows=8", "--eval-every=10",
        "--eval-every-after=off", "--eval-rows=16", "--probe-sequences=8", f"--probe-length={CONTEXT}",
        "--checkpoint-every=0", "--log-every=10", "--device=cpu"]
# (job file, run-name override or None): the softmax base is run under another name (matched by settings)
JOBS = (("bbm_cpu.ini", "demo_softmax"), ("bbm/sigmoid.ini", None), ("bbm/sink_token.ini", None),
        ("bbm/window.ini", None))
ENV = dict(os.environ, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def bbm_report(tmp_path_factory):
    if not PRETRAIN.exists():
        pytest.skip(f"{PRETRAIN} not built")
    from data_prep.__main__ import main
    d = tmp_path_factory.mktemp("bbm_report")
    data = d / "bbm"
    assert main(["bbm", "--out", str(data), "--seq-len", str(CONTEXT), "--train-sequences", "400",
                 "--valid-sequences", "40", "--survey-n", "0"]) == 0
    procs, files = [], []
    for job, name in JOBS:
        out = d / Path(job).stem
        cmd = [str(PRETRAIN), "--config", str(REPO_ROOT / "jobs" / "pretrain" / job), *TINY,
               f"--train-data={data / 'train.bin'}", f"--valid-data={data / 'valid.bin'}",
               f"--bbm-meta={data / 'bbm.json'}", f"--out-dir={out}"]
        if "window" in job:
            cmd.append("--attn-window=16")  # below the probe length: the window-relative metric is measured
        if name:
            cmd.append(f"--run-name={name}")
        procs.append(subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        files.append(out / "results.h5")
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-2000:]
    report = d / "report"
    proc = subprocess.run([sys.executable, "-m", "analysis.report", *map(str, files), "-o", str(report)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return files, report


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_section_table_holds_the_files_numbers(bbm_report):
    files, report = bbm_report
    rows = _csv(report / "tables" / "bbm.csv")
    cells = next(g for g in pretrain.GROUPS if g.folder == "bbm").cells
    assert [r["variant"] for r in rows] == [c.label for c in cells]  # every cell, in the study's order
    by_variant = {r["variant"]: r for r in rows}
    ran = {"softmax (the CPU setting)": ("demo_softmax", files[0]),
           "sigmoid attention without normalisation": ("bbm.sigmoid", files[1]),
           "a learnable sink token": ("bbm.sink_token", files[2]),
           "sliding window of 64 keys (< T = 256)": ("bbm.window", files[3])}
    for variant, row in by_variant.items():
        if variant not in ran:
            assert row["run"] == "not run" and row["agrees"] == "not run", row
            continue
        name, path = ran[variant]
        assert row["run"] == name + (" (matched by its settings)" if name == "demo_softmax" else "")
        with h5py.File(path, "r") as f:
            ev = f[f"runs/{name}/eval"]
            bos = ev["first_attention"][..., 0].reshape(len(ev["step"]), -1).max(axis=1)  # [step, L, H, G]
            assert float(row["Sink_1^0.3 (%)"]) == pytest.approx(ev["sink"][-1, 1], abs=0)
            assert float(row["BOS attention"]) == pytest.approx(bos[-1], abs=0)
            assert float(row["copy loss"]) == pytest.approx(ev["copy_loss"][-1], abs=0)
            onset = persistent_onset_step(ev["step"][...], bos, 0.3)
            want = str(onset) if onset is not None else f"not in {int(ev['step'][-1])} steps"
            assert row["step from which BOS attention stays >= 0.3"] == want
            assert row["agrees"] in ("agrees", "disagrees", "undecided")
            if name == "bbm.sigmoid":  # proxy scores, with the raw weights beside them
                assert int(ev.attrs["proxy_scores"]) == 1 and "raw weight on BOS" in row["measured"]
            if name == "bbm.sink_token":
                assert f"Sink_*^0.3 {ev['sink_star'][-1, 1]:.2f} %" in row["measured"]
            if name == "bbm.window":
                assert f"window start {ev['alpha_k_window'][-1, :, :, 0].max():.2f}" in row["measured"]
    series = _csv(report / "tables" / "bbm_series.csv")
    assert {r["run"] for r in series} == {"demo_softmax", "bbm.sigmoid", "bbm.sink_token", "bbm.window"}


def test_section_is_first_with_figures_rules_and_findings(bbm_report):
    files, report = bbm_report
    page = (report / "index.html").read_text()
    h2 = page.split("<h2")
    assert h2[1].startswith(">Findings") and h2[2].startswith(' id="bbm">1. Sink emergence (Bigram-Backcopy)')
    for fig in ("bbm_emergence", "bbm_norms", "bbm_raw_weights"):
        assert (report / "figures" / f"{fig}.png").stat().st_size > 5000, fig
        assert f'id="fig-{fig}"' in page
    for kind in ("sink", "no_sink", "moved_to_bias", "absolute_not_window_start", "later_than:softmax",
                 "more_than:wd_0", "less_than:wd_0.1", "first_position"):
        assert f"{kind} — " in page, kind  # every rule in use is stated
    assert "Not run (no results file given holds them): bbm.kv_bias, bbm.no_bos, bbm.wd_0" in page
    findings = (report / "findings.md").read_text()
    with h5py.File(files[1], "r") as f:  # the sigmoid run: verdict in proxy scores and its raw weights
        ev = f["runs/bbm.sigmoid/eval"]
        bos = float(ev["first_attention"][-1, :, :, 0].max())
        verdict = "agrees" if bos < 0.3 else "disagrees"
        raw = float(ev["first_weight_raw"][-1, 0, 0, 0])
        assert f"bbm.sigmoid (sigmoid attention without normalisation), after {STEPS} steps" in findings
        assert f"{verdict} with the paper's \"no sink without normalisation\"" in findings
        assert f"in proxy scores* (the paper's measure) BOS gets {bos:.2f}" in findings
        assert f"In absolute weights BOS gets {raw:.3g}" in findings
    # A verdict of a run stopped at a fixed step says so, and names the atlas's verdicts of its cell (run to
    # convergence: their record in docs/atlas) beside it.
    sigmoid = next(x for x in findings.splitlines() if x.startswith("- bbm.sigmoid"))
    assert (f"This is a verdict of a run cut off at step {STEPS}, before the atlas's convergence rule held; the "
            "emergence atlas's verdict of its cell, run to convergence (Guo's measure, cheap-2026-11-29): small scale "
            "disagrees (8/8 seeds with a sink), cheap scale inconclusive (3/3 seeds with a sink).") in sigmoid
    with h5py.File(files[0], "r") as f:
        ev = f["runs/demo_softmax/eval"]
        bos = ev["first_attention"][:, :, :, 0].reshape(len(ev["step"]), -1).max(axis=1)
        line = next(x for x in findings.splitlines() if x.startswith("- demo_softmax (softmax (the CPU setting))"))
        assert f"{bos[-1]:.2f}" in line and "the paper expects a sink" in line
        assert "the emergence atlas's verdict of its cell, run to convergence (Guo's measure, cheap-2026-11-29): " \
               "small scale agrees (7/8 seeds with a sink), cheap scale inconclusive (3/3 seeds with a sink)" in line
    assert "Bigram-Backcopy run(s); " in findings and "not run: 7 cell(s)" in findings
    assert findings.startswith("**Sink emergence (Bigram-Backcopy)**\n\n- A sink (BOS attention >= 0.3) emerged in ")


def test_a_run_keeps_its_colour_in_every_figure(bbm_report, tmp_path, monkeypatch):
    """The section's figures draw its runs from one colour map (the raw-weights figure lists the proxy runs
    first, yet softmax keeps the colour the emergence figure gave it)."""
    from analysis import figures
    files, _ = bbm_report
    calls = []
    real = figures.run_panels

    def recording(path, title, panels, xlabel="step", colours=None):
        calls.append((title, [lab for p in panels for lab, *_ in p["series"]], colours))
        return real(path, title, panels, xlabel, colours)

    monkeypatch.setattr(figures, "run_panels", recording)
    from analysis import report
    assert report.main([*map(str, files), "-o", str(tmp_path / "r")]) == 0
    bbm_calls = [c for c in calls if c[0] in ("Sink emergence on Bigram-Backcopy",
                                              "Raw attention weights: BOS against the other keys")]
    assert len(bbm_calls) == 2 and bbm_calls[0][2] is bbm_calls[1][2]
    emergence, raw = bbm_calls[0][1], bbm_calls[1][1]
    assert raw[0] != emergence[0] and set(raw) <= set(emergence)   # another order, the same map
    colours = figures.label_colours(["b", "a"])
    fig_lines = []
    monkeypatch.setattr(figures, "_save", lambda fig, path, title: fig_lines.append(fig.axes[0].lines))
    real("unused.png", "t", [dict(ylabel="y", series=[("a", [0, 1], [0, 1]), ("b", [0, 1], [1, 0])])],
         colours=colours)
    drawn = {line.get_label(): line.get_color() for line in fig_lines[0]}
    assert drawn["a"] == colours["a"] and drawn["b"] == colours["b"]
