"""End-to-end tests of sinklab-sft: tiny softmax and sigmoid (--attn-sim sigmoid --attn-norm one) models
pre-trained for a few steps, then fine-tuned on packed synthetic chat rows with an assistant-only loss
mask; the results layout of train/monitor.hpp (curves, monitor, events, the sink before and after),
the non-finite policy, spike events, kill -9 + --resume, and -np 2 == -np 1.

The binaries come from $SINKLAB_BIN_DIR; the tests skip only when they are absent.
"""
import os
import signal
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import SYNTHETIC_VOCAB, check_blas_in_effect
from data_prep.safetensors_io import read_safetensors
from test_pretrain import BIN, ENV, _run, _wait_for

SFT = BIN / "sinklab-sft"
pytestmark = pytest.mark.skipif(not SFT.exists(), reason=f"{SFT} not built")
C = 16
MODELS = {"softmax": (), "sigmoid": ("--attn-sim=sigmoid", "--attn-norm=one")}


def write_sft_rows(path, n_conv, seed, context):
    """data_prep sft's layout (tokens int32 [N, C], loss_mask uint8 [N, C], attrs) over the synthetic
    corpus's vocabulary: user turn 62 + the start of a progression, assistant turn 63 + its continuation
    + EOS 0 (mask 1 on the continuation and EOS), conversations packed back to back, the last row padded."""
    rng = np.random.default_rng(seed)
    ids, mask = [], []
    for _ in range(n_conv):
        start, step, q, a = rng.integers(0, 61), rng.integers(1, 5), rng.integers(3, 10), rng.integers(3, 12)
        seq = [int(1 + (start + step * i) % 60) for i in range(q + a)]
        user, answer = [62] + seq[:q], seq[q:] + [0]
        ids += user + [63] + answer
        mask += [0] * (len(user) + 1) + [1] * len(answer)
    rows = -(-len(ids) // context)
    pad = rows * context - len(ids)
    with h5py.File(path, "w") as f:
        f["tokens"] = np.asarray(ids + [0] * pad, np.int32).reshape(rows, context)
        f["loss_mask"] = np.asarray(mask + [0] * pad, np.uint8).reshape(rows, context)
        f.attrs["context"] = context
        f.attrs["n_loss_tokens"] = int(sum(mask))
    return rows


@pytest.fixture(scope="module")
def bases(corpus, tmp_path_factory):
    """Both tiny models pre-trained for 12 steps, and the SFT rows."""
    d = tmp_path_factory.mktemp("sft")
    for name, flags in MODELS.items():
        _run([str(BIN / "sinklab-pretrain"), f"--vocab-size={SYNTHETIC_VOCAB}", "--d-model=32", "--n-layers=2",
              "--n-heads=2", "--ffn-hidden=64", f"--context={C}", f"--train-data={corpus / 'train.bin'}",
              f"--valid-data={corpus / 'valid.bin'}", "--steps=12", "--global-batch-tokens=128",
              "--micro-batch-rows=2", "--lr=3e-3", "--eval-every=0", "--eval-rows=8", "--probe-sequences=8",
              "--probe-length=12", f"--out-dir={d / name}", f"--run-name=base_{name}", *flags])
    rows = write_sft_rows(d / "chat.h5", 300, 3, C)
    return d, rows


def _sft_args(corpus, bases, model, out, *extra):
    d, _ = bases
    base = [f"--init-from={d / model}", f"--sft-data={d / 'chat.h5'}", f"--valid-data={corpus / 'valid.bin'}",
            "--steps=20", "--global-batch-tokens=128", "--micro-batch-rows=2", "--lr=1e-3", "--warmup-steps=2",
            "--lr-schedule=cosine", "--eval-every=10", "--eval-rows=8", "--probe-sequences=8", "--probe-length=12",
            "--checkpoint-every=5", "--log-every=5", "--spike-window=4", "--spike-sigma=6", f"--out-dir={out}",
            f"--run-name={model}"]
    names = {e.split("=")[0] for e in extra}
    return [a for a in base if a.split("=")[0] not in names] + list(extra)


def _sft(corpus, bases, model, out, *extra, np_=1, env=None, check=True):
    cmd = [str(SFT), *_sft_args(corpus, bases, model, out, *extra)]
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), *cmd]
    proc = subprocess.run(cmd, env=dict(ENV, **(env or {})), capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_fine_tunes_both_models_into_the_documented_layout(corpus, bases, tmp_path):
    d, rows = bases
    for model in MODELS:
        proc = _sft(corpus, bases, model, tmp_path / model, "--steps=0",  # 0: one epoch
                    "--checkpoint-every=1", "--keep-checkpoints=0")
        assert "fine-tuning" in proc.stdout and "Sink_1^0.3" in proc.stdout
        steps = rows // 8  # one epoch of 8-row global batches
        with h5py.File(tmp_path / model / "results.h5", "r") as f:
            run = f[f"runs/{model}"]
            assert run.attrs["init_from"].endswith("checkpoints/step_00000012")
            config = f.attrs["config"]
            assert "sft-data = " in config and "steps = 0" in config
            if model == "sigmoid":  # the model lines are the checkpoint's
                assert "attn-sim = sigmoid" in config and "attn-norm = one" in config
            loss, grad_norm = run["train/loss"][:], run["train/grad_norm"][:]
            assert list(run["train/step"][:]) == list(range(steps))
            assert np.all(np.isfinite(loss)) and np.all(grad_norm > 0)
            assert loss[-5:].mean() < loss[:5].mean(), loss  # the answers are learnable continuations
            mon = run["monitor"]
            assert list(mon["step"][:]) == list(range(steps))
            assert list(mon["skipped"][:]) == [0] * steps and list(mon["nonfinite_steps"][:]) == [0] * steps
            for name in ("layer_grad_norm", "update_ratio", "max_abs_activation"):
                assert mon[name].shape == (steps, 2), name
                # (the cosine schedule's last step has lr 0: no update)
                assert np.all(np.isfinite(mon[name][:])) and np.all(mon[name][:-1] > 0), name
            # The update ratio of step 3 from the weights before and after it (checkpoints 3 and 4).
            before = read_safetensors(tmp_path / model / "checkpoints" / "step_00000003" / "model.safetensors")[0]
            after = read_safetensors(tmp_path / model / "checkpoints" / "step_00000004" / "model.safetensors")[0]
            for layer in range(2):
                names = [n for n in after if n.startswith(f"model.layers.{layer}.")]
                delta = np.sqrt(sum(((after[n].astype(np.float64) - before[n]) ** 2).sum() for n in names))
                weight = np.sqrt(sum((after[n].astype(np.float64) ** 2).sum() for n in names))
                np.testing.assert_allclose(mon["update_ratio"][3, layer], delta / weight, rtol=1e-4)
            # The layers' gradient norms make up the global one (the rest: embedding, final norm, head).
            assert np.all(np.sqrt((mon["layer_grad_norm"][:] ** 2).sum(axis=1)) < grad_norm)
            assert np.all(mon["update_ratio"][:] < 0.1)  # lr 1e-3 Adam steps against O(1) weights
            # The sink before (eval step 0: the base weights) and after fine-tuning, one probe set.
            ev = run["eval"]
            assert ev["step"][0] == 0 and ev["step"][-1] == steps
            assert ev["sink"].shape == (len(ev["step"]), 3) and ev["alpha"].shape == (len(ev["step"]), 2, 2)
        # The base run's last evaluation probed the same sequences with the same weights as step 0 here.
        with h5py.File(d / model / "results.h5", "r") as base, h5py.File(tmp_path / model / "results.h5", "r") as ft:
            np.testing.assert_allclose(ft[f"runs/{model}/eval/alpha"][0], base[f"runs/base_{model}/eval/alpha"][-1],
                                       rtol=1e-6)


def test_model_flags_come_from_the_checkpoint(corpus, bases, tmp_path):
    proc = _sft(corpus, bases, "softmax", tmp_path / "x", "--d-model=48", check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1 and "--d-model:" in lines[0] and "'32'" in lines[0] \
        and "'48'" in lines[0], proc.stderr
    proc = _sft(corpus, bases, "sigmoid", tmp_path / "x", "--attn-sim=exp", check=False)
    assert proc.returncode != 0 and "--attn-sim:" in proc.stderr and "'sigmoid'" in proc.stderr, proc.stderr
    # The checkpoint's own values are accepted.
    proc = _sft(corpus, bases, "sigmoid", tmp_path / "x", "--d-model=32", "--attn-sim=sigmoid", "--dry-run")
    assert "attn-norm = one" in proc.stdout
    proc = _sft(corpus, bases, "softmax", tmp_path / "x", f"--init-from={tmp_path / 'nothing'}", check=False)
    assert proc.returncode != 0 and "--init-from" in proc.stderr, proc.stderr
    # A resume continues its own run: other SFT data is refused, naming the flag.
    _sft(corpus, bases, "softmax", tmp_path / "run", "--steps=5")
    write_sft_rows(tmp_path / "other.h5", 300, 4, C)
    proc = _sft(corpus, bases, "softmax", tmp_path / "run", "--steps=10", "--resume",
                f"--sft-data={tmp_path / 'other.h5'}", check=False)
    assert proc.returncode != 0 and "--sft-data:" in proc.stderr, proc.stderr
    _sft(corpus, bases, "softmax", tmp_path / "run", "--steps=10", "--resume")  # its own data resumes
    with h5py.File(tmp_path / "run" / "results.h5", "r") as f:
        assert len(f["runs/softmax/train/loss"]) == 10 and len(f["runs/softmax/monitor/step"]) == 10


def test_nonfinite_gradient_skip_and_halt(corpus, bases, tmp_path):
    hook = {"SINKLAB_TEST_NAN_GRAD_STEP": "7"}
    _sft(corpus, bases, "softmax", tmp_path / "skip", "--on-nonfinite=skip", env=hook)
    _sft(corpus, bases, "softmax", tmp_path / "plain")
    with h5py.File(tmp_path / "skip" / "results.h5", "r") as f, h5py.File(tmp_path / "plain" / "results.h5", "r") as p:
        mon, train, plain = f["runs/softmax/monitor"], f["runs/softmax/train"], p["runs/softmax/train"]
        assert list(np.nonzero(mon["skipped"][:])[0]) == [7]
        assert list(mon["nonfinite_steps"][:]) == [0] * 7 + [1] * 13
        assert np.isnan(train["grad_norm"][7]) and np.all(mon["update_ratio"][7] == 0)
        np.testing.assert_array_equal(train["loss"][:8], plain["loss"][:8])  # the same up to the skipped step
        assert not np.allclose(train["loss"][8:], plain["loss"][8:], rtol=1e-6)  # then without its update
        ev = f["runs/softmax/events"]
        assert ev.attrs["kinds"].startswith("0 non-finite step")
        assert 7 in list(ev["step"][:]) and list(ev["kind"][:])[list(ev["step"][:]).index(7)] == 0
    assert (tmp_path / "skip" / "DONE").exists()

    out = tmp_path / "halt"
    proc = _sft(corpus, bases, "softmax", out, "--on-nonfinite=halt", env=hook, check=False)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode != 0 and len(errors) == 1 and "--on-nonfinite halt" in errors[0], proc.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000005"]  # intact, nothing after
    assert (out / "checkpoints" / "step_00000005" / "COMPLETE").exists() and not (out / "DONE").exists()
    with h5py.File(out / "results.h5", "r") as f:
        assert len(f["runs/softmax/train/loss"]) == 8 and list(f["runs/softmax/events/kind"][:]) == [0]


def test_injected_loss_spike_is_an_event(corpus, bases, tmp_path):
    proc = _sft(corpus, bases, "sigmoid", tmp_path / "spike", env={"SINKLAB_TEST_LOSS_SPIKE_STEP": "12"})
    assert "event at step 13: loss spike" in proc.stderr + proc.stdout
    with h5py.File(tmp_path / "spike" / "results.h5", "r") as f:
        ev = f["runs/sigmoid/events"]
        spikes = [(s, v) for s, k, v in zip(ev["step"][:], ev["kind"][:], ev["value"][:]) if k == 1]
        assert spikes and spikes[0][0] == 12 and spikes[0][1] == f["runs/sigmoid/train/loss"][12]
        assert ev["window_mean"][list(ev["step"][:]).index(12)] < spikes[0][1] / 10


@pytest.mark.identity
def test_kill9_then_resume_reproduces_the_curve(corpus, bases, tmp_path):
    hooks = {"SINKLAB_TEST_NAN_GRAD_STEP": "4", "SINKLAB_TEST_LOSS_SPIKE_STEP": "150"}
    extra = ("--steps=200", "--checkpoint-every=10", "--eval-every=50", "--on-nonfinite=skip")
    _sft(corpus, bases, "sigmoid", tmp_path / "ref", *extra, env=hooks)
    out = tmp_path / "killed"
    cmd = [str(SFT), *_sft_args(corpus, bases, "sigmoid", out, *extra)]
    proc = subprocess.Popen(cmd, env=dict(ENV, **hooks), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(out / "checkpoints" / "step_00000030", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "DONE").exists()
    _sft(corpus, bases, "sigmoid", out, *extra, "--resume", env=hooks)
    with h5py.File(tmp_path / "ref" / "results.h5", "r") as r, h5py.File(out / "results.h5", "r") as k:
        for name in ("train/step", "train/loss", "train/grad_norm", "monitor/step", "monitor/skipped",
                     "monitor/nonfinite_steps", "monitor/layer_grad_norm", "monitor/update_ratio",
                     "monitor/max_abs_activation", "events/step", "events/kind", "events/value", "eval/step",
                     "eval/alpha"):
            np.testing.assert_array_equal(k[f"runs/sigmoid/{name}"][:], r[f"runs/sigmoid/{name}"][:], err_msg=name)
        assert list(k["runs/sigmoid/monitor/nonfinite_steps"][-1:]) == [1]
        assert 150 in list(k["runs/sigmoid/events/step"][:])
        check_blas_in_effect(str(k["runs/sigmoid"].attrs["cpu_blas"]))


def test_two_ranks_match_one_rank(corpus, bases, tmp_path):
    _sft(corpus, bases, "softmax", tmp_path / "np1")
    _sft(corpus, bases, "softmax", tmp_path / "np2", np_=2)
    with h5py.File(tmp_path / "np1" / "results.h5", "r") as f1, h5py.File(tmp_path / "np2" / "results.h5", "r") as f2:
        # As test_pretrain's rank test: the same global batch and loss normalisation, other GEMM shapes.
        for name in ("train/loss", "train/grad_norm", "monitor/layer_grad_norm", "monitor/update_ratio",
                     "monitor/max_abs_activation", "eval/alpha"):
            np.testing.assert_allclose(f2[f"runs/softmax/{name}"][:], f1[f"runs/softmax/{name}"][:], rtol=1e-5,
                                       atol=0, err_msg=name)


JOBS = Path(__file__).resolve().parents[2] / "jobs"


def _ini(path):
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def test_job_files(bases, tmp_path):
    d, _ = bases
    files = sorted((JOBS / "sft").glob("*.ini"))
    assert {f.name for f in files} >= {"ultrachat_1b_softmax.ini", "ultrachat_1b_sigmoid.ini",
                                       "tiny_cpu_softmax.ini", "tiny_cpu_sigmoid.ini"}
    outs = [_ini(f)["out-dir"] for f in files]
    assert len(set(outs)) == len(outs), outs
    # Paper App. D: lr 2e-5 cosine, batch 64 x 2048, one epoch, from the 1B runs' own out-dirs.
    sources = {"softmax": JOBS / "pretrain" / "1b_default.ini",
               "sigmoid": JOBS / "pretrain" / "sec7_scale_1b" / "sigmoid_one.ini"}
    for model, pretrain_job in sources.items():
        s = _ini(JOBS / "sft" / f"ultrachat_1b_{model}.ini")
        assert (s["lr"], s["lr-schedule"], s["global-batch-tokens"], s["steps"]) == ("2e-5", "cosine", str(64 * 2048), "0")
        p = _ini(pretrain_job)
        assert s["init-from"] == p["out-dir"]
        assert p.get("attn-sim", "exp") == ("sigmoid" if model == "sigmoid" else "exp")
    # Every file is a valid configuration (the checkpoint replaced by a tiny one; --dry-run reads no data).
    for f in files:
        proc = _run([str(SFT), "--config", str(f), f"--init-from={d / 'softmax'}", "--probe-length=12", "--dry-run"],
                    check=False)
        assert proc.returncode == 0 and "sft-data = " in proc.stdout and "d-model = 32" in proc.stdout, \
            (f.name, proc.stderr)


def test_report_draws_fig30_and_the_sink_table(corpus, bases, tmp_path):
    import csv

    from analysis.report import build_report
    hook = {"SINKLAB_TEST_LOSS_SPIKE_STEP": "12"}
    for model in MODELS:
        _sft(corpus, bases, model, tmp_path / model, "--on-nonfinite=skip",
             env=dict(hook, SINKLAB_TEST_NAN_GRAD_STEP="6") if model == "softmax" else hook)
    rep = build_report([tmp_path / m / "results.h5" for m in MODELS], tmp_path / "report")
    assert (tmp_path / "report" / "figures" / "fig30_sft_stability.png").stat().st_size > 10_000
    with open(tmp_path / "report" / "tables" / "sft_sink_before_after.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == list(MODELS)
    for r in rows:
        with h5py.File(tmp_path / r["run"] / "results.h5", "r") as h:
            ev = h[f"runs/{r['run']}/eval"]
            assert float(r["base Sink_1^0.3"]) == pytest.approx(ev["sink"][0, 1])
            assert float(r["fine-tuned Sink_1^0.3"]) == pytest.approx(ev["sink"][-1, 1])
            assert float(r["base valid loss"]) == pytest.approx(ev["valid_loss"][0])
            from analysis.sections.labels import checkpoint_name  # ".../<run>/checkpoints/step_<n>" as "<run>, step n"
            assert r["base checkpoint"] == checkpoint_name(h[f"runs/{r['run']}"].attrs["init_from"])
        assert r["steps"] == "20" and r["spike events"] == "1"
        assert r["non-finite steps"] == ("1" if r["run"] == "softmax" else "0")
    assert "Fine-tuning stability" in (tmp_path / "report" / "index.html").read_text()
    assert not [s for s in rep.skips if "fine-tuning" in " ".join(s) or "before/after" in " ".join(s)], rep.skips
