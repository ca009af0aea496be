#!/usr/bin/env bash
# A sweep: every job file (*.ini) of a folder as one task of one Slurm job array.
#   bash slurm/pretrain_sweep.sh DIR [--parallel=K] [sbatch options] [-- trainer flags]
# checks every file first (the binary's --dry-run with the trainer flags, as slurm/pretrain.sh does) and
# submits nothing if one fails; then submits this script once with --array=0-(N-1) (%K with --parallel=K:
# at most K tasks at a time) and prints the array job's id and which task runs which file (sorted by
# name). Every task asks for the same resources, so the files must ask for the same (their device and
# #SBATCH lines, common.sh: sinklab_plan_job); sbatch options given here win, for all tasks.
# Each task trains its file exactly as slurm/pretrain.sh does (common.sh: sinklab_run_training: CPU or
# GPU as the file says, into its out-dir, --resume) and requeues itself on its own: SIGUSR1 two minutes
# before the time limit -> checkpoint, exit 0, `scontrol requeue` of that task only. SINKLAB_DRY_RUN=1
# prints the sbatch line instead of submitting. Logs: logs/sinklab-sweep-<array job>_<task>.out.
#SBATCH --job-name=sinklab-sweep
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=logs/%x-%A_%a.out
set -uo pipefail
script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
here=$(dirname "$script"); [ -f "$here/common.sh" ] || here=${SLURM_SUBMIT_DIR:-.}/slurm  # sbatch runs a copy
source "$here/common.sh"

refuse() { echo "slurm: pretrain_sweep.sh: $*" >&2; exit 2; }

# One array task: the file of this task's index in the list the submission exported (a list fixed at
# submission, so a file added to DIR later does not shift the tasks), trained as pretrain.sh trains.
if [ -n "${SLURM_ARRAY_TASK_ID:-}" ] && [ -n "${SINKLAB_SWEEP_FILES:-}" ]; then
  mapfile -t files <<< "$SINKLAB_SWEEP_FILES"
  config=${files[$SLURM_ARRAY_TASK_ID]:-}
  [ -n "$config" ] || refuse "array task $SLURM_ARRAY_TASK_ID: the sweep has ${#files[@]} job files"
  echo "slurm: sweep array job ${SLURM_ARRAY_JOB_ID:-?} task $SLURM_ARRAY_TASK_ID (job ${SLURM_JOB_ID:-?}): $config"
  unset CONFIG OUT_DIR  # the task's own file and out-dir
  sinklab_run_training "$config" "$@"
  exit $?
fi

# Submission.
dir=${1:-}
[ -n "$dir" ] || refuse "usage: bash slurm/pretrain_sweep.sh DIR [--parallel=K] [sbatch options] [-- trainer flags]"
shift
[ -d "$dir" ] || refuse "$dir: no such directory"
[ -z "${OUT_DIR:-}" ] || refuse "OUT_DIR is set: it would send every task to one out-dir (each file names its own)"
[ -z "${CONFIG:-}" ] || refuse "CONFIG is set: a sweep runs the files of DIR"
mapfile -t files < <(find "$dir" -maxdepth 1 -name '*.ini' -type f | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || refuse "$dir has no job files (*.ini)"
parallel="" args=() in_flags=0
for arg in "$@"; do
  if [ $in_flags -eq 0 ] && [[ $arg == --parallel=* ]]; then parallel=${arg#--parallel=}; continue; fi
  [ "$arg" = "--" ] && in_flags=1
  args+=("$arg")
done
[ -z "$parallel" ] || [[ $parallel =~ ^[1-9][0-9]*$ ]] || refuse "--parallel=$parallel: not a positive number"

resources="" first="" out_dirs=() list=""
for i in "${!files[@]}"; do
  f=$(cd "$(dirname "${files[$i]}")" && pwd)/$(basename "${files[$i]}")
  files[$i]=$f
  sinklab_plan_job "$script" "$f" "${args[@]}" || exit 2
  shape="device $PLAN_DEVICE, ${PLAN_RESOURCES[*]:-no #SBATCH lines}"
  if [ -z "$first" ]; then
    first=$f resources=$shape sbatch_resources=("${PLAN_RESOURCES[@]}")
  elif [ "$shape" != "$resources" ]; then
    refuse "$first ($resources) and $f ($shape) ask for different resources; one array has one shape: split $dir"
  fi
  for j in "${!out_dirs[@]}"; do
    [ "${out_dirs[$j]}" != "$PLAN_OUT_DIR" ] || refuse "${files[$j]} and $f write to one out-dir ($PLAN_OUT_DIR)"
  done
  out_dirs+=("$PLAN_OUT_DIR")
  list+=$f$'\n'
done

[ "${SINKLAB_DRY_RUN:-0}" = 1 ] || mkdir -p logs || exit 1
n=${#files[@]}
out=$(sinklab_run_or_print env SINKLAB_SWEEP_FILES="${list%$'\n'}" sbatch --parsable --array="0-$((n - 1))${parallel:+%$parallel}" \
      "${sbatch_resources[@]}" "${PLAN_SBATCH[@]}" "$script" "${PLAN_FLAGS[@]}") || exit $?
[ "${SINKLAB_DRY_RUN:-0}" = 1 ] && { echo "$out"; job="(dry run)"; } || job=${out%%;*}
echo "slurm: sweep $dir: array job $job, $n task(s) (device $PLAN_DEVICE, ${PLAN_RANKS:-?} rank(s) each${parallel:+, at most $parallel at a time})"
for i in "${!files[@]}"; do
  echo "slurm: task $i: ${files[$i]} -> ${out_dirs[$i]}"
done
