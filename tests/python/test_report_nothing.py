"""analysis.report, analysis.summary and analysis.compare on files they cannot read anything from (issue 44, item
6): an empty HDF5 file, the survey_inputs.h5 that data_prep writes, a file whose only run holds no rows. Each is
refused in one line naming the file and why, exit status 1, nothing written or printed, also beside a good file;
a run without train/loss is reported with a note naming the run and the dataset, not dropped.
"""
import subprocess
import sys
from pathlib import Path

import pytest

h5py = pytest.importorskip("h5py")
np = pytest.importorskip("numpy")
pytest.importorskip("matplotlib")

from test_report import _root_attrs, _write_run  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
EMPTY = "not a sinklab results file: an empty HDF5 file (no /runs, /models or /items group)"
INPUTS = "not a sinklab results file: data_prep's survey inputs (/<domain>/tokens), the survey's input, not its results"
NO_ROWS = "nothing to show: /runs/x hold(s) no training log, evaluation or measurement"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("nothing")
    from data_prep.__main__ import main
    assert main(["bbm", "--out", str(d / "bbm"), "--seq-len", "32", "--train-sequences", "200",
                 "--valid-sequences", "20", "--survey-n", "4"]) == 0
    h5py.File(d / "empty.h5", "w").close()
    with h5py.File(d / "no_rows.h5", "w") as f:
        _root_attrs(f, "sinklab-pretrain")
        f.create_group("/runs/x")
    rng = np.random.default_rng(3)
    with h5py.File(d / "good.h5", "w") as f:
        _root_attrs(f, "sinklab-pretrain")
        _write_run(f, "good", rng, list(range(1, 6)), [0, 5])
    with h5py.File(d / "no_loss.h5", "w") as f:
        _root_attrs(f, "sinklab-pretrain")
        _write_run(f, "lossless", rng, list(range(1, 6)), [0, 5])
        del f["/runs/lossless/train/loss"]
        _write_run(f, "untrained", rng, [1], [0, 5])
        del f["/runs/untrained/train"]
    return d


def _tool(module, *args):
    return subprocess.run([sys.executable, "-m", f"analysis.{module}", *map(str, args)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name,why", [("empty.h5", EMPTY), ("bbm/survey_inputs.h5", INPUTS), ("no_rows.h5", NO_ROWS)])
def test_a_file_with_nothing_to_show_is_refused_in_one_line(files, tmp_path, name, why):
    bad = files / name
    for paths in ([bad], [files / "good.h5", bad]):  # alone, and after a good file
        out = tmp_path / "report"
        proc = _tool("report", *paths, "-o", out)
        assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"analysis.report: error: {bad}: {why}\n")
        assert not out.exists()
        proc = _tool("summary", *paths)
        assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"analysis.summary: error: {bad}: {why}\n")
        proc = _tool("compare", *paths)
        assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"analysis.compare: {bad}: {why}\n")


def test_compare_refuses_a_file_without_evaluations(files):
    """A results file with a run but no evaluations adds no column to the comparison: refused, not skipped."""
    d = files
    with h5py.File(d / "train_only.h5", "w") as f:
        _root_attrs(f, "sinklab-pretrain")
        _write_run(f, "solo", np.random.default_rng(4), [1, 2, 3], None)
    proc = _tool("compare", d / "good.h5", d / "train_only.h5")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"analysis.compare: {d / 'train_only.h5'}: no training run with evaluations " \
                          "(/runs/<run>/eval)\n"
    assert _tool("summary", d / "train_only.h5").returncode == 0  # a training log is something to show


def test_a_run_without_train_loss_is_noted_not_dropped(files, tmp_path):
    out = tmp_path / "report"
    proc = _tool("report", files / "no_loss.h5", "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (out / "index.html").read_text()
    notes = page.split("<h3>Notes</h3>")[1]
    assert "run lossless: /runs/lossless/train: no loss dataset (the training loss left out)" in notes
    assert "run untrained: /runs/untrained: no train group (the training log and loss left out)" in notes
    proc = _tool("summary", files / "no_loss.h5")
    assert proc.returncode == 0, proc.stderr
    assert "note: /runs/lossless/train: no loss dataset (the training loss left out)" in proc.stdout
    assert "note: /runs/untrained: no train group (the training log and loss left out)" in proc.stdout
