#!/usr/bin/env bash
# Pre-trains the paper's 1B model (jobs/pretrain/1b_default.ini, or CONFIG=<job file>, e.g. the sigmoid 1B
# run) data-parallel over the allocation, into the job file's out-dir (OUT_DIR=... overrides it):
#   bash slurm/pretrain_1b.sh [sbatch options] [-- trainer flags]
# submits it with the job file's resources (1b_default.ini: 4 nodes x 8 GPUs, one rank per GPU; sbatch
# options given here win); `sbatch [options] slurm/pretrain_1b.sh [trainer flags]` runs it with the
# resources below and on the sbatch line. Everything else as slurm/pretrain.sh.
# Two minutes before the time limit Slurm sends SIGUSR1: the trainer finishes the step, checkpoints,
# flushes results.h5 and exits 0; the job is then requeued and resumes (--resume: bit for bit on nodes
# of the same CPU kind and thread count; the log warns when the BLAS kernels differ).
#SBATCH --job-name=sinklab-1b
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=logs/%x-%j.out
set -uo pipefail
script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
here=$(dirname "$script"); [ -f "$here/common.sh" ] || here=${SLURM_SUBMIT_DIR:-.}/slurm  # sbatch runs a copy
source "$here/common.sh"

config=${CONFIG:-jobs/pretrain/1b_default.ini}
sinklab_submit_or_run "$script" "$config" "$@"
exit $?
