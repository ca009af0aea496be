#!/usr/bin/env bash
# The emergence atlas (jobs/atlas, issue #42) on a cluster: every cell x seed one task of one Slurm job array.
#   bash slurm/atlas.sh [--parallel=K] [sbatch options] [-- runner options]
# Runner options are python -m jobs.atlas.run's that choose the atlas (--scale, --seeds, --cells, --principal,
# --cap-steps, --chunk, --out, --data); e.g. `bash slurm/atlas.sh --parallel=16 -- --scale small --seeds 8`.
# Submission writes every run's job file (the runner's --plan: `python -m analysis.plan OUT/SCALE` sizes
# them), checks each cell's with the binary's --dry-run (slurm/common.sh: sinklab_plan_job) and submits
# nothing if one fails; then submits this script once with --array=0-(N-1) (%K: at most K tasks at a time)
# and prints which task trains which run. Task i runs item i of the runner's list (its --list, fixed by the
# runner options the submission exports) with `--item i --parallel 1 --threads <CPUs of the task>`: the
# same chunks, convergence rule, cap and atlas_status.json as on one machine. A task whose run has finished
# returns at once, so resubmitting the same command after a time limit or a failure trains only what is
# left, each unfinished run from its newest checkpoint. SINKLAB_DRY_RUN=1 prints the sbatch line instead of
# submitting. Logs: logs/sinklab-atlas-<array job>_<task>.out; each run's trainer log: its train.log.
#SBATCH --job-name=sinklab-atlas
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --time=4:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=logs/%x-%A_%a.out
set -uo pipefail
script=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
here=$(dirname "$script"); [ -f "$here/common.sh" ] || here=${SLURM_SUBMIT_DIR:-.}/slurm  # sbatch runs a copy
source "$here/common.sh"
python=${SINKLAB_PYTHON:-$SINKLAB_ROOT/.venv/bin/python}
[ -x "$python" ] || python=python3

refuse() { echo "slurm: atlas.sh: $*" >&2; exit 2; }

# One array task: item SLURM_ARRAY_TASK_ID of the atlas the submission exported.
if [ -n "${SLURM_ARRAY_TASK_ID:-}" ] && [ "${SINKLAB_ATLAS_TASK:-}" = 1 ]; then
  mapfile -t runner < <(printf '%s' "${SINKLAB_ATLAS_ARGS:-}" | sed '/^$/d')
  echo "slurm: atlas array job ${SLURM_ARRAY_JOB_ID:-?} task $SLURM_ARRAY_TASK_ID (job ${SLURM_JOB_ID:-?}):" \
    "${runner[*]}"
  exec "$python" -m jobs.atlas.run "${runner[@]}" --bin "$SINKLAB_BIN" --item "$SLURM_ARRAY_TASK_ID" \
    --parallel 1 --threads "$OMP_NUM_THREADS"
fi

# Submission.
parallel="" sbatch_opts=() runner=() in_runner=0
for arg in "$@"; do
  if [ $in_runner -eq 1 ]; then runner+=("$arg"); continue; fi
  case "$arg" in
    --) in_runner=1 ;;
    --parallel=*) parallel=${arg#--parallel=} ;;
    *) sbatch_opts+=("$arg") ;;
  esac
done
[ -z "$parallel" ] || [[ $parallel =~ ^[1-9][0-9]*$ ]] || refuse "--parallel=$parallel: not a positive number"
for arg in "${runner[@]}"; do
  case "$arg" in --item*|--parallel*|--threads*|--bin*|--plan|--list) refuse "$arg: the array sets it" ;; esac
done
"$python" -m jobs.atlas.run "${runner[@]}" --plan || exit 2
mapfile -t items < <("$python" -m jobs.atlas.run "${runner[@]}" --list) || exit 2
[ ${#items[@]} -gt 0 ] || refuse "the runner options select no run"
declare -A checked
for line in "${items[@]}"; do  # one job file per cell: the seeds differ only in --seed
  IFS=$'\t' read -r _ cell _ dir <<< "$line"
  [ -z "${checked[$cell]:-}" ] || continue
  sinklab_plan_job "$script" "$dir/job.ini" || exit 2
  checked[$cell]=1
done

[ "${SINKLAB_DRY_RUN:-0}" = 1 ] || mkdir -p logs || exit 1
n=${#items[@]}
args_text=$(printf '%s\n' "${runner[@]}")
out=$(sinklab_run_or_print env SINKLAB_ATLAS_TASK=1 SINKLAB_ATLAS_ARGS="$args_text" sbatch --parsable \
      --array="0-$((n - 1))${parallel:+%$parallel}" "${sbatch_opts[@]}" "$script") || exit $?
[ "${SINKLAB_DRY_RUN:-0}" = 1 ] && { echo "$out"; job="(dry run)"; } || job=${out%%;*}
echo "slurm: atlas: array job $job, $n task(s)${parallel:+, at most $parallel at a time}"
for line in "${items[@]}"; do
  IFS=$'\t' read -r i cell seed dir <<< "$line"
  echo "slurm: task $i: $cell seed $seed -> $dir"
done
