"""Shared pytest set-up for tests/python: make the repository root importable.

`python -m pytest` from the root already has it on sys.path; this makes plain `pytest` work too.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config):
    # tests/run_all.sh runs these again with OPENBLAS_CORETYPE=Haswell (the AVX2 kernels): a test that
    # claims bit-identity (resume, rank counts) must hold on every CPU kind, not only on the one CI had.
    config.addinivalue_line("markers", "identity: claims bit-identity between two runs or code paths")


def check_blas_in_effect(cpu_blas):
    """cpu_blas (a run's recorded BLAS, e.g. 'OpenBLAS 0.3.21 (Haswell kernels, 1 threads); f32 GEMM oneDNN
    2.6.3 (AVX2)') uses the kernels OPENBLAS_CORETYPE and ONEDNN_MAX_CPU_ISA force, when they force any: the
    forced runs must not silently use the native ones."""
    import os
    forced = os.environ.get("OPENBLAS_CORETYPE", "")
    if forced and cpu_blas.startswith("OpenBLAS"):
        assert f"({forced.lower()} kernels" in cpu_blas.lower(), (forced, cpu_blas)
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    if limit and "f32 GEMM oneDNN" in cpu_blas:
        assert f"({limit})" in cpu_blas, (limit, cpu_blas)


def assert_jobs_pass_dry_run(pretrain, env, items, job_text_of, tmp_path):
    """Each item's job file as its runner writes it, job_text_of(item, run_dir), passes the trainer's own checks
    (sinklab-pretrain --dry-run); items have .cell.name (jobs/atlas and jobs/bridge items)."""
    for it in items:
        run_dir = tmp_path / it.cell.name
        run_dir.mkdir()
        (run_dir / "job.ini").write_text(job_text_of(it, run_dir))
        proc = subprocess.run([str(pretrain), "--config", str(run_dir / "job.ini"), "--dry-run"],
                              env=dict(env, SINKLAB_MPI="0"), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (it.cell.name, proc.stdout[-500:], proc.stderr[-500:])


if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# The declared results schema (src/io/results_schema.tsv) is checked in every test: each write of a binary the
# tests run (they pass os.environ on) and each read of analysis.results. SINKLAB_SCHEMA_CHECK= (empty) turns it off.
SCHEMA = REPO_ROOT / "src" / "io" / "results_schema.tsv"
os.environ.setdefault("SINKLAB_SCHEMA_CHECK", str(SCHEMA))


# A small learnable corpus for the end-to-end training tests (sinklab-pretrain under mpirun and Slurm):
# every document is an arithmetic progression mod 63 over ids 1..63, ended by EOS = 0.
SYNTHETIC_VOCAB = 64


def _synthetic_documents(n_docs, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_docs):
        start, step, length = rng.integers(0, 63), rng.integers(1, 5), rng.integers(20, 60)
        docs.append([int(1 + (start + step * i) % 63) for i in range(length)] + [0])
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A directory with train.bin (400 documents) and valid.bin (60) in the shard format."""
    from data_prep.shards import write_shard

    d = tmp_path_factory.mktemp("corpus")
    write_shard(d / "train.bin", _synthetic_documents(400, 1), vocab_size=SYNTHETIC_VOCAB, eos_id=0)
    write_shard(d / "valid.bin", _synthetic_documents(60, 2), vocab_size=SYNTHETIC_VOCAB, eos_id=0)
    return d


def survey_contents(path):
    """A sinklab-survey results file: every dataset, and the attributes of the measurement groups, keyed
    by path; /items reduced to what does not depend on the schedule (status, error)."""
    import h5py
    import numpy as np

    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if name.startswith("items/"):
                if isinstance(obj, h5py.Group):
                    out[name] = (str(obj.attrs["status"]), str(obj.attrs["error"]))
            elif isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
            else:
                out[name + "@attrs"] = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in obj.attrs.items()}
        f.visititems(visit)
    return out


def assert_same_contents(a, b):
    """Equal survey_contents: the same paths, every array equal in dtype, shape and value."""
    import numpy as np

    assert sorted(a) == sorted(b), set(a) ^ set(b)
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            assert a[k] == b[k], (k, a[k], b[k])


@pytest.fixture(scope="module")
def bbm_ci_data(tmp_path_factory):
    """A tiny data_prep bbm build for the atlas's CI scales: sequences of 32 characters, 2000 to train on, 64 to
    validate on."""
    from data_prep.__main__ import main

    d = tmp_path_factory.mktemp("atlas_data") / "bbm"
    assert main(["bbm", "--out", str(d), "--seq-len", "32", "--train-sequences", "2000", "--valid-sequences", "64",
                 "--survey-n", "0"]) == 0
    return d
