#!/usr/bin/env bash
# Supervised fine-tuning (paper App. D, Fig. 30): CONFIG=jobs/sft/<x>.ini sbatch slurm/sft.sh [--flag=value ...]
# (default jobs/sft/ultrachat_1b_softmax.ini; its sigmoid twin is jobs/sft/ultrachat_1b_sigmoid.ini). The
# job file's init-from names the pre-training run whose newest checkpoint is fine-tuned; that run must
# have finished first. Requeue and resume as slurm/pretrain.sh: SIGUSR1 before the time limit -> checkpoint,
# exit 0, requeue; the requeued job resumes from OUT_DIR's newest checkpoint until OUT_DIR/DONE exists.
#SBATCH --job-name=sinklab-sft
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=12:00:00
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --output=logs/%x-%j.out
set -uo pipefail
SINKLAB_APP=sinklab-sft
source "$(dirname "$0")/common.sh" 2>/dev/null || source "$SLURM_SUBMIT_DIR/slurm/common.sh"

sinklab_run_training jobs/sft/ultrachat_1b_softmax.ini "$@"
exit $?
