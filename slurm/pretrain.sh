#!/usr/bin/env bash
# Generic pre-training job (the 60M default and every variant job file, jobs/pretrain/INDEX.md).
#   CONFIG=jobs/pretrain/<x>.ini bash slurm/pretrain.sh [sbatch options] [-- trainer flags]
# on a login node submits this script with the resources the job file asks for: its `device = cpu|cuda`
# and its `#SBATCH` lines (60m_default.ini: one GPU); for cuda one rank per GPU. sbatch options given
# here win (e.g. --gpus-per-node=4, --partition=...). SINKLAB_DRY_RUN=1 prints the sbatch line instead.
#   CONFIG=jobs/pretrain/<x>.ini sbatch [sbatch options] slurm/pretrain.sh [trainer flags]
# runs it with the resources below and on the sbatch line (a cuda job file then needs
# --gpus-per-node=G --ntasks-per-node=G). Inside an allocation (salloc) `bash slurm/pretrain.sh` runs there.
# Either way the srun layout comes from the allocation (common.sh: sinklab_launch) and the results go to
# the job file's out-dir (OUT_DIR=... or --out-dir=... overrides it), e.g. results/table02_weight_decay/wd_0.5.
#SBATCH --job-name=sinklab-pretrain
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

config=${CONFIG:-jobs/pretrain/60m_default.ini}
sinklab_submit_or_run "$script" "$config" "$@"
exit $?
