"""The emergence atlas' machinery (jobs/atlas, issue #42) at its CI scale (jobs/atlas/bbm_ci.ini, a tiny
data_prep bbm build):

- the cells: the kinds and flags every cell names, the principal set, every cell's job file accepted by
  sinklab-pretrain (--dry-run) at every scale (at the paper's scales its own cells, with the new axes);
- the convergence rule on constructed series (a plateau before the sink does not stop a run; a sink still
  growing does not; NaN does not);
- the runner end to end at both CI scales (BOS first to convergence; the paper's setting to a fixed budget): 2
  cells x 3 seeds, two at a time, a kill -9 of the runner mid-run (its trainers die with it), a rerun that skips
  the finished runs and resumes the killed one from its checkpoint (bit for bit what an uninterrupted run of the
  same item gives, the learned sinks' logs too), every run with its atlas_status.json;
- a failed run is reported with its log and the others go on (exit 1);
- slurm/atlas.sh: the array it submits (SINKLAB_DRY_RUN=1), and one array task trained as the runner does.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import assert_jobs_pass_dry_run
from analysis.stats import convergence
from cells.atlas import CELLS, EXPECT, SCALES, cells_of
from jobs.atlas.run import BUDGET_SCALES, CAPS, CHUNKS, budget_rule, items_of, job_text

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
PRETRAIN = BIN / "sinklab-pretrain"
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
ATLAS = ["--scale", "ci", "--seeds", "3", "--cells", "softmax,sigmoid"]
# The CI scales' end-to-end atlases: BOS first to convergence, and the paper's setting to a fixed budget (a learned
# sink logit from log T at 10x lr, and K biases with BOS first: both new axes and the BOS-first twin).
END_TO_END = {"ci": ATLAS, "paper_ci": ["--scale", "paper_ci", "--seeds", "3", "--cells",
                                        "sink_logit_3l_init_logt_lr10,k_bias_3l_bos"]}
needs_binary = pytest.mark.skipif(not PRETRAIN.exists(), reason=f"{PRETRAIN} not built")


@pytest.fixture(scope="module")
def data(bbm_ci_data):
    return bbm_ci_data


def _runner(out, data, *extra, wait=True, scale="ci"):
    cmd = [sys.executable, "-m", "jobs.atlas.run", *END_TO_END[scale], "--out", str(out), "--data", str(data),
           "--bin", str(BIN), *extra]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def _series(run_dir, name):
    with h5py.File(run_dir / "results.h5", "r") as f:
        ev = f[f"runs/{name}/eval"]
        return ev["step"][:], ev["copy_loss"][:], ev["first_attention"][:]


def test_cells_are_the_issues_table():
    names = [c.name for c in CELLS]
    assert len(names) == len(set(names))
    assert all(c.expect in EXPECT and c.source and c.label for c in CELLS)
    assert {c.name for c in CELLS if c.principal} == {"softmax", "sigmoid", "gated_headwise", "sink_logit",
                                                      "softpick", "kv_bias", "kv_bias_no_bos", "no_bos"}
    by = {c.name: c for c in CELLS}
    assert by["kv_bias_no_bos"].settings == {"attn-bias": "kv", "document-rows": "false"}
    assert by["gated_headwise"].settings == {"attn-gate": "headwise"} and by["softpick"].expect == "no_sink"
    assert by["sink_token"].expect == "moved_to_bias" and by["sigmoid_sum"].expect == "sink"


@needs_binary
@pytest.mark.parametrize("scale", sorted(SCALES))
def test_every_cell_is_a_valid_job_at_every_scale(scale, data, tmp_path):
    """Each cell's job file as the runner writes it passes the trainer's own checks (--dry-run): at the paper's
    scales the new axes too (--sink-logit-init, --sink-lr-scale, BOS first at 3 layers)."""
    assert_jobs_pass_dry_run(PRETRAIN, ENV, items_of(cells_of(scale), 1),
                             lambda it, run_dir: job_text(scale, it, run_dir, 10, data), tmp_path)


def test_convergence_rule_on_constructed_series():
    steps = np.arange(0, 210, 10)
    n = len(steps)
    # the plateau before the sink: the BOS attention flat, but the copy rule not learned yet
    assert not convergence.check(steps, np.full(n, 2.0), np.full(n, 0.07))[0]
    growing = np.linspace(0.07, 0.6, n)
    assert not convergence.check(steps, np.full(n, 0.01), growing)[0]  # the sink still growing
    # formed: jitter of +-0.015 between evaluations, the means of the last two windows (3 evaluations each:
    # 10 % of 200 steps holds 2) 0.6 and 0.605 apart by 0.005
    settled = np.concatenate([growing[:-6], [0.585, 0.615, 0.6, 0.59, 0.62, 0.605]])
    ok, measured = convergence.check(steps, np.full(n, 0.05), settled)
    assert ok and measured["window_evals"] == 3 and abs(measured["bos_moved"] - 0.005) < 1e-9, measured
    assert not convergence.check(steps, np.full(n, 0.2), settled)[0]  # copy loss above the margin
    # 1000 steps: the windows are steps 910-1000 and 810-900 (10 evaluations each)
    steps = np.arange(0, 1010, 10)
    bos = np.full(len(steps), 0.5)
    bos[-10:] += 0.011  # a drift of 0.011 between the windows: still moving
    assert not convergence.check(steps, np.zeros(len(steps)), bos)[0]
    bos[-10:] -= 0.002
    ok, measured = convergence.check(steps, np.zeros(len(steps)), bos)
    assert ok and measured["window_evals"] == 10, measured
    bos[-21] = 0.9  # outside both windows: no effect
    assert convergence.check(steps, np.zeros(len(steps)), bos)[0]
    copy = np.zeros(len(steps))
    copy[-1] = np.nan
    assert not convergence.check(steps, copy, bos)[0]  # a diverged run trains on to the cap
    assert not convergence.check(steps[:5], copy[:5] * 0, bos[:5])[0]  # too few evaluations for two windows


def _newest_checkpoint(run_dir):
    steps = [int(c.name[5:13]) for c in (run_dir / "checkpoints").glob("step_*") if not c.name.endswith(".tmp")]
    return max(steps, default=0)


def _checkpointed_unfinished(root, scale):
    """A run in flight with a checkpoint after step 0 and its last chunk still to train (so that a rerun must
    resume it, not only judge it), or None."""
    for run_dir in root.glob("*/seed*"):
        newest = _newest_checkpoint(run_dir)
        if not (run_dir / "atlas_status.json").exists() and 0 < newest <= CAPS[scale] - CHUNKS[scale]:
            return run_dir
    return None


@needs_binary
@pytest.mark.parametrize("scale", sorted(END_TO_END))
def test_runner_end_to_end_with_a_kill_and_a_resume(scale, data, tmp_path):
    out = tmp_path / "atlas"
    root = out / scale
    proc = _runner(out, data, "--parallel", "2", wait=False, scale=scale)
    killed = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if list(root.glob("*/seed*/atlas_status.json")):
            killed = _checkpointed_unfinished(root, scale)
            if killed:
                break
        time.sleep(0.02)
    assert killed is not None, f"no run in flight with a checkpoint while another had finished: {proc.poll()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    log_at_kill = len((killed / "train.log").read_text())
    newest = _newest_checkpoint(killed)
    finished_before = {p.parent for p in root.glob("*/seed*/atlas_status.json")}
    time.sleep(1)  # the trainers died with the runner: nothing writes to the folders any more
    trainers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).count(str(out))]
    assert not trainers, [_cmdline(p) for p in trainers]

    again = _runner(out, data, "--parallel", "2", scale=scale)
    assert again.returncode == 0, again.stdout + again.stderr
    for run_dir in finished_before:
        cell, seed = run_dir.parent.name, run_dir.name[len("seed"):]
        assert f"atlas: {cell} seed {seed}: already finished" in again.stdout, again.stdout
    assert "atlas: 6/6 runs done (0 failed)" in again.stdout, again.stdout
    # the killed run went on from its newest checkpoint at the kill (mid-chunk or at a chunk's end)
    rerun_log = (killed / "train.log").read_text()[log_at_kill:]
    resumed = [ln for ln in rerun_log.splitlines() if "resumed from" in ln]
    assert resumed and resumed[0].endswith(f"(step {newest})"), rerun_log
    for run_dir in root.glob("*/seed*"):
        status = json.loads((run_dir / "atlas_status.json").read_text())
        if scale in BUDGET_SCALES:  # every run to the budget, whatever the convergence rule says
            assert status["stopped"] == "budget" and status["steps"] == CAPS[scale], status
            assert status["rule"] == budget_rule(CAPS[scale]), status
        else:
            assert status["stopped"] in ("converged", "cap") and status["rule"] == convergence.RULE, status
        steps, _, _ = _series(run_dir, f"atlas.{scale}.{run_dir.parent.name}.s{run_dir.name[4:]}")
        assert steps[-1] == status["steps"] and list(steps) == sorted(set(steps)), steps  # no eval twice
    assert len(list(root.glob("*/seed*/atlas_status.json"))) == 6

    # The killed run resumed to the same numbers an uninterrupted run of the same item gives.
    cell, seed = killed.parent.name, int(killed.name[4:])
    twin = _runner(tmp_path / "twin", data, "--cells", cell, "--seeds", str(seed), "--item", str(seed - 1),
                   scale=scale)
    assert twin.returncode == 0, twin.stdout + twin.stderr
    name = f"atlas.{scale}.{cell}.s{seed}"
    twin_dir = tmp_path / "twin" / scale / cell / f"seed{seed}"
    for a, b in zip(_series(killed, name), _series(twin_dir, name)):
        np.testing.assert_array_equal(a, b)
    if scale in BUDGET_SCALES:  # where a learned sink sits, logged alike by the resumed run and the twin
        with h5py.File(killed / "results.h5", "r") as f, h5py.File(twin_dir / "results.h5", "r") as g:
            wanted = ("sink_logit", "sink_logit_share", "k_bias_norm", "alpha_star", "sink_star")
            found = [k for k in wanted if k in f[f"runs/{name}/eval"]]
            assert found, list(f[f"runs/{name}/eval"])
            for k in found:
                np.testing.assert_array_equal(f[f"runs/{name}/eval/{k}"][:], g[f"runs/{name}/eval/{k}"][:])


def _cmdline(proc_dir):
    try:
        return (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@needs_binary
def test_a_failed_run_is_reported_and_the_others_go_on(data, tmp_path):
    out = tmp_path / "atlas"
    broken = out / "ci" / "softmax" / "seed1"
    broken.mkdir(parents=True)
    (broken / "results.h5").write_text("not an HDF5 file")  # the trainer refuses to resume into it
    proc = _runner(out, data, "--cells", "softmax", "--seeds", "2", "--cap-steps", "20")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    log = out / "ci" / "softmax" / "seed1" / "train.log"
    assert f"atlas: FAILED softmax seed 1: sinklab-pretrain exited with" in proc.stdout and str(log) in proc.stdout
    assert (out / "ci" / "softmax" / "seed2" / "atlas_status.json").exists()
    assert "atlas: 2/2 runs done (1 failed)" in proc.stdout, proc.stdout


@needs_binary
def test_slurm_array_of_the_atlas(data, tmp_path):
    out = tmp_path / "atlas"
    runner = [*ATLAS, "--out", str(out), "--data", str(data)]
    env = dict(ENV, SINKLAB_BIN=str(BIN), SINKLAB_PYTHON=sys.executable, SINKLAB_DRY_RUN="1")
    env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    proc = subprocess.run(["bash", str(ROOT / "slurm/atlas.sh"), "--parallel=2", "--time=0:30:00", "--", *runner],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("slurm: dry run:"))
    assert "--array=0-5%2" in line and "--time=0:30:00" in line and line.endswith(str(ROOT / "slurm/atlas.sh")), line
    assert "slurm: atlas: array job (dry run), 6 task(s), at most 2 at a time" in proc.stdout, proc.stdout
    assert f"slurm: task 5: sigmoid seed 3 -> {out / 'ci' / 'sigmoid' / 'seed3'}" in proc.stdout, proc.stdout
    assert len(list((out / "ci").glob("*/seed*/job.ini"))) == 6  # the runner's --plan wrote them
    sized = subprocess.run([sys.executable, "-m", "analysis.plan", str(out / "ci")], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
    assert sized.returncode == 0 and "total: 6 job files" in sized.stdout, sized.stdout + sized.stderr

    # Task 5 of the array, as Slurm starts it: the runner trains item 5 only.
    task = dict(env, SINKLAB_DRY_RUN="0", SLURM_ARRAY_TASK_ID="5", SLURM_ARRAY_JOB_ID="7", SLURM_JOB_ID="8",
                SINKLAB_ATLAS_TASK="1", SINKLAB_ATLAS_ARGS="\n".join(runner))
    proc = subprocess.run(["bash", str(ROOT / "slurm/atlas.sh")], cwd=ROOT, env=task, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "atlas: sigmoid seed 3:" in proc.stdout and "atlas: 1/1 runs done (0 failed)" in proc.stdout, proc.stdout
    assert [p.parent.name + "/" + p.name for p in (out / "ci").glob("*/seed*") if (p / "atlas_status.json").exists()] \
        == ["sigmoid/seed3"]
    # Refusals before submitting: options the array sets itself.
    proc = subprocess.run(["bash", str(ROOT / "slurm/atlas.sh"), "--", *runner, "--item", "2"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "slurm: atlas.sh: --item: the array sets it" in proc.stderr, proc.stderr
