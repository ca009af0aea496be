#!/usr/bin/env bash
# Supervised fine-tuning (paper App. D, Fig. 30) of jobs/sft/ultrachat_1b_softmax.ini or CONFIG=jobs/sft/<x>.ini
# (its sigmoid twin: jobs/sft/ultrachat_1b_sigmoid.ini):
#   CONFIG=jobs/sft/<x>.ini bash slurm/sft.sh [sbatch options] [-- trainer flags]
# submits it with the job file's resources (ultrachat_1b_*: 1 node x 8 GPUs, one rank per GPU; sbatch options
# given here win); `CONFIG=... sbatch [options] slurm/sft.sh [trainer flags]` runs it with the resources
# below and on the sbatch line (as slurm/pretrain.sh). The job file's init-from names the pre-training run
# whose newest checkpoint is fine-tuned; that run must have finished first (submitting checks the file
# with sinklab-sft --dry-run, which reads that checkpoint). Requeue and resume as slurm/pretrain.sh:
# SIGUSR1 before the time limit -> checkpoint, exit 0, requeue; the requeued job resumes from its
# out-dir's newest checkpoint until OUT_DIR/DONE exists.
#SBATCH --job-name=sinklab-sft
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=12:00:00
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=logs/%x-%j.out
set -uo pipefail
SINKLAB_APP=sinklab-sft
script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
here=$(dirname "$script"); [ -f "$here/common.sh" ] || here=${SLURM_SUBMIT_DIR:-.}/slurm  # sbatch runs a copy
source "$here/common.sh"

config=${CONFIG:-jobs/sft/ultrachat_1b_softmax.ini}
sinklab_submit_or_run "$script" "$config" "$@"
exit $?
