"""The job files under jobs/pretrain: generated ones up to date, every one listed in INDEX.md, every one a
valid configuration (--dry-run), and every one trains: a smoke run of each file at a tiny size.

The smoke run keeps everything a file sets (its variant axes, interventions, optimiser settings, number
of heads, run name) and overrides only the size and the data: a 2-layer model on the synthetic corpus of
conftest.py (the Bigram-Backcopy files: on a small data_prep bbm build with sequences of 32 characters,
their bbm.json included), context 32, 3 steps of 2 rows, one evaluation at the end, CPU, one rank. The head
dimension is 16 (or k-bias-dims when larger), so d-model = n-heads * 16. One test per folder runs its
files, one process each, and reports every file that failed, not just the first.

The files run WORKERS processes at a time (each is a single process, started without mpirun: it runs
without MPI, see parallel/mpi.hpp).

The binaries come from $SINKLAB_BIN_DIR (tests/run_all.sh builds them first); the tests that need them
skip only when they are absent.
"""
import math
import os
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "jobs" / "pretrain"
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", REPO / "build" / "bin"))
PRETRAIN = BIN / "sinklab-pretrain"
needs_binary = pytest.mark.skipif(not PRETRAIN.exists(), reason=f"{PRETRAIN} not built")

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
VOCAB = 64  # conftest.SYNTHETIC_VOCAB
STEPS, LAYERS, CONTEXT = 3, 2, 32
WORKERS = 4

ALL_JOBS = sorted(JOBS.rglob("*.ini"))
BY_FOLDER = defaultdict(list)
for _job in ALL_JOBS:
    BY_FOLDER[str(_job.parent.relative_to(JOBS)) if _job.parent != JOBS else "top"].append(_job)


def _rel(job):
    return str(job.relative_to(JOBS))


def _read_ini(path):
    settings = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def _run_all(commands, timeout):
    """subprocess.run of every command, WORKERS at a time; the results in order."""
    def run(cmd):
        return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(run, commands))


def test_generated_job_files_are_up_to_date():
    proc = subprocess.run([sys.executable, str(JOBS / "make_jobs.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_index_lists_every_job_file():
    index = (JOBS / "INDEX.md").read_text()
    missing = [_rel(job) for job in ALL_JOBS if f"`{_rel(job)}`" not in index]
    assert not missing, f"not in jobs/pretrain/INDEX.md: {missing}"


def test_job_files_have_their_own_outputs():
    # Two files writing into one out-dir would overwrite each other's checkpoints and results.
    seen = {}
    for job in ALL_JOBS:
        s = _read_ini(job)
        for key in ("out-dir", "run-name"):
            assert key in s, f"{_rel(job)} sets no {key}"
        assert s["out-dir"] not in seen, f"{_rel(job)} and {seen[s['out-dir']]} share out-dir {s['out-dir']}"
        seen[s["out-dir"]] = _rel(job)


@needs_binary
def test_every_job_file_is_a_valid_configuration():
    procs = _run_all([[str(PRETRAIN), "--config", str(job), "--dry-run"] for job in ALL_JOBS], timeout=120)
    failures = [f"{_rel(job)}: {proc.stderr.strip()}" for job, proc in zip(ALL_JOBS, procs)
                if proc.returncode != 0 or "d-model = " not in proc.stdout or "steps = " not in proc.stdout]
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def bbm_corpus(tmp_path_factory):
    """A small data_prep bbm build whose sequences are CONTEXT characters long (vocabulary 85)."""
    from data_prep.__main__ import main
    out = tmp_path_factory.mktemp("bbm")
    assert main(["bbm", "--out", str(out), "--seq-len", str(CONTEXT), "--train-sequences", "200",
                 "--valid-sequences", "40", "--survey-n", "0"]) == 0
    return out


def _tiny_args(job, corpus, out, bbm=None):
    s = _read_ini(job)
    head_dim = max(16, int(s.get("k-bias-dims", "0")))
    data = [f"--vocab-size={VOCAB}", f"--train-data={corpus / 'train.bin'}", f"--valid-data={corpus / 'valid.bin'}"]
    if "bbm-meta" in s:
        data = ["--vocab-size=85", f"--train-data={bbm / 'train.bin'}", f"--valid-data={bbm / 'valid.bin'}",
                f"--bbm-meta={bbm / 'bbm.json'}"]
    return [str(PRETRAIN), "--config", str(job), *data,
            f"--d-model={int(s['n-heads']) * head_dim}", f"--n-layers={LAYERS}",
            "--ffn-hidden=64", f"--context={CONTEXT}",
            f"--steps={STEPS}", f"--global-batch-tokens={2 * CONTEXT}", "--micro-batch-rows=2", "--warmup-steps=1",
            "--eval-every=0", "--eval-every-after=off", "--eval-rows=4", "--probe-sequences=4", "--probe-length=16",
            "--checkpoint-every=0", "--log-every=1", f"--out-dir={out}", "--device=cpu"], s


def _check_results(out, run, n_heads):
    """What is wrong with a finished smoke run's results (empty when nothing)."""
    with h5py.File(out / "results.h5", "r") as f:
        if f"runs/{run}" not in f:
            return f"no /runs/{run} in results.h5 (has {list(f.get('runs', {}))})"
        train, ev = f[f"runs/{run}/train"], f[f"runs/{run}/eval"]
        loss = train["loss"][:]
        if loss.shape != (STEPS,) or not np.all(np.isfinite(loss)):
            return f"train loss {loss}"
        for name in ("step", "valid_loss", "sink", "alpha", "massive_ratio"):
            if name not in ev:
                return f"eval has no {name}"
        if list(ev["step"][:]) != [STEPS]:
            return f"eval steps {list(ev['step'][:])}"
        valid = float(ev["valid_loss"][0])
        sink = ev["sink"][:]
        if not math.isfinite(valid):
            return f"valid loss {valid}"
        if sink.shape != (1, 3) or not np.all((sink >= 0) & (sink <= 100)):
            return f"sink {sink}"
        if ev["alpha"].shape != (1, LAYERS, n_heads) or not np.all(np.isfinite(ev["alpha"][:])):
            return f"alpha {ev['alpha'][:]}"
        if ev["massive_ratio"].shape != (1, LAYERS) or not np.all(np.isfinite(ev["massive_ratio"][:])):
            return f"massive ratio {ev['massive_ratio'][:]}"
    if not (out / "DONE").exists():
        return "no DONE file"
    return ""


@needs_binary
@pytest.mark.parametrize("folder", sorted(BY_FOLDER))
def test_job_files_train_at_tiny_size(folder, corpus, tmp_path, request):
    jobs = BY_FOLDER[folder]
    bbm = request.getfixturevalue("bbm_corpus") if any("bbm-meta" in _read_ini(job) for job in jobs) else None
    runs = [_tiny_args(job, corpus, tmp_path / job.stem, bbm) for job in jobs]
    procs = _run_all([cmd for cmd, _ in runs], timeout=300)
    failures = []
    for job, (_, settings), proc in zip(jobs, runs, procs):
        if proc.returncode != 0:
            failures.append(f"{_rel(job)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
            continue
        problem = _check_results(tmp_path / job.stem, settings["run-name"], int(settings["n-heads"]))
        if problem:
            failures.append(f"{_rel(job)}: {problem}")
    assert not failures, "\n".join(failures)
