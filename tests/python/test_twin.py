"""The PyTorch twin (bench/twin/replay.py) on small sinklab-pretrain runs: it reads the run's config,
step-0 weights and recorded rows, replays every step in float64 and must land on sinklab's curves (the
trainer runs in f32: differences of f32 rounding, ~1e-6 over a dozen steps), with data parallelism, a
fixed-token intervention, a cosine schedule with warmup, document rows, learned positions and a ReLU
FFN; a run whose config is altered afterwards must fail the comparison.

The twin needs torch, which only the oracle environment has (.venv-oracle, env/oracle.sh): the tests
skip without it, and without the sinklab-pretrain binary ($SINKLAB_BIN_DIR, as test_pretrain.py).
"""
import json
import os
import shutil
import subprocess
from pathlib import Path

import h5py
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
PRETRAIN = BIN / "sinklab-pretrain"
ORACLE = Path(os.environ.get("ORACLE_PYTHON", ROOT / ".venv-oracle" / "bin" / "python"))
pytestmark = [pytest.mark.skipif(not PRETRAIN.exists(), reason=f"{PRETRAIN} not built"),
              pytest.mark.skipif(not ORACLE.exists(), reason=f"{ORACLE} (the oracle venv with torch) absent")]

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def _pretrain(corpus, out, np_, *extra):
    heads = [] if any(e.startswith("--n-heads") for e in extra) else ["--n-heads=2"]
    cmd = [str(PRETRAIN), "--vocab-size=64", "--d-model=32", *heads, "--ffn-hidden=48", "--context=16",
           f"--train-data={corpus / 'train.bin'}", f"--valid-data={corpus / 'valid.bin'}", "--steps=12",
           "--global-batch-tokens=256", "--micro-batch-rows=4", "--lr=3e-3", "--warmup-steps=3",
           "--eval-every=4", "--eval-rows=8", "--probe-sequences=8", "--probe-length=12", "--log-every=4",
           "--checkpoint-at-start", "--record-batches", "--keep-checkpoints=10", f"--out-dir={out}",
           "--run-name=t", *extra]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), *cmd]
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _replay(out, *extra):
    cmd = [str(ORACLE), str(ROOT / "bench" / "twin" / "replay.py"), str(out), "--dtype=float64", "--threads=1",
           f"--json={out / 'twin.json'}", *extra]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)


def test_twin_replays_a_data_parallel_intervened_run(corpus, tmp_path):
    out = tmp_path / "run"
    _pretrain(corpus, out, 2, "--n-layers=2", "--lr-schedule=cosine", "--min-lr=3e-4",
              "--fixed-token-position=1", "--fixed-token-id=5")
    proc = _replay(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "twin.json").read_text())
    s = res["summary"]
    assert res["pass"] and s["lr_abs_max"] < 1e-15  # math.cos and std::cos may differ in the last bit
    assert s["train_loss_rel_max"] < 1e-5 and s["valid_loss_rel_max"] < 1e-5, s
    assert s["alpha1_abs_max"] < 1e-5 and s["bos_attn_abs_max"] < 1e-5 and s["alpha1_intervened_abs_max"] < 1e-5, s
    assert [r["step"] for r in res["evals"]] == [0, 4, 8, 12]
    assert max(res["final_weights_rel"].values()) < 1e-4


def test_twin_replays_document_rows_with_learned_positions(corpus, tmp_path):
    out = tmp_path / "run"
    _pretrain(corpus, out, 1, "--n-layers=1", "--n-heads=1", "--document-rows", "--pos-emb=learned", "--ffn=relu")
    proc = _replay(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = json.loads((out / "twin.json").read_text())["summary"]
    assert s["train_loss_rel_max"] < 1e-5 and s["alpha1_abs_max"] < 1e-5, s


def test_twin_fails_a_run_it_does_not_reproduce(corpus, tmp_path):
    out = tmp_path / "run"
    _pretrain(corpus, out, 1, "--n-layers=1")
    with h5py.File(out / "results.h5", "r+") as f:  # the twin now trains at twice the run's learning rate
        config = f["runs/t"].attrs["config"]
        config = config.decode() if isinstance(config, bytes) else config
        f["runs/t"].attrs["config"] = config.replace("lr = 0.003\n", "lr = 0.006\n")
    proc = _replay(out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL" in proc.stdout and "learning rates differ" in proc.stdout


def test_twin_refuses_a_run_without_its_step0_weights(corpus, tmp_path):
    out = tmp_path / "run"
    _pretrain(corpus, out, 1, "--n-layers=1")
    shutil.rmtree(out / "checkpoints" / "step_00000000")
    proc = _replay(out)
    assert proc.returncode == 2 and "--checkpoint-at-start" in proc.stderr
