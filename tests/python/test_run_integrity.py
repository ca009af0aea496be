"""Fault injection on a training run's --out-dir (issue 44): one directory holds one run. A fresh run into
a used directory, two jobs on one directory, a resume with another lr or into another run's results.h5,
a resume without results.h5 (or without the rows up to its checkpoint), a stale DONE after an extended
run stopped by SIGTERM (and the Slurm requeue helper that reads DONE), the leftovers of kill -9, and the
one-line messages of item 5. Each scenario is the one the issue describes, on jobs/pretrain/tiny_test.ini
shrunk to the synthetic corpus (a run of a few steps takes about a second).

The binaries come from $SINKLAB_BIN_DIR, as in test_pretrain.py; the tests skip only when they are absent.
"""
import os
import signal
import subprocess
import time
from pathlib import Path

import h5py
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
PRETRAIN, SFT = BIN / "sinklab-pretrain", BIN / "sinklab-sft"
pytestmark = pytest.mark.skipif(not PRETRAIN.exists(), reason=f"{PRETRAIN} not built")

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
TINY = "jobs/pretrain/tiny_test.ini"


def _cmd(corpus, out, *extra, binary=PRETRAIN):
    """tiny_test.ini on the synthetic corpus (vocabulary 64), flags in `extra` last (they win)."""
    return [str(binary), "--config", TINY, "--vocab-size=64", "--context=16", f"--train-data={corpus / 'train.bin'}",
            f"--valid-data={corpus / 'valid.bin'}", "--global-batch-tokens=128", "--micro-batch-rows=2",
            "--eval-rows=8", "--probe-sequences=8", "--probe-length=12", "--run-name=t", f"--out-dir={out}", *extra]


def _run(cmd, np_=1):
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), *cmd]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)


def _train(corpus, out, *extra):
    proc = _run(_cmd(corpus, out, *extra))
    assert proc.returncode == 0, f"{extra} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _refused(proc, *naming):
    """A non-zero exit with one line on stderr that holds every string of `naming`; returns the line."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0, proc.stdout
    assert len(lines) == 1 and all(n in lines[0] for n in naming), (naming, proc.stderr)
    return lines[0]


def _rows(out):
    with h5py.File(out / "results.h5", "r") as f:
        return list(f["runs/t/train/step"][:])


def _checkpoints(out):
    return sorted(p.name for p in (out / "checkpoints").iterdir())


# ---- 1. one run per --out-dir -------------------------------------------------------------------------

def test_fresh_run_into_a_used_out_dir_is_refused_unless_overwrite(corpus, tmp_path):
    out = tmp_path / "d"
    _train(corpus, out, "--steps=6", "--checkpoint-every=3", "--seed=7")
    before = (out / "results.h5").read_bytes()
    proc = _run(_cmd(corpus, out, "--steps=2", "--seed=8"))
    _refused(proc, f"--out-dir {out}", "--resume", "--overwrite")
    assert (out / "results.h5").read_bytes() == before and _checkpoints(out) == ["step_00000003", "step_00000006"]
    # --overwrite deletes the old run's results.h5, checkpoints and DONE (and says so), nothing else.
    (out / "notes.txt").write_text("mine")
    proc = _train(corpus, out, "--steps=2", "--seed=8", "--overwrite")
    assert f"removed {out / 'checkpoints'}" in proc.stdout and f"removed {out / 'results.h5'}" in proc.stdout
    assert _rows(out) == [0, 1] and _checkpoints(out) == ["step_00000002"] and (out / "notes.txt").exists()


def test_two_jobs_on_one_out_dir(corpus, tmp_path):
    out = tmp_path / "d"
    first = subprocess.Popen(_cmd(corpus, out, "--steps=100000", "--checkpoint-every=100000", "--eval-every=0"),
                             cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in first.stdout:  # the first job is training: it holds the directory
            if line.startswith("step 2/"):
                break
        second = _run(_cmd(corpus, out, "--steps=2", "--seed=8"))
        _refused(second, f"--out-dir {out}", "in use by another job", f"pid {first.pid}")
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 0
    with h5py.File(out / "results.h5", "r") as f:  # the first job's run alone
        assert "seed = 7" in f["runs/t"].attrs["fingerprint"] and "--seed=8" not in f.attrs["command_line"]


def test_resume_with_another_lr_is_refused(corpus, tmp_path):
    out = tmp_path / "d"
    _train(corpus, out, "--steps=4", "--checkpoint-every=2")
    proc = _run(_cmd(corpus, out, "--steps=6", "--resume", "--lr=1e-3"))
    _refused(proc, "--lr:", "lr = '0.003'", "has '0.001'")
    proc = _run(_cmd(corpus, out, "--steps=6", "--resume", "--lr-schedule=cosine"))
    _refused(proc, "--lr-schedule:", "= 'constant'", "has 'cosine'")
    assert _rows(out) == [0, 1, 2, 3]
    _train(corpus, out, "--steps=6", "--resume")
    assert _rows(out) == list(range(6))


def test_resume_into_another_runs_results_is_refused(corpus, tmp_path):
    # results.h5 of a run with seed 8 beside the checkpoints of a run with seed 7 (what a fresh run into a
    # used directory left before): the resume names the setting in which they differ.
    a, b = tmp_path / "a", tmp_path / "b"
    _train(corpus, a, "--steps=4", "--seed=7")
    _train(corpus, b, "--steps=4", "--seed=8")
    (a / "results.h5").write_bytes((b / "results.h5").read_bytes())
    proc = _run(_cmd(corpus, a, "--steps=6", "--resume", "--seed=7"))
    _refused(proc, "--seed:", str(a / "results.h5"), "seed = '8'", "has '7'")


def test_resume_without_the_results_of_its_steps_is_refused(corpus, tmp_path):
    out = tmp_path / "d"
    _train(corpus, out, "--steps=2")
    two_rows = (out / "results.h5").read_bytes()
    _train(corpus, out, "--steps=4", "--resume")
    # results.h5 gone: refused, saying how to go on.
    (out / "results.h5").rename(tmp_path / "moved.h5")
    proc = _run(_cmd(corpus, out, "--steps=6", "--resume"))
    _refused(proc, "--resume:", f"{out / 'results.h5'} is missing", "--init-weights=")
    assert not (out / "results.h5").exists()
    # results.h5 that ends before the checkpoint (step 4): rows 2 and 3 would be missing.
    (out / "results.h5").write_bytes(two_rows)
    proc = _run(_cmd(corpus, out, "--steps=6", "--resume"))
    _refused(proc, "--resume:", "2 row(s)", "step_00000004", "from step 4")
    assert _rows(out) == [0, 1]


# ---- 2. DONE ----------------------------------------------------------------------------------------

def _requeue_helper(out, done_text):
    """slurm/common.sh's sinklab_requeue_unless_done on OUT_DIR with DONE = done_text (None: no DONE), in a
    job (SLURM_JOB_ID set) whose scontrol only prints what it was asked."""
    done = out / "DONE"
    if done_text is None:
        done.unlink(missing_ok=True)
    else:
        done.write_text(done_text)
    script = ('set -uo pipefail; source slurm/common.sh; scontrol() { echo "scontrol $*"; }; '
              f'SLURM_JOB_ID=77 sinklab_requeue_unless_done "{out}"')
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=dict(ENV, SINKLAB_BIN=str(BIN)), capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return "scontrol requeue 77" in proc.stdout


def test_stale_done_is_removed_and_done_counts_steps(corpus, tmp_path):
    out = tmp_path / "d"
    _train(corpus, out, "--steps=4")
    assert (out / "DONE").read_text() == "steps 4 of 4\n"
    # The finished run extended and stopped by SIGTERM: no DONE may say it finished.
    proc = subprocess.Popen(_cmd(corpus, out, "--steps=200", "--resume", "--checkpoint-every=100000", "--eval-every=0"),
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("step 10/"):
            break
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stop requested" in stdout, stderr
    assert not (out / "DONE").exists()
    # The requeue helper: requeues without DONE or with one short of its target; not with a reached one.
    assert _requeue_helper(out, None)
    assert _requeue_helper(out, "steps 61 of 200\n")
    assert not _requeue_helper(out, "steps 200 of 200\n")
    assert not _requeue_helper(out, "4\n")  # an older trainer's DONE: finished by existing


# ---- 4. leftovers -------------------------------------------------------------------------------------

def test_leftovers_of_kill9_are_removed_at_start(corpus, tmp_path):
    out = tmp_path / "d"
    proc = subprocess.Popen(_cmd(corpus, out, "--steps=100000", "--checkpoint-every=2", "--eval-every=0"), cwd=ROOT,
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while not (out / "checkpoints" / "step_00000004").exists():
        assert proc.poll() is None and time.time() - t0 < 60, "no checkpoint to kill after"
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    temp = out / f"results.h5.tmp.{proc.pid}"
    assert temp.exists()  # what every kill -9 leaves
    # A kill while old checkpoints were pruned or a save was in flight: directories without COMPLETE.
    pruned, in_flight = out / "checkpoints" / "step_00000001", out / "checkpoints" / "step_00000099.tmp"
    for d in (pruned, in_flight):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"partial")
    newest = max(int(p.name.split("_")[1]) for p in (out / "checkpoints").glob("step_????????")
                 if (p / "COMPLETE").exists())
    # A kill between a complete save's renames: the newest checkpoint under its temporary name.
    final = out / "checkpoints" / f"step_{newest:08d}"
    final.rename(final.with_name(final.name + ".tmp"))
    run = _train(corpus, out, f"--steps={newest + 2}", "--resume", "--eval-every=0")
    for leftover in (temp, pruned, in_flight):
        assert not leftover.exists() and f"removed {leftover}" in run.stdout, run.stdout
    assert f"restored {final} from {final}.tmp" in run.stdout and f"(step {newest})" in run.stdout, run.stdout
    assert not list(out.glob("results.h5.tmp.*"))
    assert _rows(out) == list(range(newest + 2))


# ---- 5. messages --------------------------------------------------------------------------------------

def test_config_that_is_a_directory(corpus, tmp_path):
    proc = _run([str(PRETRAIN), "--config", str(tmp_path), f"--out-dir={tmp_path / 'd'}"])
    _refused(proc, "--config", str(tmp_path), "is a directory")


def test_ini_enum_typo_names_the_file_and_the_key(corpus, tmp_path):
    job = tmp_path / "typo.ini"
    job.write_text((ROOT / TINY).read_text() + "attn-norm = summ\n")
    cmd = _cmd(corpus, tmp_path / "d")
    cmd[cmd.index(TINY)] = str(job)
    _refused(_run(cmd), str(job), "--attn-norm", "'summ'")
    # The same value on the command line is the flag's, not the file's.
    line = _refused(_run(_cmd(corpus, tmp_path / "d", "--attn-norm=summ")), "--attn-norm", "'summ'")
    assert str(job) not in line and TINY not in line


def test_init_weights_on_a_text_file(corpus, tmp_path):
    text = tmp_path / "weights.txt"
    text.write_text("not weights\n")
    line = _refused(_run(_cmd(corpus, tmp_path / "d", f"--init-weights={text}")), "--init-weights", str(text),
                    ".safetensors", "checkpoint directory")
    assert "no complete checkpoint" not in line


def test_sft_data_errors_name_the_sft_data_file(corpus, tmp_path):
    if not SFT.exists():
        pytest.skip(f"{SFT} not built")
    base = tmp_path / "base"
    _train(corpus, base, "--steps=2")
    not_hdf5 = tmp_path / "rows.h5"
    not_hdf5.write_text("not HDF5\n")
    for sft_data in (not_hdf5, tmp_path / "missing.h5"):
        cmd = [str(SFT), f"--init-from={base}", f"--sft-data={sft_data}", f"--valid-data={corpus / 'valid.bin'}",
               "--global-batch-tokens=128", "--micro-batch-rows=2", "--eval-rows=8", "--probe-sequences=8",
               "--probe-length=12", f"--out-dir={tmp_path / 'sft'}"]
        line = _refused(_run(cmd), "--sft-data", str(sft_data), "SFT data file")
        assert "results file" not in line


def test_resume_with_steps_below_the_checkpoint_is_refused(corpus, tmp_path):
    out = tmp_path / "d"
    _train(corpus, out, "--steps=6", "--checkpoint-every=6")
    proc = _run(_cmd(corpus, out, "--steps=2", "--resume"))
    _refused(proc, "--steps 2", "step_00000006", ">= 6")
    assert _rows(out) == list(range(6)) and (out / "DONE").read_text() == "steps 6 of 6\n"


def test_errors_are_printed_once_per_mpi_job(corpus, tmp_path):
    out = tmp_path / "d"
    for extra in (("--lr-schedule=bogus",), ("--init-weights=" + str(tmp_path / "none.safetensors"),)):
        proc = _run(_cmd(corpus, out, *extra), np_=2)
        errors = [line for line in proc.stderr.splitlines() if "sinklab-pretrain: error:" in line]
        assert proc.returncode != 0 and len(errors) == 1, proc.stderr


def test_full_disk_on_resume_names_the_file_and_the_cause(corpus, tmp_path):
    # A small tmpfs filled up after a finished run: the resume's working copy of results.h5 does not fit.
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        out = disk / "d"
        _train(corpus, out, "--steps=4", "--checkpoint-every=2")
        free = os.statvfs(disk)
        (disk / "filler").write_bytes(bytes(free.f_bavail * free.f_frsize - 20_000))
        proc = _run(_cmd(corpus, out, "--steps=8", "--resume"))
        _refused(proc, f"{out / 'results.h5'}.tmp.", "No space left on device")
        assert not list(out.glob("results.h5.tmp.*")) and _rows(out) == [0, 1, 2, 3]
    finally:
        subprocess.run(["umount", str(disk)], check=True)
