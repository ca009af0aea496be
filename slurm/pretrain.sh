#!/usr/bin/env bash
# Generic pre-training job: CONFIG=jobs/pretrain/<x>.ini sbatch slurm/pretrain.sh [--flag=value ...]
# (the 60M default and every variant job file, jobs/pretrain/INDEX.md). Resources are overridable on the
# sbatch line. Results go where the job file's out-dir says (OUT_DIR=... or --out-dir=... overrides it),
# e.g. results/table02_weight_decay/wd_0.5.
#SBATCH --job-name=sinklab-pretrain
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --output=logs/%x-%j.out
set -uo pipefail
source "$(dirname "$0")/common.sh" 2>/dev/null || source "$SLURM_SUBMIT_DIR/slurm/common.sh"

sinklab_run_pretraining jobs/pretrain/60m_default.ini "$@"
exit $?
