"""analysis.compare: the demo's side-by-side table of valid loss and Sink_1^eps per evaluation step, on
files written by sinklab-pretrain itself (a softmax and a sigmoid-without-normalisation run of the
synthetic corpus) and on hand-made files that pin the layout (missing steps, proxy marks, bad eps).
"""
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from analysis import compare

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", REPO / "build" / "bin"))
PRETRAIN = BIN / "sinklab-pretrain"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")


def _write(path, run, steps, valid, sink, config, eps="0.2,0.3,0.4"):
    with h5py.File(path, "w") as f:
        g = f.create_group(f"runs/{run}")
        g.attrs["config"] = config
        ev = g.create_group("eval")
        ev.attrs["sink_eps"] = eps
        ev["step"] = np.array(steps, dtype=np.int64)
        ev["valid_loss"] = np.array(valid)
        ev["sink"] = np.array(sink)


def _rows(text, table=0):
    """step -> the numbers of its row, in the first table (1: the mean alpha_1 table after it)."""
    out = {}
    parts_of = text.split("mean alpha_1 over layers and heads")
    for line in (parts_of[table] if table < len(parts_of) else "").splitlines():
        parts = line.split()
        if parts and parts[0].isdigit():
            out[int(parts[0])] = [float(p.rstrip("%")) for p in parts[1:]]
    return out


def test_side_by_side_rows_and_proxy_mark(tmp_path):
    _write(tmp_path / "a.h5", "soft", [0, 10, 20], [8.5, 7.25, 6.125],
           [[1, 2, 3], [4, 5.5, 6], [7, 8.25, 9]], "attn-sim = exp\nattn-norm = sum\nattn-alpha = 1\n")
    _write(tmp_path / "b.h5", "sig", [0, 20], [8.4, 6.5], [[0, 0.5, 0], [0, 0.75, 0]],
           "attn-sim = sigmoid\nattn-norm = one\n")
    runs = compare.read_runs(tmp_path / "a.h5", 0.3) + compare.read_runs(tmp_path / "b.h5", 0.3)
    text = compare.compare_table(runs, 0.3)
    assert "soft: attention exp, Z = sum" in text and "proxy" not in text.splitlines()[0]
    assert "sig: attention sigmoid, Z = one (Sink_1 from proxy scores)" in text
    assert "sig*" in text and "soft*" not in text
    rows = _rows(text)
    assert rows[0] == [8.5, 2.0, 8.4, 0.5]      # eps 0.3 is the middle column of sink[step, eps]
    assert rows[10] == [7.25, 5.5]              # the sigmoid run has no step 10: blank cells
    assert rows[20] == [6.125, 8.25, 6.5, 0.75]
    # Other eps, and an eps the runs did not measure.
    assert _rows(compare.compare_table(compare.read_runs(tmp_path / "a.h5", 0.4), 0.4))[20] == [6.125, 9.0]
    with pytest.raises(SystemExit, match="--eps 0.5"):
        compare.read_runs(tmp_path / "a.h5", 0.5)
    # alpha != 1 also measures proxy scores.
    _write(tmp_path / "c.h5", "alpha", [0], [8.0], [[0, 0, 0]], "attn-sim = exp\nattn-norm = sum\nattn-alpha = 0.2\n")
    assert compare.read_runs(tmp_path / "c.h5", 0.3)[0].proxy
    # A file that is not there: one line naming it, exit 1.
    assert compare.main([str(tmp_path / "missing.h5")]) == 1


@pytest.mark.skipif(not PRETRAIN.exists(), reason=f"{PRETRAIN} not built")
def test_compare_reads_real_runs(corpus, tmp_path):
    base = [str(PRETRAIN), "--vocab-size=64", "--d-model=32", "--n-layers=2", "--n-heads=2", "--ffn-hidden=64",
            "--context=16", f"--train-data={corpus / 'train.bin'}", f"--valid-data={corpus / 'valid.bin'}",
            "--steps=8", "--global-batch-tokens=32", "--micro-batch-rows=2", "--eval-every=4", "--eval-rows=4",
            "--probe-sequences=4", "--probe-length=12", "--log-every=4"]
    for name, extra in (("softmax", []), ("sigmoid", ["--attn-sim=sigmoid", "--attn-norm=one"])):
        proc = subprocess.run(base + extra + [f"--out-dir={tmp_path / name}", f"--run-name={name}"], env=ENV,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "analysis.compare", str(tmp_path / "softmax" / "results.h5"),
                           str(tmp_path / "sigmoid" / "results.h5")], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = _rows(proc.stdout)
    assert sorted(rows) == [0, 4, 8] and all(len(r) == 4 for r in rows.values()), proc.stdout
    assert "sigmoid*" in proc.stdout and "softmax*" not in proc.stdout
    with h5py.File(tmp_path / "sigmoid" / "results.h5", "r") as f:
        ev = f["runs/sigmoid/eval"]
        np.testing.assert_allclose([r[2] for _, r in sorted(rows.items())], ev["valid_loss"][:], atol=5e-5)
        np.testing.assert_allclose([r[3] for _, r in sorted(rows.items())], ev["sink"][:, 1], atol=5e-3)
        sigmoid_alpha1 = ev["alpha"][:].reshape(3, -1).mean(axis=1)
    # The mean alpha_1 table: both runs, each the mean of its eval/alpha over layers and heads.
    alpha_rows = _rows(proc.stdout, table=1)
    assert sorted(alpha_rows) == [0, 4, 8]
    np.testing.assert_allclose([r[1] for _, r in sorted(alpha_rows.items())], sigmoid_alpha1, atol=5e-5)
    baseline = sum(1 / i for i in range(1, 13)) / 12
    assert f"uniform baseline {baseline:.4f}" in proc.stdout
