# Shared by the sbatch scripts: locate the repository and binaries, set MPI/OpenMP threading, and
# requeue the job when it stopped early (time limit or preemption) rather than finished.
# Sourced, not run.

SINKLAB_ROOT=${SINKLAB_ROOT:-${SLURM_SUBMIT_DIR:-$(pwd)}}
SINKLAB_BIN=${SINKLAB_BIN:-$SINKLAB_ROOT/build/bin}
cd "$SINKLAB_ROOT" || exit 1
[ -x "$SINKLAB_BIN/sinklab-pretrain" ] || { echo "slurm: $SINKLAB_BIN/sinklab-pretrain not built (cmake -S . -B build && cmake --build build)" >&2; exit 1; }

# One OpenMP thread pool per rank, sized to the CPUs Slurm gave the task.
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export OMP_PROC_BIND=close OMP_PLACES=cores

# srun with PMIx starts the ranks; MPI/NCCL bootstrap inside the binary uses them.
sinklab_srun() {
  srun --mpi=pmix --kill-on-bad-exit=1 "$@"
}

# sinklab-pretrain writes OUT_DIR/DONE when every step has run. Anything else after a clean exit means
# it stopped on SIGUSR1/SIGTERM after checkpointing: put the job back in the queue to continue.
sinklab_requeue_unless_done() {
  local out_dir=$1
  if [ -f "$out_dir/DONE" ]; then
    echo "slurm: $out_dir finished"
  elif [ -n "${SLURM_JOB_ID:-}" ]; then
    echo "slurm: $out_dir not finished, requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
  fi
}
