"""The training section's emergence findings follow analysis/stats/emergence.py's persistent rule (issue 44, item 7):
constructed runs whose Sink_1^0.3 is a transient blip, a late emergence after a crossing that fell back, never
above 0, and above 0 from step 0; the rule is stated in the section's text.
"""
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

h5py = pytest.importorskip("h5py")
np = pytest.importorskip("numpy")
pytest.importorskip("matplotlib")

from test_report import _root_attrs, _write_run  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
EVAL_STEPS = [0, 50, 100, 150, 200]
# Sink_1^0.3 (%) at EVAL_STEPS: column 1 of eval/sink (test_report.EPS = 0.2, 0.3, 0.4).
SERIES = {"blip": [0, 12.5, 0, 0, 0], "late": [0, 6.25, 0, 12.5, 25], "never": [0, 0, 0, 0, 0],
          "from_start": [12.5, 25, 25, 50, 50]}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("emergence")
    rng = np.random.default_rng(5)
    with h5py.File(d / "runs.h5", "w") as f:
        _root_attrs(f, "sinklab-pretrain --config jobs/pretrain/tiny.ini")
        for name, sink in SERIES.items():
            _write_run(f, name, rng, list(range(200)), EVAL_STEPS)
            ds = f[f"/runs/{name}/eval/sink"]
            col = ds[...]
            col[:, 1] = sink
            ds[...] = col
    out = d / "report"
    proc = subprocess.run([sys.executable, "-m", "analysis.report", str(d / "runs.h5"), "-o", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    findings = (out / "findings.md").read_text()
    return {name: next(line for line in findings.splitlines() if line.startswith(f"- {name}: ")) for name in SERIES}, \
        (out / "index.html").read_text()


def test_a_transient_blip_is_no_emergence(report):
    line = report[0]["blip"]
    assert "a thresholded sink emerged" not in line
    assert line.startswith("- blip: no thresholded sink emerged in 200 steps (")
    assert "Sink_1^0.3 was above 0 at 1 of 5 evaluations (first at step 50) but is 0.00 % at step 200, a transient " \
           "crossing" in line


def test_a_late_emergence_is_dated_from_where_it_stays(report):
    line = report[0]["late"]
    # Above 0 at step 50, back to 0 at 100, above from 150 to the end: it emerged at 150, not at 50.
    assert re.match(r"- late: a thresholded sink emerged at step 150 \(\S+ tokens\): Sink_1\^0\.3 above 0 from there "
                    r"to the last evaluation, 25\.00 % at step 200", line), line


def test_never_and_from_step_0(report):
    never, start = report[0]["never"], report[0]["from_start"]
    assert never.startswith("- never: no thresholded sink emerged in 200 steps (")
    assert "Sink_1^0.3 = 0.00 % at every evaluation" in never
    assert start.startswith("- from_start: Sink_1^0.3 above 0 from initialisation (step 0) to the last evaluation, "
                            "50.00 % at step 200")


def test_the_rule_is_stated_in_the_section(report):
    section = report[1].split('id="runs">')[1]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", section)).split())
    assert "When a thresholded sink emerged (the findings): a sink has emerged at the first evaluation from which " \
           "Sink_1^0.3 stays above 0 % to the run's last evaluation (a transient crossing is not an emergence" in text
