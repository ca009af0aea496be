"""From the toy to text (jobs/bridge, cells/bridge.py, analysis/stats/bridge.py, the report's section; issue #46):

- the cells (3 sizes x BOS first / packed x 2 learning rates), the grid of evaluations, every cell's job file
  accepted by sinklab-pretrain (--dry-run) at every scale;
- the statistics on constructed runs: the Student-t interval and the conservative Welch difference against
  hand-computed values, onsets in tokens with censoring, the median onset and its interval, the fit of onset
  tokens against size recovering a known line;
- the CI-sized set end to end (one cell, 2 seeds, at scale ci on the suite's synthetic corpus, well under 2
  minutes): the runner trains each run to its budget with an evaluation at every grid step and none twice, a
  kill -9 and a rerun that resumes (the same numbers an uninterrupted run gives), a rerun that skips finished
  runs, the packed twin added, and the report's section "From the toy to text" with its figure, tables and
  findings.
"""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from analysis.stats.bridge import (ONSET_SHARE, BridgeRun, cell_stats, compare_rows, difference_interval, fit_onsets,
                                   parse_run_name, t_interval)
from analysis.stats.emergence import persistent_onset
from conftest import assert_jobs_pass_dry_run
from cells.bridge import CELLS, CI_CELL, LRS, ROWS, SCALES, SIZES
from jobs.bridge.run import budget_steps, grid, items_of, job_text

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
PRETRAIN = BIN / "sinklab-pretrain"
ENV = dict(os.environ, OMP_NUM_THREADS="1")
needs_binary = pytest.mark.skipif(not PRETRAIN.exists(), reason=f"{PRETRAIN} not built")


def _runner(out, corpus, *extra, wait=True):
    cmd = [sys.executable, "-m", "jobs.bridge.run", "--scale", "ci", "--seeds", "2", "--out", str(out), "--data",
           str(corpus), "--bin", str(BIN), *extra]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)


def _evals(run_dir):
    name = f"bridge.ci.{run_dir.parent.name}.s{run_dir.name[4:]}"
    with h5py.File(run_dir / "results.h5", "r") as f:
        ev = f[f"runs/{name}/eval"]
        return {k: ev[k][:] for k in ("step", "valid_loss", "sink", "alpha")}


def test_cells_and_grid():
    assert len(CELLS) == len(SIZES) * len(ROWS) * len(LRS) == 12
    assert len({c.name for c in CELLS}) == 12 and CI_CELL in {c.name for c in CELLS}
    by = {c.name: c for c in CELLS}
    assert by["d128_bos_lr4e-4"].settings == {"d-model": "128", "n-layers": "4", "n-heads": "4", "ffn-hidden": "352",
                                              "fixed-token-position": "1", "fixed-token-id": "1", "lr": "4e-4"}
    assert by["d32_packed_lr2e-3"].settings == {"d-model": "32", "n-layers": "2", "n-heads": "2", "ffn-hidden": "88",
                                                "lr": "2e-3"}
    for c in CELLS:
        assert parse_run_name(items_of([c], 1)[0].run_name("mini")) == ("mini", c.name, 1, c.size, c.rows, c.lr)
    assert budget_steps("mini") == 1024 and SCALES["mini"][1] == 2 ** 22
    g = grid(1024)
    assert g == [4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256, 362, 512, 724, 1024]
    assert grid(5) == [4, 5] and grid(4) == [4] and grid(3) == [3]
    ratios = np.array(g[1:]) / np.array(g[:-1])
    assert np.all(ratios > 1.3) and np.all(ratios < 1.6)  # half-octaves


@needs_binary
@pytest.mark.parametrize("scale", sorted(SCALES))
def test_every_cell_is_a_valid_job_at_every_scale(scale, corpus, tmp_path):
    assert_jobs_pass_dry_run(PRETRAIN, ENV, items_of(CELLS, 1),
                             lambda it, run_dir: job_text(scale, it, run_dir, budget_steps(scale), corpus), tmp_path)


def test_t_interval_and_difference_against_hand_computed_values():
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)  # t(0.975, 2) s / sqrt(n), s = 1
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    m, lo, hi = t_interval([5.0])
    assert m == 5.0 and math.isnan(lo) and math.isnan(hi)
    assert all(math.isnan(v) for v in t_interval([]))
    assert t_interval(list(range(100)))[2] - 49.5 == pytest.approx(1.960 * np.std(range(100), ddof=1) / 10)
    # Welch, conservative: a = 1, 2, 3 (var 1), b = 0, 0, 0, 4 (var 4): df = min(3, 4) - 1 = 2
    d, lo, hi = difference_interval([1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 4.0])
    half = 4.303 * math.sqrt(1.0 / 3 + 4.0 / 4)
    assert (d, lo, hi) == pytest.approx((1.0, 1.0 - half, 1.0 + half))
    d, lo, hi = difference_interval([1.0], [0.0, 1.0])
    assert d == 0.5 and math.isnan(lo)


def _run(seed, size, rows, sink, alpha, tokens, non_embedding):
    class _Fake:
        name = f"bridge.mini.{size}_{rows}_lr2e-3.s{seed}"

    sink = np.asarray(sink, dtype=float)
    return BridgeRun(_Fake(), "mini", f"{size}_{rows}_lr2e-3", seed, size, rows, "2e-3", n_params=2 * non_embedding,
                     n_params_non_embedding=non_embedding, steps=np.arange(len(tokens)),
                     tokens=np.asarray(tokens, dtype=np.int64), sink=sink, alpha1=np.asarray(alpha, dtype=float),
                     uniform=0.074, valid_loss=np.zeros(len(tokens)),
                     onset=persistent_onset(sink, ONSET_SHARE, strict=True), onset_any=persistent_onset(sink, 0.0, strict=True))


def test_onsets_medians_comparison_and_fit_on_constructed_runs():
    tokens = [1000, 2000, 4000, 8000]
    runs = [_run(1, "d64", "bos", [0.5, 6.25, 6.25, 12.5], [0.07, 0.08, 0.09, 0.10], tokens, 1000),
            _run(2, "d64", "bos", [0, 0.06, 0.5, 6.25], [0.07, 0.07, 0.08, 0.09], tokens, 1000),
            _run(3, "d64", "bos", [0, 6.25, 0, 0], [0.07, 0.07, 0.07, 0.07], tokens, 1000)]  # a transient: censored
    assert ONSET_SHARE == 1.0
    assert [r.onset_tokens for r in runs] == [2000, 8000, None]  # above 1 % to the last evaluation
    assert [r.onset_any_tokens for r in runs] == [1000, 2000, None]  # above 0 %
    s = cell_stats(runs)
    assert s.sinks == 2 and s.n == 3 and s.censor_tokens == 8000
    assert s.median_onset == 8000  # the lower median of 2000, 8000, +inf
    assert s.median_ci[0] == 2000 and math.isinf(s.median_ci[1])
    assert s.alpha1[-1] == pytest.approx(t_interval([0.10, 0.09, 0.07]))
    assert s.sink[0] == pytest.approx(t_interval([0.5, 0.0, 0.0]))
    packed = cell_stats([_run(k, "d64", "packed", [0] * 4, [0.07, 0.06, 0.05, 0.04 + 0.001 * k], tokens, 1000)
                         for k in (1, 2, 3)])
    (c,) = compare_rows([s, packed])
    assert list(c.tokens) == tokens and c.size == "d64" and c.lr == "2e-3"
    assert c.alpha1[-1] == pytest.approx(difference_interval([0.10, 0.09, 0.07], [0.041, 0.042, 0.043]))
    assert c.alpha1[-1][1] > 0  # BOS first above packed at 95 % at 8000 tokens

    # The fit: onsets on a known line log10(tokens) = 1 + 0.5 log10(params), at two sizes
    fit, why = fit_onsets([s])
    assert fit is None and "1 model size" in why
    line = [_run(k, size, "bos", [0] * i + [6.25] * (4 - i), [0.1] * 4, [10 ** (1 + 0.5 * math.log10(n)) * f
                                                                         for f in (0.5, 1, 2, 4)][:4], n)
            for k, (size, n, i) in enumerate([("d32", 10 ** 4, 1), ("d64", 10 ** 6, 1), ("d128", 10 ** 8, 1)])]
    fit, why = fit_onsets([cell_stats([r]) for r in line])
    assert why == "" and fit.sizes == 3
    assert fit.slope == pytest.approx(0.5) and fit.intercept == pytest.approx(1.0)
    assert fit.predict(10 ** 10) == pytest.approx(10 ** 6)


def _newest_checkpoint(run_dir):
    steps = [int(c.name[5:13]) for c in (run_dir / "checkpoints").glob("step_*") if not c.name.endswith(".tmp")]
    return max(steps, default=0)


@needs_binary
def test_the_ci_sized_set_end_to_end(corpus, tmp_path):
    """One cell, 2 seeds, with a kill and a resume; then the packed twin; then the report."""
    t0 = time.monotonic()
    out = tmp_path / "bridge"
    root = out / "ci" / CI_CELL
    steps = budget_steps("ci")
    proc = _runner(out, corpus, "--parallel", "1", wait=False)
    killed = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        d = root / "seed1"
        if 16 <= _newest_checkpoint(d) < steps:
            killed = d
            break
        time.sleep(0.01)
    assert killed is not None, f"the first run reached no checkpoint between step 16 and its budget: {proc.poll()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    newest = _newest_checkpoint(killed)
    time.sleep(1)  # the trainer died with the runner

    again = _runner(out, corpus)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "bridge: 2/2 runs done (0 failed)" in again.stdout, again.stdout
    assert f"resumed from" in (killed / "train.log").read_text()
    for seed in (1, 2):
        d = root / f"seed{seed}"
        status = json.loads((d / "bridge_status.json").read_text())
        assert status["stopped"] == "budget" and status["steps"] == steps and status["grid"] == grid(steps), status
        assert status["tokens"] == SCALES["ci"][1]
        ev = _evals(d)
        assert list(ev["step"]) == grid(steps), (ev["step"], newest)  # every grid step once, none twice

    # The killed run's numbers are those of an uninterrupted run of the same item.
    twin = _runner(tmp_path / "twin", corpus, "--seeds", "1")
    assert twin.returncode == 0, twin.stdout + twin.stderr
    a, b = _evals(killed), _evals(tmp_path / "twin" / "ci" / CI_CELL / "seed1")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)

    # A rerun skips the finished runs; the packed twin of the cell joins the set.
    cells = f"{CI_CELL},{CI_CELL.replace('_bos_', '_packed_')}"
    more = _runner(out, corpus, "--cells", cells)
    assert more.returncode == 0, more.stdout + more.stderr
    assert f"bridge: {CI_CELL} seed 1: already finished" in more.stdout and "4/4 runs done (0 failed)" in more.stdout

    rep = subprocess.run([sys.executable, "-m", "analysis.report", str(out), "-o", str(tmp_path / "report")],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    page = (tmp_path / "report" / "index.html").read_text()
    assert "From the toy to text" in page and 'id="bridge"' in page
    assert 'id="runs"' not in page  # the set's runs are shown in their section, not under "Training runs"
    findings = (tmp_path / "report" / "findings.md").read_text()
    assert "**From the toy to text**" in findings and "BOS first against packed at the same tokens seen" in findings
    tables = tmp_path / "report" / "tables"
    for name in ("bridge", "bridge_bos_vs_packed", "bridge_runs", "bridge_curves", "bridge_bos_vs_packed_all"):
        assert (tables / f"{name}.csv").is_file(), name
    runs_csv = (tables / "bridge_runs.csv").read_text().splitlines()
    assert len(runs_csv) == 1 + 4 and all(line.endswith(",budget") for line in runs_csv[1:]), runs_csv
    assert (tmp_path / "report" / "figures" / "bridge_lr2e-3.png").is_file()
    # The budget for the CI-sized set is 2 minutes; this whole test (kill, resume, twin, packed cell,
    # report) takes ~25 s on a quiet 2-core machine. The bound is looser so that a loaded machine does not fail it.
    assert time.monotonic() - t0 < 300
