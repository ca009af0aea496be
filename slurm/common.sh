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
