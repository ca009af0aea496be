#!/usr/bin/env bash
# Pre-trains the paper's 1B model (jobs/pretrain/1b_default.ini) data-parallel over the allocation.
# Two minutes before the time limit Slurm sends SIGUSR1: the trainer finishes the step, checkpoints,
# flushes results.h5 and exits 0; the job is then requeued and resumes bit-exactly (--resume).
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

CONFIG=${CONFIG:-jobs/pretrain/1b_default.ini}
OUT_DIR=${OUT_DIR:-results/1b_default}
sinklab_srun "$SINKLAB_BIN/sinklab-pretrain" --config "$CONFIG" --out-dir "$OUT_DIR" --device "${DEVICE:-cuda}" --resume "$@"
status=$?
[ $status -eq 0 ] && sinklab_requeue_unless_done "$OUT_DIR"
exit $status
