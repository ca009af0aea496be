"""The paper's tables in the report (analysis/sections/paper_tables.py), on results files written by the real
sinklab-pretrain: Table 10 right's three cells trained at tiny size for a few steps, each with its job
file's run-name and intervention; every other cell of every table "not run", showing nothing else."""
import csv
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from analysis.job_index import JOBS_DIR, JobIndex, cell_status
from analysis.results import Run, ini_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", REPO_ROOT / "build" / "bin"))
ENV = dict(os.environ, OMP_NUM_THREADS="1")
TABLE10 = "table10_fixed_token"


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def table10_runs(corpus, tmp_path_factory):
    """results.h5 of Table 10 right's cells: 6 steps of a tiny model with the cell's own x_fix settings."""
    if not (BIN / "sinklab-pretrain").exists():
        pytest.skip("sinklab-pretrain is not built")
    tmp = tmp_path_factory.mktemp("table10")
    files = []
    for stem in ("fixed_pos1", "fixed_pos2", "fixed_pos3"):
        job = ini_settings((JOBS_DIR / TABLE10 / f"{stem}.ini").read_text())
        out = tmp / stem
        cmd = [str(BIN / "sinklab-pretrain"), "--vocab-size=64", "--d-model=32", "--n-layers=2", "--n-heads=2",
               "--ffn-hidden=64", "--context=16", f"--train-data={corpus / 'train.bin'}",
               f"--valid-data={corpus / 'valid.bin'}", "--steps=6", "--global-batch-tokens=128",
               "--micro-batch-rows=2", "--lr=3e-3", "--warmup-steps=2", "--eval-every=3", "--eval-rows=8",
               "--probe-sequences=8", "--probe-length=12", "--checkpoint-every=6", f"--out-dir={out}",
               f"--run-name={job['run-name']}", f"--fixed-token-position={job['fixed-token-position']}",
               f"--fixed-token-id={job['fixed-token-id']}"]
        subprocess.run(cmd, env=ENV, check=True, capture_output=True, timeout=300)
        files.append(out / "results.h5")
    return files


def test_table10_right_shows_sink_1_to_4_per_cell(table10_runs, tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "analysis.report", *map(str, table10_runs), "-o", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = {r["cell"]: r for r in _csv(out / "tables" / f"{TABLE10}.csv")}
    assert list(rows) == ["x_fix at position 1", "x_fix at position 2", "x_fix at position 3"]
    moved_col = "Sink_k^0.3 with the intervention (%)"
    for k, path in enumerate(table10_runs, start=1):
        row = rows[f"x_fix at position {k}"]
        assert row["status"] == "done" and row["note"] == "run of 6 steps (job file: 20000)"
        with h5py.File(path, "r") as f:
            ev = f[f"runs/{TABLE10}.fixed_pos{k}/eval"]
            eps = [float(x) for x in ev.attrs["sink_eps"].split(",")]
            i = eps.index(0.3)
            moved = ev["sink_k_intervened"][-1, :, i]
            assert row[moved_col] == ", ".join(f"Sink_{j + 1} {v:.2f}" for j, v in enumerate(moved))
            assert float(row["Sink_1^0.3 (%)"]) == pytest.approx(float(ev["sink"][-1, i]), abs=0)
            assert float(row["valid loss"]) == pytest.approx(float(ev["valid_loss"][-1]), abs=0)
        assert float(row["paper Sink_1^0.3 (%)"]) == {1: 74.11, 2: 0.0, 3: 0.0}[k]
        assert row["paper also reports"].startswith("Sink_2 ")

    # Every other table renders too, its cells "not run" with no measured value; the page opens with
    # the results, and the paper's tables section counts the cells by status.
    groups = JobIndex().groups
    for g in groups:
        if g.folder == TABLE10:
            continue
        for r in _csv(out / "tables" / f"{g.folder}.csv"):
            assert r["status"] == "not run", (g.folder, r)
            assert r["Sink_1^0.3 (%)"] == "" and r["valid loss"] == "" and r["note"] == ""
    page = (out / "index.html").read_text()
    n_cells = sum(len(g.cells) for g in groups)
    assert f"Cells: {n_cells - 3} not run, 3 done." in page
    assert page.index('id="paper-tables"') < page.index('id="summary"')


def test_cell_status_of_short_failed_and_stale_runs(tmp_path):
    path = tmp_path / "results.h5"
    path.write_bytes(b"")
    now = time.time()
    os.utime(path, (now, now))

    def run(steps_logged, loss_last=1.0, configured=20):
        train = {"step": np.arange(steps_logged), "loss": np.r_[np.ones(steps_logged - 1), loss_last]}
        return Run(name="r", file=str(path), train=train, config=f"steps = {configured}\n")

    assert cell_status(None, 20) == ("not run", "")
    assert cell_status(run(20), 20) == ("done", "")
    assert cell_status(run(20, configured=20), 400) == ("done", "run of 20 steps (job file: 400)")
    assert cell_status(run(7), 20, now=now + 60) == ("in progress (step 7 of 20)", "")
    assert cell_status(run(7), 20, now=now + 3600) == ("incomplete (step 7 of 20)", "")
    status, _ = cell_status(run(7, loss_last=math.nan), 20, now=now)
    assert status == "failed (loss nan at step 7)"
