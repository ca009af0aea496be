# Shared by the sbatch scripts: locate the repository and binaries, set MPI/OpenMP threading, derive
# the srun layout from the job's allocation, submit a job file with the resources it asks for, and
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
SINKLAB_SRUN=(srun --mpi=pmix --kill-on-bad-exit=1)
sinklab_srun() {
  "${SINKLAB_SRUN[@]}" "$@"
}

# Runs a command, or with SINKLAB_DRY_RUN=1 only prints it (shell-quoted): how the tests see the sbatch
# and srun lines a job file leads to without a GPU cluster.
sinklab_run_or_print() {
  if [ "${SINKLAB_DRY_RUN:-0}" = 1 ]; then
    printf 'slurm: dry run:'; printf ' %q' "$@"; printf '\n'
    return 0
  fi
  "$@"
}

# ---------------------------------------------------------------------------------------------------
# Job files, flags and sbatch options

# sinklab_job_value FILE KEY: the value of FILE's last `KEY = value` line ("" when none).
sinklab_job_value() {
  sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*\([^#]*\).*\$/\1/p" "$1" | tail -n 1 | sed 's/[[:space:]]*$//'
}

# sinklab_option_value NAME ARGS...: the last value of --NAME=value or --NAME value among ARGS (the one a
# command line that repeats the option ends up with); status 1 when ARGS lack it.
sinklab_option_value() {
  local name=$1 prev="" value="" found=1 arg; shift
  for arg in "$@"; do
    case "$arg" in --"$name"=*) value=${arg#--"$name"=}; found=0 ;; esac
    [ "$prev" = "--$name" ] && { value=$arg; found=0; }
    prev=$arg
  done
  printf '%s' "$value"
  return $found
}

# sinklab_sbatch_lines FILE: the options on FILE's `#SBATCH` lines, one per line. An sbatch script's
# lines, or a job file's: there they are comments to the binaries and resource requests to
# sinklab_plan_job (e.g. `#SBATCH --nodes=4 --gpus-per-node=8` in jobs/pretrain/1b_default.ini).
sinklab_sbatch_lines() {
  sed -n 's/^#SBATCH[[:space:]]\{1,\}//p' "$1" | sed 's/[[:space:]]#.*$//' | tr -s ' \t' '\n' | sed '/^$/d'
}

# sinklab_job_device CONFIG FLAGS...: where the job runs, cpu or cuda: --device among the trainer's
# FLAGS, else DEVICE, else the job file's `device = ...`, else cpu (the binaries' default).
sinklab_job_device() {
  local config=$1 device; shift
  device=$(sinklab_option_value device "$@") || device=${DEVICE:-$(sinklab_job_value "$config" device)}
  echo "${device:-cpu}"
}

# sinklab_job_out_dir CONFIG FLAGS...: where the job writes: --out-dir among FLAGS, else OUT_DIR, else the
# job file's out-dir (every file under jobs/pretrain and jobs/sft sets one), else results/<file name>.
# So `CONFIG=<another job> sbatch` never resumes another run's checkpoints.
sinklab_job_out_dir() {
  local config=$1 out; shift
  if out=$(sinklab_option_value out-dir "$@"); then echo "$out"; return; fi
  out=${OUT_DIR:-$(sinklab_job_value "$config" out-dir)}
  echo "${out:-results/$(basename "$config" .ini)}"
}

# GPUs this node of the job has (0 without): SLURM_GPUS_ON_NODE, else SLURM_GPUS_PER_NODE ([type:]count).
sinklab_gpus_on_node() {
  local g=${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-0}}
  g=${g##*:}
  [[ $g =~ ^[0-9]+$ ]] || g=0
  echo "$g"
}

# ---------------------------------------------------------------------------------------------------
# Submitting: the resources a job file asks for (login node, before sbatch)

# sinklab_plan_job SCRIPT CONFIG [sbatch options] [-- trainer flags]: checks CONFIG and works out how to
# submit it with SCRIPT. Sets
#   PLAN_DEVICE     cpu | cuda (sinklab_job_device)
#   PLAN_RESOURCES  sbatch options from the job file, to go before the user's own (sbatch keeps an
#                   option's last value, so the user's win): the file's #SBATCH lines, then for cuda one
#                   rank per GPU, --gpus-per-node=G --ntasks-per-node=G, G = the last --gpus-per-node of
#                   the file's and the user's options (default 1). A CPU job asks for no GPUs.
#   PLAN_RANKS      nodes x tasks per node as sbatch will allocate them (script < file < user options)
#   PLAN_OUT_DIR    sinklab_job_out_dir
#   PLAN_SBATCH, PLAN_FLAGS  the user's sbatch options and trainer flags
# Refuses (one line naming the file, status 2) a file the binary does not accept (--dry-run with the
# trainer flags), a CPU job file that requests GPUs, and a global batch the ranks do not divide.
sinklab_plan_job() {
  local script=$1 config=$2; shift 2
  PLAN_SBATCH=(); PLAN_FLAGS=(); PLAN_RESOURCES=()
  local arg in_flags=0
  for arg in "$@"; do
    if [ $in_flags -eq 1 ]; then PLAN_FLAGS+=("$arg")
    elif [ "$arg" = "--" ]; then in_flags=1
    else PLAN_SBATCH+=("$arg"); fi
  done
  [ -f "$config" ] || { echo "slurm: $config: no such job file" >&2; return 2; }
  local text
  if ! text=$(SINKLAB_MPI=0 "$SINKLAB_BIN/$SINKLAB_APP" --config "$config" --dry-run "${PLAN_FLAGS[@]}" 2>&1); then
    echo "slurm: $config: not a valid job file: $(printf '%s\n' "$text" | sed '/^[[:space:]]*$/d' | tail -n 1)" >&2
    return 2
  fi
  PLAN_DEVICE=$(sinklab_job_device "$config" "${PLAN_FLAGS[@]}")
  PLAN_OUT_DIR=$(sinklab_job_out_dir "$config" "${PLAN_FLAGS[@]}")
  local file_opts script_opts
  mapfile -t file_opts < <(sinklab_sbatch_lines "$config")
  mapfile -t script_opts < <(sinklab_sbatch_lines "$script")
  PLAN_RESOURCES=("${file_opts[@]}")
  if [ "$PLAN_DEVICE" = cuda ]; then
    local g o
    g=$(sinklab_option_value gpus-per-node "${file_opts[@]}" "${PLAN_SBATCH[@]}") || g=1
    g=${g##*:}
    [[ $g =~ ^[1-9][0-9]*$ ]] || { echo "slurm: $config: device cuda needs --gpus-per-node >= 1 (got '$g')" >&2; return 2; }
    PLAN_RESOURCES=()
    for o in "${file_opts[@]}"; do [[ $o == --gpus-per-node=* ]] || PLAN_RESOURCES+=("$o"); done
    PLAN_RESOURCES+=(--gpus-per-node="$g" --ntasks-per-node="$g")
  else
    local o
    for o in "${file_opts[@]}"; do
      case "$o" in --gpus*|--gres*gpu*|-G*)
        echo "slurm: $config: device $PLAN_DEVICE but its #SBATCH lines ask for GPUs ($o): set device = cuda or drop it" >&2
        return 2 ;;
      esac
    done
  fi
  local all=("${script_opts[@]}" "${PLAN_RESOURCES[@]}" "${PLAN_SBATCH[@]}") nodes=1 tasks prev=""
  for arg in "${all[@]}"; do
    case "$arg" in --nodes=*) nodes=${arg#--nodes=} ;; -N?*) nodes=${arg#-N} ;; esac
    case "$prev" in --nodes|-N) nodes=$arg ;; esac
    prev=$arg
  done
  tasks=$(sinklab_option_value ntasks-per-node "${all[@]}") || tasks=1
  PLAN_RANKS=""
  if [[ $nodes =~ ^[0-9]+$ ]] && [[ $tasks =~ ^[0-9]+$ ]]; then PLAN_RANKS=$((nodes * tasks)); fi
  # The binary checked the batch on one rank; the job's ranks must divide it too (else it would fail
  # after waiting in the queue).
  local gbt ctx rows  # from the binary's effective configuration (`name = value` lines)
  gbt=$(printf '%s\n' "$text" | sed -n 's/^global-batch-tokens = //p')
  ctx=$(printf '%s\n' "$text" | sed -n 's/^context = //p')
  rows=$(printf '%s\n' "$text" | sed -n 's/^micro-batch-rows = //p')
  if [ -n "$PLAN_RANKS" ] && [[ $gbt$ctx$rows =~ ^[0-9]+$ ]] && [ $((gbt % (ctx * rows * PLAN_RANKS))) -ne 0 ]; then
    echo "slurm: $config: global-batch-tokens $gbt is not a multiple of context x micro-batch-rows x ranks = $ctx x $rows x $PLAN_RANKS ($nodes node(s) x $tasks rank(s)): change the job file or the resources" >&2
    return 2
  fi
  return 0
}

# sinklab_submit SCRIPT CONFIG [sbatch options] [-- trainer flags]: submits SCRIPT to run CONFIG with the
# resources it asks for (sinklab_plan_job); the job's log goes into its out-dir (slurm-<job id>.out).
sinklab_submit() {
  local script=$1 config=$2; shift 2
  sinklab_plan_job "$script" "$config" "$@" || return $?
  [ "${SINKLAB_DRY_RUN:-0}" = 1 ] || mkdir -p "$PLAN_OUT_DIR" || return 1
  echo "slurm: $config: device $PLAN_DEVICE, ${PLAN_RANKS:-?} rank(s), out-dir $PLAN_OUT_DIR"
  sinklab_run_or_print env CONFIG="$config" sbatch --output="$PLAN_OUT_DIR/slurm-%j.out" "${PLAN_RESOURCES[@]}" \
    "${PLAN_SBATCH[@]}" "$script" "${PLAN_FLAGS[@]}"
}

# ---------------------------------------------------------------------------------------------------
# Running: the srun layout from the job's allocation (inside the batch job)

# sinklab_launch WHAT DEVICE COMMAND...: COMMAND once per rank over the allocation.
#   cuda: one rank per GPU, --ntasks-per-node = the node's GPUs (the job must have as many tasks per
#         node: sinklab_submit asks for that), --gpus-per-task=1. --gpu-bind=none (SINKLAB_GPU_BIND
#         overrides) because the binaries take GPU <local rank> among those they see, or the only one
#         they see (parallel::World::local_gpu): every rank sees its node's GPUs and rank r of the node uses
#         GPU r; SINKLAB_GPU_BIND=closest binds one GPU to each rank instead. NCCL_DEBUG=WARN (NCCL's
#         errors in the log, not its info lines) and CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA numbers GPUs as
#         Slurm and nvidia-smi do) unless set; every other NCCL_* of the submitting shell reaches the
#         ranks (sbatch exports the environment). A rank that fails ends the others
#         (--kill-on-bad-exit) rather than leaving them blocked in a collective.
#   cpu:  one rank per task of the job as allocated (--ntasks-per-node, --cpus-per-task), no GPUs.
#   Both: --cpu-bind=cores (SINKLAB_CPU_BIND overrides), each rank's OpenMP threads on its own cores.
sinklab_launch() {
  local what=$1 device=$2; shift 2
  local nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}} gpus tasks
  gpus=$(sinklab_gpus_on_node)
  tasks=${SLURM_NTASKS_PER_NODE:-$(( ${SLURM_NTASKS:-1} / nodes ))}
  local layout=(--cpu-bind="${SINKLAB_CPU_BIND:-cores}")
  if [ "$device" = cuda ]; then
    if [ "$gpus" -eq 0 ]; then
      echo "slurm: $what: device cuda, but this job has no GPUs: submit the script with bash instead of sbatch (it asks for the job file's resources) or sbatch --gpus-per-node=G --ntasks-per-node=G" >&2
      return 2
    fi
    if [ "$tasks" != "$gpus" ]; then
      echo "slurm: $what: the job has $gpus GPU(s) but $tasks task(s) per node; one rank per GPU needs sbatch --ntasks-per-node=$gpus" >&2
      return 2
    fi
    layout=(--nodes="$nodes" --ntasks-per-node="$gpus" --gpus-per-task=1 --gpu-bind="${SINKLAB_GPU_BIND:-none}" "${layout[@]}")
    export NCCL_DEBUG=${NCCL_DEBUG:-WARN} CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER:-PCI_BUS_ID}
    echo "slurm: $nodes node(s) x $gpus GPU(s), one rank per GPU; NCCL_DEBUG=$NCCL_DEBUG CUDA_DEVICE_ORDER=$CUDA_DEVICE_ORDER"
  elif [ "$gpus" -gt 0 ]; then
    echo "slurm: warning: $what runs on the CPUs (device $device); the job's $gpus GPU(s) per node stay idle" >&2
  fi
  # The line in the log (and all that SINKLAB_DRY_RUN=1 does).
  printf 'slurm: launch:'; printf ' %q' "${SINKLAB_SRUN[@]}" "${layout[@]}" "$@"; printf '\n'
  [ "${SINKLAB_DRY_RUN:-0}" = 1 ] && return 0
  sinklab_srun "${layout[@]}" "$@"
}

# The binaries write a marker when all their work is done (sinklab-pretrain and sinklab-sft: OUT_DIR/DONE,
# "steps <reached> of <target>", removed by the trainer whenever a run starts or resumes; sinklab-survey:
# OUTPUT.done). Anything else after a clean exit means the job stopped on SIGUSR1/SIGTERM after saving
# its state: put the job back in the queue to continue.
sinklab_marker_says_finished() {
  local marker=$1 reached="" target=""
  [ -f "$marker" ] || return 1
  read -r _ reached _ target _ < <(grep -m1 '^steps [0-9]* of [0-9]*$' "$marker") || true
  # A marker without step counts (sinklab-survey's; older trainers' DONE) says finished by existing.
  [ -z "$target" ] || [ "$reached" -ge "$target" ]
}
sinklab_requeue_unless_marker() {
  local what=$1 marker=$2
  if sinklab_marker_says_finished "$marker"; then
    echo "slurm: $what finished"
  elif [ -n "${SLURM_JOB_ID:-}" ]; then
    [ -f "$marker" ] && echo "slurm: $marker says $(head -c 200 "$marker")"
    echo "slurm: $what not finished, requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
  fi
}
sinklab_requeue_unless_done() { sinklab_requeue_unless_marker "$1" "$1/DONE"; }

# sinklab_run_training CONFIG [trainer flags]: the training jobs (pretrain.sh, pretrain_1b.sh, an array
# task of pretrain_sweep.sh: sinklab-pretrain; sft.sh: sinklab-sft, the same loop). $SINKLAB_APP on CONFIG
# over the allocation (sinklab_launch, on the device sinklab_job_device says), resuming from the
# out-dir's newest checkpoint, requeued until OUT_DIR/DONE says the run reached its steps. The output directory is
# sinklab_job_out_dir's: the job file's out-dir unless OUT_DIR=... or --out-dir among the flags says otherwise.
sinklab_run_training() {
  local config=$1; shift
  [ -f "$config" ] || { echo "slurm: $config: no such job file" >&2; return 2; }
  local out_dir device
  out_dir=$(sinklab_job_out_dir "$config" "$@")
  sinklab_option_value out-dir "$@" >/dev/null || set -- --out-dir "$out_dir" "$@"
  device=$(sinklab_job_device "$config" "$@")
  sinklab_option_value device "$@" >/dev/null || set -- --device "$device" "$@"
  echo "slurm: $config -> $out_dir"
  sinklab_launch "$config" "$device" "$SINKLAB_BIN/$SINKLAB_APP" --config "$config" --resume "$@"
  local status=$?
  [ "${SINKLAB_DRY_RUN:-0}" = 1 ] && return $status
  [ $status -eq 0 ] && sinklab_requeue_unless_done "$out_dir"
  return $status
}

# The training scripts' body (pretrain.sh, pretrain_1b.sh, sft.sh): outside a Slurm job (a login node)
# submit SCRIPT with CONFIG's resources, [sbatch options] [-- trainer flags]; inside one (the batch job,
# or salloc) train there.
sinklab_submit_or_run() {
  local script=$1 config=$2; shift 2
  if [ -z "${SLURM_JOB_ID:-}" ]; then
    sinklab_submit "$script" "$config" "$@"
  else
    sinklab_run_training "$config" "$@"
  fi
}
