# Shared by the sbatch scripts: locate the repository and binaries, set MPI/OpenMP threading, and
# requeue the job when it stopped early (time limit or preemption) rather than finished.
# Sourced, not run.

SINKLAB_ROOT=${SINKLAB_ROOT:-${SLURM_SUBMIT_DIR:-$(pwd)}}
SINKLAB_BIN=${SINKLAB_BIN:-$SINKLAB_ROOT/build/bin}
SINKLAB_APP=${SINKLAB_APP:-sinklab-pretrain}  # the binary the sourcing script runs
cd "$SINKLAB_ROOT" || exit 1
[ -x "$SINKLAB_BIN/$SINKLAB_APP" ] || { echo "slurm: $SINKLAB_BIN/$SINKLAB_APP not built (cmake -S . -B build && cmake --build build)" >&2; exit 1; }

# One OpenMP thread pool per rank, sized to the CPUs Slurm gave the task.
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export OMP_PROC_BIND=close OMP_PLACES=cores

# srun with PMIx starts the ranks; MPI/NCCL bootstrap inside the binary uses them.
sinklab_srun() {
  srun --mpi=pmix --kill-on-bad-exit=1 "$@"
}

# The binaries write a marker when all their work is done (sinklab-pretrain: OUT_DIR/DONE; sinklab-survey:
# OUTPUT.done). Anything else after a clean exit means the job stopped on SIGUSR1/SIGTERM after saving
# its state: put the job back in the queue to continue.
sinklab_requeue_unless_marker() {
  local what=$1 marker=$2
  if [ -f "$marker" ]; then
    echo "slurm: $what finished"
  elif [ -n "${SLURM_JOB_ID:-}" ]; then
    echo "slurm: $what not finished, requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
  fi
}
sinklab_requeue_unless_done() { sinklab_requeue_unless_marker "$1" "$1/DONE"; }

# The training jobs (pretrain.sh, pretrain_1b.sh: sinklab-pretrain; sft.sh: sinklab-sft, the same loop):
# $SINKLAB_APP on CONFIG (default $1) over the allocation, resuming from OUT_DIR's newest checkpoint,
# requeued until OUT_DIR/DONE exists. The output directory is the one the job file names (out-dir = ...,
# which every file under jobs/pretrain and jobs/sft sets), so that `CONFIG=<another job> sbatch` never
# resumes another run's checkpoints; OUT_DIR=... or --out-dir among the script's arguments overrides it.
sinklab_run_training() {
  local config=${CONFIG:-$1}; shift
  [ -f "$config" ] || { echo "slurm: CONFIG=$config: no such job file" >&2; return 2; }
  local out_dir="" given=0 prev="" arg
  for arg in "$@"; do
    case "$arg" in --out-dir=*) out_dir=${arg#--out-dir=}; given=1 ;; esac
    [ "$prev" = "--out-dir" ] && { out_dir=$arg; given=1; }
    prev=$arg
  done
  if [ $given -eq 0 ]; then
    out_dir=${OUT_DIR:-$(sed -n 's/^[[:space:]]*out-dir[[:space:]]*=[[:space:]]*\([^#]*\).*$/\1/p' "$config" | tail -n 1 | sed 's/[[:space:]]*$//')}
    [ -n "$out_dir" ] || out_dir=results/$(basename "$config" .ini)
    set -- --out-dir "$out_dir" "$@"
  fi
  echo "slurm: $config -> $out_dir"
  sinklab_srun "$SINKLAB_BIN/$SINKLAB_APP" --config "$config" --device "${DEVICE:-cuda}" --resume "$@"
  local status=$?
  [ $status -eq 0 ] && sinklab_requeue_unless_done "$out_dir"
  return $status
}
sinklab_run_pretraining() { sinklab_run_training "$@"; }
