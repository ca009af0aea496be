"""The paper's comparison figures in the report (analysis/sections/paper_figures.py: Figs. 4 left, 5
middle/right, 28, 6, 9) on results files written by the real binaries: cells of jobs/pretrain/sec5_data_budget,
sec6_window and sec6_prefix trained at tiny size for a few steps under their job files' run-names, and
sinklab-probe on one checkpoint in two domains. Each figure is rendered and checked non-blank, its table
against the HDF5 numbers; a figure without data is listed as skipped, not drawn."""
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

h5py = pytest.importorskip("h5py")
np = pytest.importorskip("numpy")
pytest.importorskip("matplotlib")

from analysis.job_index import JOBS_DIR  # noqa: E402
from analysis.results import ini_settings  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", REPO_ROOT / "build" / "bin"))
ENV = dict(os.environ, OMP_NUM_THREADS="1")
# cell job file -> the tiny run's own flags (the figure's x values are those the run ran with)
CELLS = {
    "sec5_data_budget/budget_50M.ini": ["--max-train-tokens=1500"],
    "sec5_data_budget/budget_100M.ini": ["--max-train-tokens=3000"],
    "sec6_window/window_32.ini": ["--attn-window=4"],
    "sec6_window/window_64.ini": ["--attn-window=16"],  # longer than the probe: no relative metric
    "sec6_prefix/prefix_3.ini": ["--prefix-length=3"],
}
PROBE_T = 12


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _nonblank_png(path):
    import matplotlib.image as mpimg

    assert path.is_file() and path.stat().st_size > 5000, path
    img = mpimg.imread(str(path))
    assert img.ndim == 3 and float(img[..., :3].std()) > 0.01, f"{path} looks blank"


@pytest.fixture(scope="module")
def cell_runs(corpus, tmp_path_factory):
    """{job file: results.h5} of the tiny runs, and the sinklab-probe file of window_32's checkpoint."""
    if not (BIN / "sinklab-pretrain").exists() or not (BIN / "sinklab-probe").exists():
        pytest.skip("sinklab-pretrain / sinklab-probe are not built")
    tmp = tmp_path_factory.mktemp("paper_figures")
    files = {}
    for job_file, flags in CELLS.items():
        job = ini_settings((JOBS_DIR / job_file).read_text())
        out = tmp / Path(job_file).stem
        cmd = [str(BIN / "sinklab-pretrain"), "--vocab-size=64", "--d-model=32", "--n-layers=2", "--n-heads=2",
               "--ffn-hidden=64", "--context=16", f"--train-data={corpus / 'train.bin'}",
               f"--valid-data={corpus / 'valid.bin'}", "--steps=6", "--global-batch-tokens=128",
               "--micro-batch-rows=2", "--lr=3e-3", "--warmup-steps=2", "--eval-every=3", "--eval-rows=8",
               "--probe-sequences=8", f"--probe-length={PROBE_T}", "--checkpoint-every=6", f"--out-dir={out}",
               f"--run-name={job['run-name']}", *flags]
        subprocess.run(cmd, env=ENV, check=True, capture_output=True, timeout=300)
        files[job_file] = out / "results.h5"
    probe = tmp / "probe.h5"
    for domain in ("alpha", "beta"):
        subprocess.run([str(BIN / "sinklab-probe"), f"--checkpoint={tmp / 'window_32'}",
                        f"--data={corpus / 'valid.bin'}", f"--out={probe}", "--name=tiny_window4", "--sequences=6",
                        f"--length={PROBE_T}", "--max-k=4", f"--domain={domain}",
                        f"--stride={12 if domain == 'beta' else 16}"],
                       env=ENV, check=True, capture_output=True, timeout=300)
    return files, probe


def test_writers_store_the_mask_metrics_and_parameter_counts(cell_runs):
    files, probe = cell_runs
    with h5py.File(files["sec6_window/window_32.ini"], "r") as f:
        run = f["runs/sec6_window.window_32"]
        ev = run["eval"]
        n = len(ev["step"])
        assert ev["alpha_k_window"].shape == (n, 2, 2, 4) and ev["sink_k_window"].shape == (n, 4, 3)
        assert int(ev.attrs["window"]) == 4 and "alpha_pos" not in ev
        assert int(run.attrs["n_params"]) > int(run.attrs["n_params_non_embedding"]) > 0
        # 2 layers of (2 norms of 32, q/k/v/o 4 * 32*32, ffn 3 * 32*64) + final norm: embeddings excluded
        assert int(run.attrs["n_params_non_embedding"]) == 2 * (2 * 32 + 4 * 32 * 32 + 3 * 32 * 64) + 32
    with h5py.File(files["sec6_window/window_64.ini"], "r") as f:
        assert "alpha_k_window" not in f["runs/sec6_window.window_64/eval"]  # w = 16 > probe length 12
    with h5py.File(files["sec6_prefix/prefix_3.ini"], "r") as f:
        ev = f["runs/sec6_prefix.prefix_3/eval"]
        assert ev["alpha_pos"].shape == (len(ev["step"]), 2, 2, PROBE_T) and ev["sink_pos"].shape[1:] == (PROBE_T, 3)
        assert "alpha_k_window" not in ev
    with h5py.File(probe, "r") as f:
        g = f["models/tiny_window4/natural/alpha"]
        assert g["alpha_window"].shape == (2, 2, 4) and g["sink_k_window"].shape == (4, 3)
        assert int(g.attrs["window"]) == 4 and int(g.attrs["n_params"]) > 0


def test_every_comparison_figure_renders_from_the_runs(cell_runs, tmp_path):
    files, probe = cell_runs
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "analysis.report", *map(str, files.values()), str(probe),
                           "-o", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("fig4_left", "fig5_middle", "fig5_right", "fig28", "fig6", "fig9"):
        _nonblank_png(out / "figures" / f"{name}.png")
    page = (out / "index.html").read_text()
    assert page.index('id="paper-tables"') < page.index('id="paper-figures"') < page.index('id="summary"')
    assert "Fig." not in page.split('id="skipped"')[-1] or 'id="skipped"' not in page

    def last(job_file, name, i=None):
        with h5py.File(files[job_file], "r") as f:
            run = next(iter(f["runs"].values()))
            ev = run["eval"]
            eps = [float(x) for x in ev.attrs["sink_eps"].split(",")]
            return ev[name][-1], eps.index(0.3), dict(run.attrs)

    # Fig. 5 right: the budgets the runs ran with, in order, and their last Sink_1 / valid loss.
    rows = _csv(out / "tables" / "fig5_right.csv")
    assert [r["cell"] for r in rows] == ["50M tokens", "100M tokens"]
    assert [float(r["training tokens"]) for r in rows] == [1500, 3000]
    for r, job in zip(rows, ("sec5_data_budget/budget_50M.ini", "sec5_data_budget/budget_100M.ini")):
        sink, i, _ = last(job, "sink")
        assert float(r["Sink_1^0.3 (%)"]) == pytest.approx(float(sink[i]), abs=0)
        assert float(r["valid loss"]) == pytest.approx(float(last(job, "valid_loss")[0]), abs=0)

    # Fig. 6: w = 4 has the relative metric (Sink_1 at the window start), w = 16 leaves it blank.
    rows = {r["window w"]: r for r in _csv(out / "tables" / "fig6.csv")}
    assert list(rows) == ["4", "16"]
    rel, i, _ = last("sec6_window/window_32.ini", "sink_k_window")
    assert float(rows["4"]["Sink_1^0.3 relative to the window start (%)"]) == pytest.approx(float(rel[0, i]), abs=0)
    assert rows["16"]["Sink_1^0.3 relative to the window start (%)"] == ""
    sink, i, _ = last("sec6_window/window_64.ini", "sink")
    assert float(rows["16"]["Sink_1^0.3 (%)"]) == pytest.approx(float(sink[i]), abs=0)

    # Fig. 5 middle: the prefix run's Sink per position.
    (row,) = _csv(out / "tables" / "fig5_middle.csv")
    sp, i, _ = last("sec6_prefix/prefix_3.ini", "sink_pos")
    assert row["prefix p"] == "3" and int(row["k of the largest"]) == int(np.argmax(sp[:, i])) + 1
    assert [float(x) for x in row["Sink_k^0.3 (%), k = 1..T"].split(", ")] == pytest.approx(sp[:, i], abs=0.051)

    # Fig. 4 left: every run with its parameter count, and the probed model (mean over its two domains).
    rows = {r["model or run"]: r for r in _csv(out / "tables" / "fig4_left.csv")}
    assert len(rows) == len(CELLS) + 1
    _, _, attrs = last("sec6_window/window_32.ini", "sink")
    assert int(rows["sec6_window.window_32"]["parameters"]) == int(attrs["n_params"])
    with h5py.File(probe, "r") as f:
        sinks = [float(f[f"models/tiny_window4/natural/{d}/sink"][1]) for d in ("alpha", "beta")]
        n_params = int(f["models/tiny_window4/natural/alpha"].attrs["n_params"])
    model = rows["tiny_window4"]
    assert int(model["parameters"]) == n_params == int(attrs["n_params"])
    assert float(model["Sink_1^0.3 (%)"]) == pytest.approx(np.mean(sinks), abs=1e-12)

    # Fig. 9: the model's two domains at each of the three thresholds.
    rows = _csv(out / "tables" / "fig9.csv")
    assert [r["eps"] for r in rows] == ["0.2", "0.3", "0.4"]
    assert [float(rows[1][d]) for d in ("alpha", "beta")] == pytest.approx(sinks, abs=0)


def test_a_figure_without_data_is_skipped_not_drawn(cell_runs, tmp_path):
    files, _ = cell_runs
    out = tmp_path / "report"
    budget = [str(p) for k, p in files.items() if k.startswith("sec5")]
    proc = subprocess.run([sys.executable, "-m", "analysis.report", *budget, "-o", str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    page = (out / "index.html").read_text()
    skipped = page.split('id="skipped"')[1]  # one line per reason at the end of the page
    for fig in ("Fig. 6 (Sink vs window size)", "Fig. 5 middle", "Fig. 9 (Sink per domain)"):
        assert fig in skipped
    assert not (out / "figures" / "fig6.png").exists() and not (out / "figures" / "fig9.png").exists()
    _nonblank_png(out / "figures" / "fig5_right.png")
    _nonblank_png(out / "figures" / "fig4_left.png")  # the runs carry their parameter counts
