#!/usr/bin/env bash
# Pre-trains the paper's 1B model (jobs/pretrain/1b_default.ini, or CONFIG=<job file>, e.g. the sigmoid 1B
# run) data-parallel over the allocation, into the job file's out-dir (OUT_DIR=... overrides it).
# Two minutes before the time limit Slurm sends SIGUSR1: the trainer finishes the step, checkpoints,
# flushes results.h5 and exits 0; the job is then requeued and resumes (--resume: bit for bit on nodes
# of the same CPU kind and thread count; the log warns when the BLAS kernels differ).
#SBATCH --job-name=sinklab-1b
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --output=logs/%x-%j.out
set -uo pipefail
source "$(dirname "$0")/common.sh" 2>/dev/null || source "$SLURM_SUBMIT_DIR/slurm/common.sh"

sinklab_run_pretraining jobs/pretrain/1b_default.ini "$@"
exit $?
