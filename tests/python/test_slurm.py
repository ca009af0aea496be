"""The real sbatch scripts (slurm/pretrain.sh, slurm/pretrain_1b.sh) on a private single-node Slurm
cluster started on this machine (tests/integration/slurm_cluster.sh): 2 ranks through srun --mpi=pmix,
results.h5 and DONE, and the preemption path: SIGUSR1 to the job's steps (what `#SBATCH --signal=USR1@120`
does before the time limit) -> the trainer checkpoints and exits 0 -> the script requeues the job -> the
requeued job resumes, and its loss sequence equals an uninterrupted run's bit for bit. slurm/pretrain_sweep.sh
over a folder of three tiny job files as one job array (each task its own file, device, out-dir and
requeue), its refusals, and the resources a job file leads to (sbatch and srun lines, SINKLAB_DRY_RUN=1:
a GPU job file's layout is checked as far as a cluster without GPUs allows).

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
# The job's resources on the sbatch line override the scripts' #SBATCH lines (1 task of 8 CPUs, no GPUs).
RESOURCES = ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1"]


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


def _interrupted_job_finishes(cluster, job_id, log, out, signal_name):
    """Sends `signal_name` to the job's steps once training is visibly under way, well before the end; the
    job must requeue once and finish REF_STEPS. Returns the log text."""
    _wait_job(cluster, job_id, log, until=lambda job, text: re.search(r"step [5-9]0/", text) is not None)
    sig = subprocess.run(["scancel", f"--signal={signal_name}", job_id], env=cluster["env"], capture_output=True,
                         text=True, timeout=30)
    assert sig.returncode == 0, sig.stderr
    job, text = _wait_job(cluster, job_id, log)
    _check_finished(cluster, job_id, job, log, text, out, REF_STEPS)
    assert job["Restarts"] == "1", _diagnose(cluster, job_id, log)
    return text


@pytest.mark.identity
def test_sigusr1_checkpoints_requeues_and_resumes_bit_exact(cluster, corpus, reference, tmp_path):
    out, log = tmp_path / "out", tmp_path / "job.out"
    job_id = _sbatch(cluster, "pretrain.sh", out, log, _tiny_flags(corpus, REF_STEPS),
                     config="jobs/pretrain/tiny_test.ini")
    # What `#SBATCH --signal=USR1@120` does before the time limit: USR1 to the job's steps (not the batch shell).
    text = _interrupted_job_finishes(cluster, job_id, log, out, "USR1")
    stopped = re.search(r"stop requested: checkpointed at step (\d+)", text)
    assert stopped and f"not finished, requeueing job {job_id}" in text, text
    assert f"resumed from {out / 'checkpoints'}" in text and f"(step {stopped.group(1)})" in text, text
    assert 50 <= int(stopped.group(1)) < REF_STEPS, text

    ref_loss, _, ref_gn = _train(reference["out"])
    loss, _, gn = _train(out)
    np.testing.assert_array_equal(loss, ref_loss)  # exactly: the same data, weights and optimizer state
    np.testing.assert_array_equal(gn, ref_gn)


def test_extended_run_stopped_by_sigterm_is_requeued(cluster, corpus, tmp_path):
    """Issue 44: a finished 4-step run extended to REF_STEPS (the same job file and --out-dir; pretrain.sh
    resumes) and stopped by SIGTERM is requeued and finishes: the trainer removed the old DONE when it
    resumed, and DONE counts the steps ("steps <reached> of <target>"). An old DONE left in place made the
    script print "finished" and the job end at the step it was stopped at."""
    out = tmp_path / "out"
    short_log, log = tmp_path / "short.out", tmp_path / "job.out"
    job_id = _sbatch(cluster, "pretrain.sh", out, short_log, _tiny_flags(corpus, 4), config="jobs/pretrain/tiny_test.ini")
    job, text = _wait_job(cluster, job_id, short_log)
    _check_finished(cluster, job_id, job, short_log, text, out, 4)
    assert (out / "DONE").read_text() == "steps 4 of 4\n"

    job_id = _sbatch(cluster, "pretrain.sh", out, log, _tiny_flags(corpus, REF_STEPS), config="jobs/pretrain/tiny_test.ini")
    text = _interrupted_job_finishes(cluster, job_id, log, out, "TERM")
    assert "(step 4)" in text and "stop requested" in text and f"not finished, requeueing job {job_id}" in text, text
    assert (out / "DONE").read_text() == f"steps {REF_STEPS} of {REF_STEPS}\n"


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
    _wait_job(cluster, job_id, log, until=lambda job, text: re.search(r"items (\d+)/\d+", text) is not None)
    sig = subprocess.run(["scancel", "--signal=USR1", job_id], env=cluster["env"], capture_output=True, text=True,
                         timeout=30)
    assert sig.returncode == 0, sig.stderr
    job, text = _wait_job(cluster, job_id, log)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", _diagnose(cluster, job_id, log)
    assert job["Restarts"] == "1", _diagnose(cluster, job_id, log)
    # The fixtures' count (every family's fixtures in jobs/survey/fixtures.ini) is read from the first start.
    started = re.search(r"survey: (\d+) models, (\d+) items \(0 done before\), 2 ranks", text)
    assert started, text
    n_items = int(started.group(2))
    assert "survey stopped" in text and f"not finished, requeueing job {job_id}" in text, text
    resumed = re.search(rf"{n_items} items \((\d+) done before\), 2 ranks", text.split("requeueing")[1])
    assert resumed and 0 < int(resumed.group(1)) < n_items, text
    assert f"slurm: {out} finished" in text and f"survey done: {n_items} items, 0 failed" in text, text
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


# ---------------------------------------------------------------------------------------------------
# Resources from the job file (SINKLAB_DRY_RUN=1: the sbatch and srun lines, nothing submitted or run)

def _script(cluster, script, args=(), config=None, extra_env=None, dry=True):
    """bash slurm/<script> ARGS outside a job (submits) or, with SLURM_* in extra_env, as the batch job."""
    env = {k: v for k, v in cluster["env"].items() if k not in ("DEVICE", "CONFIG", "OUT_DIR")}
    if dry:
        env["SINKLAB_DRY_RUN"] = "1"
    if config:
        env["CONFIG"] = str(config)
    env.update(extra_env or {})
    return subprocess.run(["bash", str(ROOT / "slurm" / script), *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def _line(text, prefix):
    lines = [ln for ln in text.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, text
    return lines[0].split()


def _value(words, name):
    """The last value of --name=v among a command line's words (what sbatch and srun use)."""
    values = [w.split("=", 1)[1] for w in words if w.startswith(f"--{name}=")]
    return values[-1] if values else None


def _gpu_job_file(tmp_path, sbatch_line, name="gpu.ini"):
    """tiny_test.ini as a GPU job: device = cuda and the given #SBATCH line, its own out-dir."""
    f = tmp_path / name
    f.write_text((ROOT / "jobs/pretrain/tiny_test.ini").read_text().replace(
        "out-dir = results/tiny_test", f"device = cuda\n{sbatch_line}\nout-dir = {tmp_path / 'gpu_out'}"))
    return f


def test_resources_submit_side_dry_run(cluster, tmp_path):
    """What sbatch is asked for: a CPU job file no GPUs; a GPU job file one rank per GPU on the nodes its
    #SBATCH line says; sbatch options on the command line win; a global batch the ranks do not divide
    and a CPU file that asks for GPUs are refused before anything is submitted."""
    sub = _script(cluster, "pretrain.sh", ["--cpus-per-task=1"], config="jobs/pretrain/tiny_test.ini")
    assert sub.returncode == 0, sub.stderr
    words = _line(sub.stdout, "slurm: dry run:")
    assert not [w for w in words if "gpu" in w.lower() or "gres" in w.lower()], words
    assert "CONFIG=jobs/pretrain/tiny_test.ini" in words and words[-1].endswith("slurm/pretrain.sh")
    assert "slurm: jobs/pretrain/tiny_test.ini: device cpu, 1 rank(s), out-dir results/tiny_test" in sub.stdout

    # The 60M default: one GPU, not eight.
    sub = _script(cluster, "pretrain.sh")
    assert sub.returncode == 0, sub.stderr
    words = _line(sub.stdout, "slurm: dry run:")
    assert (_value(words, "nodes"), _value(words, "gpus-per-node"), _value(words, "ntasks-per-node")) == ("1", "1", "1")
    assert _value(words, "output") == "results/60m_default/slurm-%j.out"  # the log beside the results

    # The 1B default: 4 nodes x 8 GPUs = 32 ranks; the command line's --gpus-per-node=2 takes the ranks with it.
    sub = _script(cluster, "pretrain_1b.sh", ["--partition=debug", "--", "--steps=10"])
    assert sub.returncode == 0, sub.stderr
    words = _line(sub.stdout, "slurm: dry run:")
    assert (_value(words, "nodes"), _value(words, "gpus-per-node"), _value(words, "ntasks-per-node")) == ("4", "8", "8")
    assert "32 rank(s)" in sub.stdout and words[-2:] == [str(ROOT / "slurm/pretrain_1b.sh"), "--steps=10"], words
    sub = _script(cluster, "pretrain_1b.sh", ["--gpus-per-node=2"])
    words = _line(sub.stdout, "slurm: dry run:")
    assert (_value(words, "gpus-per-node"), _value(words, "ntasks-per-node")) == ("2", "2") and "8 rank(s)" in sub.stdout

    # Refused: 3 GPUs do not divide 60m's 64 micro-batches; a CPU job file that asks for GPUs; a bad file.
    sub = _script(cluster, "pretrain.sh", ["--gpus-per-node=3"])
    assert sub.returncode == 2 and "slurm: jobs/pretrain/60m_default.ini: global-batch-tokens 1048576 is not a " \
        "multiple of context x micro-batch-rows x ranks = 2048 x 8 x 3" in sub.stderr, sub.stderr
    cpu_gpus = tmp_path / "cpu_gpus.ini"
    cpu_gpus.write_text((ROOT / "jobs/pretrain/tiny_test.ini").read_text() + "#SBATCH --gpus-per-node=2\n")
    sub = _script(cluster, "pretrain.sh", config=cpu_gpus)
    assert sub.returncode == 2 and f"slurm: {cpu_gpus}: device cpu but its #SBATCH lines ask for GPUs" in sub.stderr
    bad = tmp_path / "bad.ini"
    bad.write_text((ROOT / "jobs/pretrain/tiny_test.ini").read_text() + "no-such-option = 1\n")
    sub = _script(cluster, "pretrain.sh", config=bad)
    assert sub.returncode == 2 and sub.stderr.startswith(f"slurm: {bad}: not a valid job file:"), sub.stderr
    assert len(sub.stderr.strip().splitlines()) == 1 and "no-such-option" in sub.stderr, sub.stderr


def test_resources_batch_side_dry_run(cluster, tmp_path):
    """The srun line inside the job, from its allocation (SLURM_* as Slurm sets them on a 2-node x 4-GPU job):
    one rank per GPU with --gpus-per-task=1 and core binding, NCCL's environment; a CPU job file on the same
    allocation gets no GPU options; a GPU job without GPUs or with fewer tasks than GPUs is refused."""
    gpu = _gpu_job_file(tmp_path, "#SBATCH --nodes=2 --gpus-per-node=4")
    alloc = {"SLURM_JOB_ID": "12345", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "4",
             "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_PER_TASK": "8"}
    run = _script(cluster, "pretrain.sh", ["--steps=5"], config=gpu, extra_env=alloc)
    assert run.returncode == 0, run.stderr
    words = _line(run.stdout, "slurm: launch:")
    assert words[2:5] == ["srun", "--mpi=pmix", "--kill-on-bad-exit=1"], words
    assert (_value(words, "nodes"), _value(words, "ntasks-per-node"), _value(words, "gpus-per-task"),
            _value(words, "gpu-bind"), _value(words, "cpu-bind")) == ("2", "4", "1", "none", "cores"), words
    assert words[words.index("--device") + 1] == "cuda"
    assert words[words.index("--out-dir") + 1] == str(tmp_path / "gpu_out") and words[-1] == "--steps=5"
    assert "slurm: 2 node(s) x 4 GPU(s), one rank per GPU; NCCL_DEBUG=WARN CUDA_DEVICE_ORDER=PCI_BUS_ID" in run.stdout
    run = _script(cluster, "pretrain.sh", config=gpu, extra_env=dict(alloc, NCCL_DEBUG="INFO"))
    assert "NCCL_DEBUG=INFO" in run.stdout  # the user's setting stays

    cpu = _script(cluster, "pretrain.sh", config="jobs/pretrain/tiny_test.ini",
                  extra_env=dict(alloc, SLURM_GPUS_ON_NODE="0"))
    words = _line(cpu.stdout, "slurm: launch:")
    assert not [w for w in words if "gpu" in w.lower()] and _value(words, "cpu-bind") == "cores", words
    assert words[words.index("--device") + 1] == "cpu" and "NCCL" not in cpu.stdout

    no_gpus = _script(cluster, "pretrain.sh", config=gpu, extra_env=dict(alloc, SLURM_GPUS_ON_NODE="0"))
    assert no_gpus.returncode == 2 and "device cuda, but this job has no GPUs" in no_gpus.stderr
    one_task = _script(cluster, "pretrain.sh", config=gpu, extra_env=dict(alloc, SLURM_NTASKS_PER_NODE="1"))
    assert one_task.returncode == 2 and "the job has 4 GPU(s) but 1 task(s) per node; one rank per GPU needs " \
        "sbatch --ntasks-per-node=4" in one_task.stderr, one_task.stderr


def test_survey_sh_layout_dry_run(cluster):
    """slurm/survey.sh inside its job: on the CPUs the ranks as allocated with --device cpu; with device cuda
    (DEVICE or --device) one rank per GPU, --gpus-per-task=1, --device cuda; a GPU survey without GPUs refused."""
    alloc = {"SLURM_JOB_ID": "777", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS_PER_NODE": "4",
             "SLURM_GPUS_ON_NODE": "0", "SLURM_CPUS_PER_TASK": "16"}
    cpu = _script(cluster, "survey.sh", ["--n-seq=5"], config="jobs/survey/fixtures.ini", extra_env=alloc)
    assert cpu.returncode == 0, cpu.stderr
    words = _line(cpu.stdout, "slurm: launch:")
    assert not [w for w in words if "gpu" in w.lower()] and _value(words, "cpu-bind") == "cores", words
    assert words[words.index("--device") + 1] == "cpu" and words[-1] == "--n-seq=5", words
    gpus = dict(alloc, SLURM_GPUS_ON_NODE="4", DEVICE="cuda")
    gpu = _script(cluster, "survey.sh", config="jobs/survey/fixtures.ini", extra_env=gpus)
    assert gpu.returncode == 0, gpu.stderr
    words = _line(gpu.stdout, "slurm: launch:")
    assert (_value(words, "nodes"), _value(words, "ntasks-per-node"), _value(words, "gpus-per-task")) == ("2", "4", "1")
    assert words[words.index("--device") + 1] == "cuda" and any(w.endswith("/sinklab-survey") for w in words), words
    flag = _script(cluster, "survey.sh", ["--device=cuda"], config="jobs/survey/fixtures.ini",
                   extra_env=dict(alloc, SLURM_GPUS_ON_NODE="4"))
    words = _line(flag.stdout, "slurm: launch:")
    assert _value(words, "gpus-per-task") == "1" and "--device" not in words and words[-1] == "--device=cuda", words
    none = _script(cluster, "survey.sh", ["--device=cuda"], config="jobs/survey/fixtures.ini", extra_env=alloc)
    assert none.returncode == 2 and "device cuda, but this job has no GPUs" in none.stderr, none.stderr


def test_survey_sh_submits_with_the_job_files_resources(cluster, tmp_path):
    """bash slurm/survey.sh on a login node submits itself: a CPU job file with the script's layout and no
    GPUs, the log beside the output; a GPU job file (device = cuda, #SBATCH --nodes=2 --gpus-per-node=4)
    one rank per GPU, planned on a machine without GPUs; a bad job file refused before sbatch."""
    cpu = _script(cluster, "survey.sh", ["--time=1:00:00", "--", "--n-seq=5"], config="jobs/survey/fixtures.ini")
    assert cpu.returncode == 0, cpu.stderr
    words = _line(cpu.stdout, "slurm: dry run:")
    assert not [w for w in words if "gpu" in w.lower()], words
    assert _value(words, "output") == "results/survey/slurm-%j.out" and _value(words, "time") == "1:00:00", words
    assert words[-2:] == [str(ROOT / "slurm/survey.sh"), "--n-seq=5"], words
    assert "device cpu, 8 rank(s)" in cpu.stdout, cpu.stdout  # the script's 2 nodes x 4 tasks
    gpu_file = tmp_path / "gpu_survey.ini"
    gpu_file.write_text((ROOT / "jobs/survey/fixtures.ini").read_text() + "device = cuda\n#SBATCH --nodes=2 --gpus-per-node=4\n")
    gpu = _script(cluster, "survey.sh", config=gpu_file)
    assert gpu.returncode == 0, gpu.stderr
    words = _line(gpu.stdout, "slurm: dry run:")
    assert (_value(words, "nodes"), _value(words, "gpus-per-node"), _value(words, "ntasks-per-node")) == ("2", "4", "4")
    assert "device cuda, 8 rank(s)" in gpu.stdout, gpu.stdout
    bad = tmp_path / "bad.ini"
    bad.write_text("no-such-option = 1\n")
    sub = _script(cluster, "survey.sh", config=bad)
    assert sub.returncode == 2 and sub.stderr.startswith(f"slurm: {bad}: not a valid job file:"), sub.stderr


def test_cpu_cluster_accepts_the_cpu_request_and_rejects_a_gpu_one(cluster, tmp_path):
    """sbatch --test-only of what the scripts ask for: the CPU job file's request is valid on the private
    CPU cluster (no GPU request at all), the GPU job file's is not (the cluster has no GPUs)."""
    cpu_file = tmp_path / "cpu.ini"
    cpu_file.write_text((ROOT / "jobs/pretrain/tiny_test.ini").read_text().replace(
        "out-dir = results/tiny_test", f"out-dir = {tmp_path / 'cpu_out'}"))
    cpu = _script(cluster, "pretrain.sh", ["--test-only", "--ntasks-per-node=2", "--cpus-per-task=1"],
                  config=cpu_file, dry=False)
    assert cpu.returncode == 0 and "to start at" in cpu.stderr, cpu.stderr
    gpu = _script(cluster, "pretrain.sh", ["--test-only", "--cpus-per-task=1"],
                  config=_gpu_job_file(tmp_path, "#SBATCH --gpus-per-node=1"), dry=False)
    assert gpu.returncode != 0 and "gres" in gpu.stderr.lower(), gpu.stderr


# ---------------------------------------------------------------------------------------------------
# slurm/pretrain_sweep.sh: a folder of job files as one job array

SWEEP_STEPS = 200
SWEEP_CELLS = {  # file -> its own settings on top of tiny_test.ini
    "a_softmax.ini": "device = cpu\n",
    "b_sigmoid_one.ini": "attn-sim = sigmoid\nattn-norm = one\n",
    "c_elu_sum.ini": "attn-sim = elu-plus-one\nattn-norm = sum\n",
}


def _sweep_dir(tmp_path, corpus, cells=SWEEP_CELLS, sbatch="#SBATCH --ntasks-per-node=2 --cpus-per-task=1"):
    """Tiny job files made from tiny_test.ini: the synthetic corpus, each its own out-dir and run name."""
    d = tmp_path / "sweep"
    d.mkdir()
    base = (ROOT / "jobs/pretrain/tiny_test.ini").read_text()
    for name, settings in cells.items():
        stem = name[:-4]
        text = (base.replace("out-dir = results/tiny_test", f"out-dir = {tmp_path / 'out' / stem}")
                .replace("run-name = tiny_test", f"run-name = {stem}")
                .replace("steps = 12", f"steps = {SWEEP_STEPS}")
                .replace("data/mini/train.bin", str(corpus / "train.bin"))
                .replace("data/mini/valid.bin", str(corpus / "valid.bin"))
                .replace("vocab-size = 4096", f"vocab-size = {VOCAB}")
                .replace("checkpoint-every = 4", "checkpoint-every = 10000")
                .replace("eval-every = 4", "eval-every = 100")
                .replace("log-every = 1", "log-every = 10"))
        (d / name).write_text(f"# sweep cell {stem}\n{settings}{sbatch}\n{text}")
    return d


def _array_tasks(cluster, array_id):
    """{task index: scontrol's record} of an array job's tasks (once Slurm split them)."""
    proc = subprocess.run(["scontrol", "-o", "show", "job", array_id], env=cluster["env"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    tasks = {}
    for line in proc.stdout.splitlines():
        rec = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if rec.get("ArrayTaskId", "").isdigit():
            tasks[int(rec["ArrayTaskId"])] = rec
    return tasks


def _wait_array(cluster, array_id, n, log_of, timeout, until=None):
    t0 = time.time()
    while True:
        tasks = _array_tasks(cluster, array_id)
        if until is not None and until(tasks):
            return tasks
        if until is None and len(tasks) == n and all(t["JobState"] in TERMINAL for t in tasks.values()):
            return tasks
        if time.time() - t0 > timeout:
            msg = "\n".join(_diagnose(cluster, t["JobId"], log_of(i)) for i, t in sorted(tasks.items()))
            subprocess.run(["scancel", array_id], env=cluster["env"], timeout=30)
            raise AssertionError(f"array {array_id} not done after {timeout}s: {tasks}\n{msg}")
        time.sleep(0.25)


def _squeue(cluster):
    return subprocess.run(["squeue", "-h", "-o", "%i"], env=cluster["env"], capture_output=True, text=True,
                          timeout=30).stdout


def test_sweep_runs_each_job_file_as_an_array_task(cluster, corpus, tmp_path):
    """Three tiny job files (softmax, sigmoid without normalisation, elu+1 with sum) as one job array: each
    task runs its own file (its device, out-dir, run name and attention) with 2 ranks to DONE; SIGUSR1 to
    one task checkpoints it, requeues that task alone, and it resumes to the end."""
    d = _sweep_dir(tmp_path, corpus)
    env = {k: v for k, v in cluster["env"].items() if k != "DEVICE"}  # the files say where they run
    logs = tmp_path / "logs"
    logs.mkdir()
    sub = subprocess.run(["bash", str(ROOT / "slurm/pretrain_sweep.sh"), str(d), f"--output={logs}/%A_%a.out"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    m = re.search(r"^slurm: sweep \S+: array job (\d+), 3 task\(s\) \(device cpu, 2 rank\(s\) each\)$", sub.stdout, re.M)
    assert m, sub.stdout
    array_id = m.group(1)
    names = sorted(SWEEP_CELLS)
    for i, name in enumerate(names):  # the mapping task -> file, sorted by name
        assert f"slurm: task {i}: {d / name} -> {tmp_path / 'out' / name[:-4]}" in sub.stdout, sub.stdout
    log_of = lambda i: logs / f"{array_id}_{i}.out"  # noqa: E731

    # Interrupt task 1 once it is under way; the others go on.
    def task1_training(tasks):
        return 1 in tasks and log_of(1).exists() and re.search(r"step [3-9]0/", log_of(1).read_text()) is not None
    _wait_array(cluster, array_id, 3, log_of, JOB_TIMEOUT, until=task1_training)
    sig = subprocess.run(["scancel", "--signal=USR1", f"{array_id}_1"], env=cluster["env"], capture_output=True,
                         text=True, timeout=30)
    assert sig.returncode == 0, sig.stderr
    tasks = _wait_array(cluster, array_id, 3, log_of, 3 * JOB_TIMEOUT)

    for i, name in enumerate(names):
        stem, t = name[:-4], tasks[i]
        out, text = tmp_path / "out" / stem, log_of(i).read_text()
        assert t["JobState"] == "COMPLETED" and t["ExitCode"] == "0:0", _diagnose(cluster, t["JobId"], log_of(i))
        assert t["Restarts"] == ("1" if i == 1 else "0"), _diagnose(cluster, t["JobId"], log_of(i))
        assert f"slurm: sweep array job {array_id} task {i} (job {t['JobId']}): {d / name}" in text, text
        launches = [ln for ln in text.splitlines() if ln.startswith("slurm: launch: srun")]
        assert len(launches) == (2 if i == 1 else 1), text  # task 1 ran again after its requeue
        assert all("gpu" not in ln.lower() and " --device cpu " in ln for ln in launches), launches
        assert "2 rank(s)" in text and f"slurm: {out} finished" in text, text
        assert (out / "DONE").exists()
        with h5py.File(out / "results.h5", "r") as f:
            assert list(f[f"runs/{stem}/train/step"][:]) == list(range(SWEEP_STEPS))
            assert np.all(np.isfinite(f[f"runs/{stem}/train/loss"][:]))
            config = str(f.attrs["config"])
        assert f"out-dir = {out}" in config and f"run-name = {stem}" in config and "device = cpu" in config, config
        for line in SWEEP_CELLS[name].strip().splitlines():
            assert line in config, (name, config)
        if i == 0:
            assert "attn-sim = exp" in config and "attn-norm = sum" in config, config
    text = log_of(1).read_text()
    stopped = re.search(r"stop requested: checkpointed at step (\d+)", text)
    assert stopped and f"not finished, requeueing job {tasks[1]['JobId']}" in text, text
    assert f"(step {stopped.group(1)})" in text and 30 <= int(stopped.group(1)) < SWEEP_STEPS, text


def test_sweep_refuses_before_submitting(cluster, corpus, tmp_path):
    """A missing or empty folder, a file the binary refuses, files of different resources, two files with
    one out-dir: one line naming the problem, exit 2, no job submitted."""
    before = _squeue(cluster)
    env = {k: v for k, v in cluster["env"].items() if k != "DEVICE"}

    def sweep(path, *args):
        proc = subprocess.run(["bash", str(ROOT / "slurm/pretrain_sweep.sh"), str(path), *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (proc.stdout, proc.stderr)
        assert "array job" not in proc.stdout, proc.stdout
        return proc.stderr.strip()

    assert sweep(tmp_path / "nope") == f"slurm: pretrain_sweep.sh: {tmp_path / 'nope'}: no such directory"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a job file\n")
    assert sweep(tmp_path / "empty") == f"slurm: pretrain_sweep.sh: {tmp_path / 'empty'} has no job files (*.ini)"

    d = _sweep_dir(tmp_path, corpus)
    (d / "b_sigmoid_one.ini").write_text((d / "b_sigmoid_one.ini").read_text() + "attn-sim = nonsense\n")
    err = sweep(d)
    assert err.startswith(f"slurm: {d / 'b_sigmoid_one.ini'}: not a valid job file:") and "attn-sim" in err, err

    (d / "b_sigmoid_one.ini").unlink()
    (d / "c_elu_sum.ini").write_text((d / "c_elu_sum.ini").read_text().replace("--ntasks-per-node=2", "--ntasks-per-node=1"))
    err = sweep(d)
    assert "ask for different resources; one array has one shape" in err and str(d / "c_elu_sum.ini") in err, err

    (d / "c_elu_sum.ini").write_text((d / "a_softmax.ini").read_text())
    assert "write to one out-dir" in sweep(d)
    assert _squeue(cluster) == before


def test_sweep_accepts_every_table_folder_of_jobs_pretrain(cluster):
    """Each folder of jobs/pretrain submits as one array (dry run): every file valid, one resource shape per
    folder (one GPU per task for the 60M cells, 4 nodes x 8 GPUs for the 1B ones), out-dirs distinct."""
    folders = sorted(p for p in (ROOT / "jobs/pretrain").iterdir() if p.is_dir() and list(p.glob("*.ini")))
    assert len(folders) >= 20
    env = {k: v for k, v in cluster["env"].items() if k != "DEVICE"}
    for folder in folders:
        proc = subprocess.run(["bash", str(ROOT / "slurm/pretrain_sweep.sh"), str(folder)], cwd=ROOT,
                              env=dict(env, SINKLAB_DRY_RUN="1"), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (folder.name, proc.stderr)
        n = len(list(folder.glob("*.ini")))
        ranks = 32 if folder.name == "sec7_scale_1b" else 1
        # The Bigram-Backcopy study is the CPU-scale one: its files name no device, so its tasks ask for no GPU.
        device = "cpu" if folder.name == "bbm" else "cuda"
        assert f"array job (dry run), {n} task(s) (device {device}, {ranks} rank(s) each)" in proc.stdout, proc.stdout
        words = _line(proc.stdout, "slurm: dry run:")
        assert _value(words, "array") == f"0-{n - 1}", words
        if device == "cuda":
            assert _value(words, "gpus-per-node") == ("8" if ranks == 32 else "1"), words
        else:
            assert not any(w.startswith("--gpus") for w in words), words
    # --parallel=K throttles the array (%K); sbatch options and trainer flags pass through in order.
    folder = ROOT / "jobs/pretrain/table15_attn_ops"
    proc = subprocess.run(["bash", str(ROOT / "slurm/pretrain_sweep.sh"), str(folder), "--parallel=3", "--time=1:00:00",
                           "--", "--steps=5"], cwd=ROOT, env=dict(env, SINKLAB_DRY_RUN="1"), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    words = _line(proc.stdout, "slurm: dry run:")
    assert _value(words, "array") == "0-9%3" and _value(words, "time") == "1:00:00" and words[-1] == "--steps=5", words
    assert words[-2] == str(ROOT / "slurm/pretrain_sweep.sh") and "at most 3 at a time" in proc.stdout, words
    proc = subprocess.run(["bash", str(ROOT / "slurm/pretrain_sweep.sh"), str(folder), "--parallel=0"], cwd=ROOT,
                          env=dict(env, SINKLAB_DRY_RUN="1"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--parallel=0: not a positive number" in proc.stderr, proc.stderr
