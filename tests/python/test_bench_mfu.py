"""bench_train_step (bench/run_train_step.sh's sinklab side) never prints an MFU above 1: a peak measured
below what the step itself ran is refused in one line, exit 3."""
import os
import subprocess
from pathlib import Path

import pytest

BIN = Path(os.environ.get("SINKLAB_BIN_DIR", Path(__file__).resolve().parents[2] / "build" / "bin"))
BENCH = BIN / "bench_train_step"
TINY = ["--vocab", "64", "--d", "32", "--layers", "1", "--heads", "2", "--ffn", "64", "--seq", "16", "--rows", "2",
        "--steps", "2", "--warmup", "1"]

pytestmark = pytest.mark.skipif(not BENCH.exists(), reason=f"{BENCH} not built")


def run(*args):
    return subprocess.run([str(BENCH), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_an_mfu_above_one_is_refused_in_one_line():
    r = run(*TINY, "--peak-gflops", "1e-6")  # any real step runs faster than a micro-GFLOP/s "peak"
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "MFU" in lines[0] and "> 1 refused" in lines[0] and "peak" in lines[0], r.stderr
    assert "mfu" not in r.stdout  # nothing printed as a result


def test_a_plausible_peak_gives_an_mfu_below_one():
    r = run(*TINY, "--peak-gflops", "1e6")
    assert r.returncode == 0, r.stderr
    fields = r.stdout.split()
    mfu = float(fields[fields.index("mfu") + 1])
    assert 0 < mfu < 1

