#!/usr/bin/env bash
# The survey of pretrained models (paper Sec. 3, Table 8): every (model, input, domain, intervention)
# item through the dynamic MPI work queue of sinklab-survey, results gathered by rank 0 into one HDF5
# file. Models run on the CPUs of each rank (one model per rank; the default --max-memory auto gives each
# rank the node's memory over its ranks and streams the layers of models that do not fit it), or with
# device cuda (--device=cuda, DEVICE=cuda, or `device = cuda` in the job file) one rank per GPU, each
# model on its rank's GPU (--max-memory auto: 9/10 of the GPU's free memory; larger models are streamed
# to the GPU layer by layer).
#   bash slurm/survey.sh [sbatch options] [-- survey flags]     (a login node: submits itself)
#       with the resources of the job file (CONFIG): its #SBATCH lines over the ones below, and with
#       device cuda one rank per GPU (--gpus-per-node=G --ntasks-per-node=G, G from the file's or the
#       command line's --gpus-per-node, default 1), as the training scripts do (slurm/common.sh);
#       e.g. a job file with `device = cuda` and `#SBATCH --nodes=2 --gpus-per-node=8`: 16 ranks.
#   sbatch slurm/survey.sh [--flag=value ...]                   (the layout below, as allocated)
#   MODEL_ROOT=/path/to/hf SURVEY_INPUTS=data/survey_inputs bash slurm/survey.sh
#   CONFIG=jobs/survey/long_inputs.ini ... for the long-input appendix, token_lengths.ini for Fig. 3,
#   CONFIG=jobs/survey/hellaswag.ini HELLASWAG=data/hellaswag ... for Fig. 10
# MODEL_ROOT, SURVEY_INPUTS and HELLASWAG, when set, override --model-root / --survey-inputs-dir /
# --hellaswag-dir of the job file;
# OUTPUT defaults to results/survey/<job file name>.h5; the job's log goes beside it when submitted by
# bash (slurm-<job id>.out), else to logs/.
# Five minutes before the time limit Slurm sends SIGUSR1: the ranks abandon their items in flight,
# rank 0 commits the results and the job requeues itself; --resume then skips every item recorded ok.
#SBATCH --job-name=sinklab-survey
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@300
#SBATCH --requeue
#SBATCH --output=logs/%x-%j.out
set -uo pipefail
SINKLAB_APP=sinklab-survey
script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
source "$(dirname "$0")/common.sh" 2>/dev/null || source "$SLURM_SUBMIT_DIR/slurm/common.sh"

CONFIG=${CONFIG:-jobs/survey/open_models.ini}
OUTPUT=${OUTPUT:-results/survey/$(basename "$CONFIG" .ini).h5}
if [ -z "${SLURM_JOB_ID:-}" ]; then  # a login node: submit with the job file's resources
  OUT_DIR=$(dirname "$OUTPUT") sinklab_submit "$script" "$CONFIG" "$@"
  exit $?
fi
args=(--config "$CONFIG" --output "$OUTPUT" --resume)
[ -n "${MODEL_ROOT:-}" ] && args+=(--model-root "$MODEL_ROOT")
[ -n "${SURVEY_INPUTS:-}" ] && args+=(--survey-inputs-dir "$SURVEY_INPUTS")
[ -n "${HELLASWAG:-}" ] && args+=(--hellaswag-dir "$HELLASWAG")
device=$(sinklab_job_device "$CONFIG" "$@")
sinklab_option_value device "$@" >/dev/null || args+=(--device "$device")
sinklab_launch "$CONFIG" "$device" "$SINKLAB_BIN/sinklab-survey" "${args[@]}" "$@"
status=$?
[ "${SINKLAB_DRY_RUN:-0}" = 1 ] && exit $status
[ $status -eq 0 ] && sinklab_requeue_unless_marker "$OUTPUT" "$OUTPUT.done"
exit $status
