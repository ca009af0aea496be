#!/usr/bin/env bash
# Runs the CUDA backend's hand-written kernels on the CPU: every src/backend/cuda/*.cu (and src/parallel/nccl.cu)
# rewritten into C++ over a CPU model of the device (tests/gpu/emu: CUDA threads as cooperative fibers on
# one OS thread, barriers, warp shuffles, WMMA, shared memory, launch limits) and stand-ins for the
# libraries (cuBLAS/cuBLASLt, CUB's sort, cuDNN's SDPA graph, NCCL over MPI) that compute what each call's
# descriptors mean, under the unchanged gpu tests (tests/cpp/gpu/test_cuda_*.cpp: the CUDA op against the
# CPU op). A check of the kernels' logic and of the library calls' layouts for machines without a GPU; it
# says nothing about a GPU's numbers or speed (tests/cpp/gpu/README.md: what it checks and cannot see).
#
#   tests/gpu/emulate.sh                      build the emulated tests in the CPU build, run them all, then the
#                                             bf16 training step against the CPU and the step ledger's limits
#                                             (issue #53: tests/gpu/emu/check_training_step.py,
#                                             bench/run_step_ledger.sh --check)
#   tests/gpu/emulate.sh test_cuda_norms ...  only these (names of tests/cpp/gpu tests, test_grad_sync,
#                                             test_emu_standins, test_emu_ptx); gtest arguments after --
#   tests/gpu/emulate.sh --plant NAME         build NAME's planted bug (tests/gpu/emu/rewrite_cu.py), run its
#                                             test, and succeed only when the test FAILS (turns red)
#   tests/gpu/emulate.sh --plant A,B,...      these planted bugs; a table of the results
#   tests/gpu/emulate.sh --plant all          every planted bug
#   tests/gpu/emulate.sh --list               the planted bugs
#
# Needs the CPU build configured with the tests (build/, or SINKLAB_BUILD_DIR); builds its targets there
# (they are not part of `all`). JOBS (default 2) build jobs; everything runs niced, one OS thread per test.
# Exit status: 0 all passed (with --plant: every plant turned its test red), 1 otherwise, 2 no build.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SINKLAB_BUILD_DIR:-$root/build}
jobs=${JOBS:-2}
rewrite="$root/tests/gpu/emu/rewrite_cu.py"
bin="$build/emu/bin"
say() { echo "tests/gpu/emulate.sh: $*"; }
seconds_since() { local ms=$(( ($(date +%s%N) - $1) / 1000000 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

plant=""
tests=()
gtest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --plant) plant=${2:?--plant needs a name, names joined by commas, or all}; shift 2 ;;
    --list) python3 "$rewrite" --describe; exit 0 ;;
    --) shift; gtest_args=("$@"); break ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) tests+=("$1"); shift ;;
  esac
done

[ -f "$build/CMakeCache.txt" ] || { say "no CPU build at $build: configure it first (cmake -S . -B build -DSINKLAB_CUDA=OFF)"; exit 2; }
grep -q '^SINKLAB_HAVE_CUDA:.*=ON' "$build/CMakeCache.txt" 2>/dev/null && { say "$build is a CUDA build: the emulation needs a CPU one"; exit 2; }

build_targets() {  # build_targets <target>...: quiet unless it fails
  local log="$build/emu/build.log" args=()
  mkdir -p "$build/emu"
  for t in "$@"; do args+=(--target "$t"); done
  if ! nice cmake --build "$build" -j"$jobs" "${args[@]}" > "$log" 2>&1; then
    grep -E "error|Error" -A3 "$log" | head -40
    say "FAILED to build $*  (log: $log)"
    return 1
  fi
}

# Every test and every plant runs under both thread orders of the emulation (SINKLAB_EMU_SCHEDULE, see
# tests/gpu/emu/emu_runtime.cpp next_runnable): "block" lets every warp reach its next barrier before any
# goes past it, "warp" lets one warp run ahead of the others; each hides races the other shows.
schedules=(block warp)

# run_test <binary> <name> [gtest args...]: one emulated test binary (test_grad_sync under two MPI ranks,
# each rank with its own emulated device, and as one process) under each schedule; prints its time,
# returns its status.
run_test() {
  local exe=$1 name=$2; shift 2
  local start=$(date +%s%N) rc=0 log="$build/emu/$name.log"
  : > "$log"
  local schedule
  for schedule in "${schedules[@]}"; do
    echo "=== SINKLAB_EMU_SCHEDULE=$schedule" >> "$log"
    export SINKLAB_EMU_SCHEDULE=$schedule
    if [ "$name" = test_grad_sync ]; then
      local mpiexec
      mpiexec=$(command -v mpiexec || command -v mpirun) || { say "no mpiexec for test_grad_sync"; return 1; }
      { SINKLAB_EMU_DEVICES=2 nice "$mpiexec" -np 2 --oversubscribe "$exe" \
          --gtest_filter='GradientSync.OverNccl*' "$@" &&
        nice "$exe" --gtest_filter='GradientSync.OverNccl*' "$@"; } >> "$log" 2>&1 || rc=$?
    else
      nice "$exe" --gtest_brief=1 "$@" >> "$log" 2>&1 || rc=$?
    fi
  done
  unset SINKLAB_EMU_SCHEDULE
  local secs
  secs=$(seconds_since "$start")
  if [ $rc -eq 0 ]; then
    printf '  %-26s passed  %6s s  (%s)\n' "$name" "$secs" "$(grep -E '^\[  PASSED  \]' "$log" | tail -n1 | sed 's/\[  PASSED  \] //')"
  else
    printf '  %-26s FAILED  %6s s  (log: %s)\n' "$name" "$secs" "$log"
    grep -E '^\[  FAILED  \]|Failure|emu: ' "$log" | head -n 8 | sed 's/^/      /'
  fi
  return $rc
}

# ---- planted bugs ------------------------------------------------------------------------------------
if [ -n "$plant" ]; then
  mapfile -t rows < <(python3 "$rewrite" --filter)
  names=()
  for r in "${rows[@]}"; do names+=("${r%% *}"); done
  if [ "$plant" = all ]; then selected=("${names[@]}"); else IFS=, read -r -a selected <<< "$plant"; fi
  targets=()
  for p in "${selected[@]}"; do
    printf '%s\n' "${names[@]}" | grep -qx "$p" || { say "no planted bug named $p (--list)"; exit 1; }
    targets+=("emu_plant_$p")
  done
  say "building ${#targets[@]} planted build(s)"
  declare -A unbuilt=()  # (a stale binary from an earlier build must not stand in for one that failed now)
  if ! build_targets "${targets[@]}" > /dev/null; then  # then one by one, to name the ones that do not build
    for t in "${targets[@]}"; do
      build_targets "$t" || { unbuilt[$t]=1; say "cannot build $t: its row below says DID NOT BUILD"; }
    done
  fi
  status=0
  printf '  %-22s %-26s %-5s %8s  %s\n' plant test result time "first sign"
  for p in "${selected[@]}"; do
    row=$(printf '%s\n' "${rows[@]}" | grep "^$p ")
    read -r _ test filter <<< "$row"
    if [ -n "${unbuilt[emu_plant_$p]:-}" ] || [ ! -x "$bin/emu_plant_$p" ]; then
      printf '  %-22s %-26s %-5s %8s  %s\n' "$p" "$test" "-" "" "DID NOT BUILD"
      status=1
      continue
    fi
    start=$(date +%s%N)
    log="$build/emu/plant_$p.log"
    : > "$log"
    rc=0
    for schedule in "${schedules[@]}"; do  # red under either order counts (the other may hide it)
      echo "=== SINKLAB_EMU_SCHEDULE=$schedule" >> "$log"
      if [ "$test" = test_grad_sync ]; then
        SINKLAB_EMU_SCHEDULE=$schedule SINKLAB_EMU_DEVICES=2 nice "$(command -v mpiexec)" -np 2 --oversubscribe \
          "$bin/emu_plant_$p" --gtest_filter="$filter" >> "$log" 2>&1 || rc=1
      else
        SINKLAB_EMU_SCHEDULE=$schedule nice timeout 600 "$bin/emu_plant_$p" --gtest_brief=1 --gtest_filter="$filter" \
          >> "$log" 2>&1 || rc=1
      fi
      [ $rc -ne 0 ] && break
    done
    secs=$(seconds_since "$start")
    if [ $rc -ne 0 ]; then
      first=$(grep -m1 -E 'Failure|emu: |what\(\)|rror' "$log" | cut -c1-90)
      printf '  %-22s %-26s %-5s %6s s  %s\n' "$p" "$test" RED "$secs" "$first"
    else
      printf '  %-22s %-26s %-5s %6s s  THE PLANTED BUG WAS NOT CAUGHT\n' "$p" "$test" green "$secs"
      status=1
    fi
  done
  [ $status -eq 0 ] && say "every planted bug turned its test red" || say "FAILED: a planted bug went unnoticed"
  exit $status
fi

# ---- the emulated tests --------------------------------------------------------------------------------
explicit_tests=("${tests[@]}")
if [ ${#tests[@]} -eq 0 ]; then
  for f in "$root"/tests/cpp/gpu/test_cuda_*.cpp; do
    n=$(basename "$f" .cpp)
    [ "$n" = test_cuda_pretrain ] && continue  # runs the product's pretrain binary: not emulated
    tests+=("$n")
  done
  tests+=(test_grad_sync test_emu_standins test_emu_ptx)
fi
targets=()
for t in "${tests[@]}"; do targets+=("emu_$t"); done
start_all=$(date +%s)
say "building the emulated tests (${#targets[@]})"
build_targets "${targets[@]}" || exit 1
built=$(date +%s)
say "built in $((built - start_all)) s; running"
status=0
for t in "${tests[@]}"; do
  run_test "$bin/emu_$t" "$t" "${gtest_args[@]}" || status=1
done
say "ran in $(( $(date +%s) - built )) s"

# ---- the training step (issue #53), when the whole set ran: sinklab-pretrain over the emulated GPU --------
if [ ${#explicit_tests[@]} -eq 0 ]; then
  say "the bf16 training step: emu_sinklab_pretrain against the CPU (tests/gpu/emu/check_training_step.py)"
  if build_targets emu_sinklab_pretrain sinklab-pretrain; then
    py="$root/.venv/bin/python"; [ -x "$py" ] || py=python3
    step_start=$(date +%s%N)
    "$py" "$root/tests/gpu/emu/check_training_step.py" "$build" > "$build/emu/check_training_step.log" 2>&1 || status=1
    sed 's/^/  /' "$build/emu/check_training_step.log"
    say "  ($(seconds_since "$step_start") s)"
    say "the step ledger of the 60M and 1B jobs against issue #53's limits (bench/run_step_ledger.sh --check)"
    SINKLAB_BUILD_DIR="$build" PYTHON="$py" bash "$root/bench/run_step_ledger.sh" --check > "$build/emu/step_ledger.log" 2>&1 \
      || status=1
    grep -E '^== |^step model|^  host syncs|MISSED' "$build/emu/step_ledger.log" | sed 's/^/  /'
  else
    status=1
  fi
fi
[ $status -eq 0 ] && say "ok: every emulated test passed" || say "FAILED"
exit $status
