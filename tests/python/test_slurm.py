"""The real sbatch scripts (slurm/pretrain.sh, slurm/pretrain_1b.sh) on a private single-node Slurm
cluster started on this machine (tests/integration/slurm_cluster.sh): 2 ranks through srun --mpi=pmix,
results.h5 and DONE, and the preemption path: SIGUSR1 to the job's steps (what `#SBATCH --signal=USR1@120`
does before the time limit) -> the trainer checkpoints and exits 0 -> the script requeues the job -> the
requeued job resumes, and its loss sequence equals an uninterrupted run's bit for bit.

Skips only when Slurm (slurmctld, slurmd, sbatch) is not installed, or, like test_pretrain.py, when the
binaries are not built. Needs root (the private cluster runs with SlurmUser=root).
"""
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest


ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
CLUSTER = ROOT / "tests" / "integration" / "slurm_cluster.sh"
SLURM_TOOLS = ("slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "srun")
_missing = [t for t in SLURM_TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
pytestmark = [
    pytest.mark.skipif(bool(_missing), reason=f"Slurm not installed (missing {', '.join(_missing)})"),
    pytest.mark.skipif(not (BIN / "sinklab-pretrain").exists(), reason=f"{BIN / 'sinklab-pretrain'} not built"),
]

VOCAB = 64  # conftest.SYNTHETIC_VOCAB: the `corpus` fixture's vocabulary
JOB_TIMEOUT = 150  # seconds for one job (requeue included) on a loaded 2-core machine
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED"}
# The job's resources on the sbatch line override the scripts' #SBATCH lines (8 GPUs x 8 tasks, 4 nodes).
RESOURCES = ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=0"]


def _slurm_path():
    """slurmctld/slurmd live in /usr/sbin, which a non-login PATH may lack."""
    return os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A private slurmctld + slurmd under a temp dir; yields the environment clients and jobs need."""
    d = tmp_path_factory.mktemp("slurm")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    env["PATH"] = _slurm_path()
    try:
        proc = subprocess.run(["bash", str(CLUSTER), "start", str(d)], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"private Slurm cluster did not start:\n{proc.stdout}\n{proc.stderr}"
        conf = proc.stdout.strip().splitlines()[-1]
        env.update(SLURM_CONF=conf, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   SINKLAB_BIN=str(BIN), DEVICE="cpu")
        env.pop("CONFIG", None)
        env.pop("OUT_DIR", None)
        yield {"env": env, "dir": d}
    finally:
        stop = subprocess.run(["bash", str(CLUSTER), "stop", str(d)], env=env, capture_output=True, text=True,
                              timeout=60)
        assert stop.returncode == 0, f"stopping the private Slurm cluster failed:\n{stop.stdout}\n{stop.stderr}"


def _tiny_flags(corpus, steps, *extra):
    """Flags that shrink any job file to the tiny synthetic setting (flags win over the .ini)."""
    base = [f"--vocab-size={VOCAB}", "--d-model=32", "--n-layers=2", "--n-heads=2", "--ffn-hidden=64",
            "--context=16", f"--train-data={corpus / 'train.bin'}", f"--valid-data={corpus / 'valid.bin'}",
            f"--steps={steps}", "--global-batch-tokens=128", "--micro-batch-rows=2", "--warmup-steps=2",
            "--eval-every=100", "--eval-rows=8", "--probe-sequences=8", "--probe-length=12",
            "--checkpoint-every=10000", "--log-every=10", "--run-name=t"]
    names = {e.split("=")[0] for e in extra}
    return [a for a in base if a.split("=")[0] not in names] + list(extra)


def _sbatch(cluster, script, out_dir, log, flags, config=None):
    env = dict(cluster["env"])
    if out_dir is not None:
        env["OUT_DIR"] = str(out_dir)
    if config:
        env["CONFIG"] = config
    cmd = ["sbatch", "--parsable", *RESOURCES, f"--output={log}", "--open-mode=append", f"--chdir={ROOT}",
           str(ROOT / "slurm" / script), *flags]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"sbatch refused the job:\n{' '.join(cmd)}\n{proc.stderr}"
    return proc.stdout.strip().split(";")[0]


def _job(cluster, job_id):
    """scontrol's one-line record of the job as a dict (JobState, ExitCode, Restarts, ...)."""
    proc = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=cluster["env"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return dict(kv.split("=", 1) for kv in proc.stdout.split() if "=" in kv)


def _diagnose(cluster, job_id, log):
    text = [f"job {job_id}: {_job(cluster, job_id)}"]
    for f in (Path(log), cluster["dir"] / "slurmctld.log", cluster["dir"] / "slurmd.log"):
        lines = f.read_text(errors="replace").splitlines()[-40:] if f.exists() else ["(missing)"]
        text.append(f"---- {f}\n" + "\n".join(lines))
    return "\n".join(text)


def _wait_job(cluster, job_id, log, timeout=JOB_TIMEOUT, until=None):
    """Polls until the job is in a final state (or `until(job, log_text)` is true); scancels it on timeout."""
    t0 = time.time()
    while True:
        job = _job(cluster, job_id)
        text = Path(log).read_text(errors="replace") if Path(log).exists() else ""
        if until is not None and until(job, text):
            return job, text
        if until is None and job["JobState"] in TERMINAL:
            return job, text
        if time.time() - t0 > timeout:
            msg = _diagnose(cluster, job_id, log)
            subprocess.run(["scancel", job_id], env=cluster["env"], timeout=30)
            raise AssertionError(f"job {job_id} still {job['JobState']} after {timeout}s\n{msg}")
        if until is not None and job["JobState"] in TERMINAL:
            raise AssertionError(f"job {job_id} ended ({job['JobState']}) before the awaited point\n"
                                 + _diagnose(cluster, job_id, log))
        time.sleep(0.25)


def _train(out):
    with h5py.File(out / "results.h5", "r") as f:
        return f["runs/t/train/loss"][:], f["runs/t/train/step"][:], f["runs/t/train/grad_norm"][:]


def _check_finished(cluster, job_id, job, log, log_text, out, steps):
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", _diagnose(cluster, job_id, log)
    assert "2 rank(s)" in log_text, log_text  # srun --mpi=pmix gave the MPI world both tasks
    assert f"slurm: {out} finished" in log_text, log_text  # the script saw DONE and did not requeue
    assert (out / "DONE").exists()
    losses, step_col, _ = _train(out)
    assert list(step_col) == list(range(steps))
    assert np.all(np.isfinite(losses))


REF_STEPS = 300


@pytest.fixture(scope="module")
def reference(cluster, corpus, tmp_path_factory):
    """slurm/pretrain.sh with CONFIG=jobs/pretrain/tiny_test.ini, uninterrupted (also the requeue reference)."""
    d = tmp_path_factory.mktemp("slurm_ref")
    out, log = d / "out", d / "job.out"
    job_id = _sbatch(cluster, "pretrain.sh", out, log, _tiny_flags(corpus, REF_STEPS),
                     config="jobs/pretrain/tiny_test.ini")
    job, text = _wait_job(cluster, job_id, log)
    return {"job_id": job_id, "job": job, "log": log, "text": text, "out": out}


def test_pretrain_sh_runs_two_ranks_to_done(cluster, reference):
    r = reference
    _check_finished(cluster, r["job_id"], r["job"], r["log"], r["text"], r["out"], REF_STEPS)
    assert r["job"]["Restarts"] == "0"
    assert "no checkpoint in" in r["text"]  # --resume from an empty out dir starts at step 0


def test_pretrain_1b_sh_at_tiny_size(cluster, corpus, tmp_path):
    """pretrain_1b.sh with its own job file (1b_default.ini: ZeRO-1, weight decay, ...) shrunk by flags."""
    out, log = tmp_path / "out", tmp_path / "job.out"
    job_id = _sbatch(cluster, "pretrain_1b.sh", out, log, _tiny_flags(corpus, 12, "--eval-every=4"))
    job, text = _wait_job(cluster, job_id, log)
    _check_finished(cluster, job_id, job, log, text, out, 12)
    with h5py.File(out / "results.h5", "r") as f:
        config = str(f.attrs["config"])
    # The script's own job file was used, shrunk only where the flags said so.
    for line in ("zero1 = true", "seed = 1234", "weight-decay = 0.1", "keep-checkpoints = 3", "d-model = 32"):
        assert line in config, config


def test_pretrain_1b_sh_writes_where_its_config_says(cluster, corpus, tmp_path):
    """CONFIG=<the 1B sigmoid job> sbatch slurm/pretrain_1b.sh writes into that job file's out-dir, not into
    the default run's (where it would have resumed the softmax run's checkpoint)."""
    job_file = ROOT / "jobs" / "pretrain" / "sec7_scale_1b" / "sigmoid_one.ini"
    out = tmp_path / "sigmoid_out"
    config = tmp_path / "sigmoid_one.ini"
    config.write_text(job_file.read_text().replace("out-dir = results/sec7_scale_1b/sigmoid_one", f"out-dir = {out}"))
    assert f"out-dir = {out}" in config.read_text()
    log = tmp_path / "job.out"
    job_id = _sbatch(cluster, "pretrain_1b.sh", None, log, _tiny_flags(corpus, 4), config=str(config))
    job, text = _wait_job(cluster, job_id, log)
    _check_finished(cluster, job_id, job, log, text, out, 4)
    assert f"slurm: {config} -> {out}" in text, text
    with h5py.File(out / "results.h5", "r") as f:
        assert "attn-sim = sigmoid" in str(f.attrs["config"]) and "attn-norm = one" in str(f.attrs["config"])
    assert "no checkpoint in" in text  # a fresh run in its own directory


@pytest.mark.identity
def test_sigusr1_checkpoints_requeues_and_resumes_bit_exact(cluster, corpus, reference, tmp_path):
    out, log = tmp_path / "out", tmp_path / "job.out"
    job_id = _sbatch(cluster, "pretrain.sh", out, log, _tiny_flags(corpus, REF_STEPS),
                     config="jobs/pretrain/tiny_test.ini")
    # Interrupt once training is visibly under way, well before the end.
    _wait_job(cluster, job_id, log, until=lambda job, text: re.search(r"step [5-9]0/", text) is not None)
    # What `#SBATCH --signal=USR1@120` does before the time limit: USR1 to the job's steps (not the batch shell).
    sig = subprocess.run(["scancel", "--signal=USR1", job_id], env=cluster["env"], capture_output=True, text=True,
                         timeout=30)
    assert sig.returncode == 0, sig.stderr
    job, text = _wait_job(cluster, job_id, log)
    _check_finished(cluster, job_id, job, log, text, out, REF_STEPS)
    assert job["Restarts"] == "1", _diagnose(cluster, job_id, log)
    stopped = re.search(r"stop requested: checkpointed at step (\d+)", text)
    assert stopped and f"not finished, requeueing job {job_id}" in text, text
    assert f"resumed from {out / 'checkpoints'}" in text and f"(step {stopped.group(1)})" in text, text
    assert 50 <= int(stopped.group(1)) < REF_STEPS, text

    ref_loss, _, ref_gn = _train(reference["out"])
    loss, _, gn = _train(out)
    np.testing.assert_array_equal(loss, ref_loss)  # exactly: the same data, weights and optimizer state
    np.testing.assert_array_equal(gn, ref_gn)


def test_survey_sh_two_ranks_sigusr1_requeue_resume(cluster, tmp_path):
    """slurm/survey.sh with jobs/survey/fixtures.ini on 2 ranks over PMIx: SIGUSR1 in mid-survey -> the
    ranks abandon their items, rank 0 commits, exit 0 -> the script requeues (no OUTPUT.done) -> the
    requeued job continues with --resume; the results equal an uninterrupted single-process survey."""
    from conftest import assert_same_contents, survey_contents

    survey = BIN / "sinklab-survey"
    if not survey.exists():
        pytest.skip(f"{survey} not built")
    flags = ["--n-seq=600"]  # items of ~0.1 s, so that the signal lands in mid-survey
    ref = tmp_path / "ref.h5"
    subprocess.run([str(survey), "--config", "jobs/survey/fixtures.ini", "--output", str(ref), *flags], cwd=ROOT,
                   env=dict(cluster["env"], OMP_NUM_THREADS="1"), check=True, capture_output=True, timeout=300)
    out, log = tmp_path / "survey.h5", tmp_path / "job.out"
    env = dict(cluster["env"], CONFIG="jobs/survey/fixtures.ini", OUTPUT=str(out))
    cmd = ["sbatch", "--parsable", *RESOURCES, f"--output={log}", "--open-mode=append", f"--chdir={ROOT}",
           str(ROOT / "slurm" / "survey.sh"), *flags]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"sbatch refused the job:\n{' '.join(cmd)}\n{proc.stderr}"
    job_id = proc.stdout.strip().split(";")[0]
    _wait_job(cluster, job_id, log, until=lambda job, text: re.search(r"items (\d+)/36", text) is not None)
    sig = subprocess.run(["scancel", "--signal=USR1", job_id], env=cluster["env"], capture_output=True, text=True,
                         timeout=30)
    assert sig.returncode == 0, sig.stderr
    job, text = _wait_job(cluster, job_id, log)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", _diagnose(cluster, job_id, log)
    assert job["Restarts"] == "1", _diagnose(cluster, job_id, log)
    assert "survey: 13 models, 36 items (0 done before), 2 ranks" in text, text
    assert "survey stopped" in text and f"not finished, requeueing job {job_id}" in text, text
    resumed = re.search(r"36 items \((\d+) done before\), 2 ranks", text.split("requeueing")[1])
    assert resumed and 0 < int(resumed.group(1)) < 36, text
    assert f"slurm: {out} finished" in text and "survey done: 36 items, 0 failed" in text, text
    assert_same_contents(survey_contents(out), survey_contents(ref))


def test_sft_sh_fine_tunes_two_ranks_to_done(cluster, corpus, reference, tmp_path):
    """slurm/sft.sh with a tiny job file (jobs/sft/tiny_cpu_softmax.ini) fine-tunes the reference run's
    checkpoint on synthetic chat rows with 2 ranks, to DONE, through the requeue/resume code of pretrain.sh."""
    from test_sft import write_sft_rows
    write_sft_rows(tmp_path / "chat.h5", 200, 3, 16)
    out, log = tmp_path / "out", tmp_path / "job.out"
    flags = [f"--init-from={reference['out']}", f"--sft-data={tmp_path / 'chat.h5'}",
             f"--valid-data={corpus / 'valid.bin'}", "--steps=10", "--global-batch-tokens=128", "--micro-batch-rows=2",
             "--eval-rows=8", "--probe-sequences=8", "--probe-length=12", "--run-name=t"]
    job_id = _sbatch(cluster, "sft.sh", out, log, flags, config="jobs/sft/tiny_cpu_softmax.ini")
    job, text = _wait_job(cluster, job_id, log)
    _check_finished(cluster, job_id, job, log, text, out, 10)
    assert "fine-tuning" in text and "sinklab-sft:" in text, text
    with h5py.File(out / "results.h5", "r") as f:
        assert f["runs/t/monitor/update_ratio"].shape == (10, 2)
        assert list(f["runs/t/eval/step"][:]) == [0, 10]  # before and after
