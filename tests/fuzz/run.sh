#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; build-fuzz/) and fuzzes each for FUZZ_SECONDS
# (default 15) from its committed seed corpus (tests/fuzz/corpus/<target>) and its regression cases
# (tests/fuzz/regressions/<target>: inputs that once crashed or hung, replayed first), then data_prep's
# GGUF reader the same way with atheris (tests/fuzz/fuzz_gguf.py). A crash, hang (> 10 s), leak or memory
# blow-up (> 2 GiB) fails the step; its input is saved under build-fuzz/artifacts/ and belongs in
# tests/fuzz/regressions/<target>/ once fixed. Prints executions and coverage per target.
#
#   bash tests/fuzz/run.sh                          # the CI step (run_all.sh)
#   FUZZ_SECONDS=600 bash tests/fuzz/run.sh         # a campaign; FUZZ_TARGETS="fuzz_shard" picks targets
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
seconds=${FUZZ_SECONDS:-15}
build=${FUZZ_BUILD_DIR:-build-fuzz}
targets=${FUZZ_TARGETS:-"$(cd tests/fuzz && ls fuzz_*.cpp fuzz_*.py | sed 's/\.[a-z]*$//' | tr '\n' ' ')"}

if ! command -v clang++ >/dev/null; then
  echo "tests/fuzz/run.sh: clang++ not found (env/apt-packages.txt installs clang)" >&2
  exit 1
fi
CC=clang CXX=clang++ cmake -S . -B "$build" -DSINKLAB_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build.log" 2>&1 \
  || { cat "$build.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" >> "$build.log" 2>&1 || { grep -E 'error' -A3 "$build.log" | head -40; exit 1; }

mkdir -p "$build/artifacts"
# The targets' scratch files (inputs written to disk for the readers), in memory, this run's own.
scratch=$(mktemp -d /dev/shm/sinklab-fuzz.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export SINKLAB_FUZZ_SCRATCH="$scratch"
failed=()
for t in $targets; do
  work="$build/corpus/$t"   # what the fuzzer adds to the seeds (kept between runs, never committed)
  mkdir -p "$work"
  regressions=()
  [ -d "tests/fuzz/regressions/$t" ] && regressions=("tests/fuzz/regressions/$t"/*)
  log="$build/$t.log"
  if [ -f "tests/fuzz/$t.py" ]; then
    run=(.venv/bin/python "tests/fuzz/$t.py")
  else
    run=("$build/bin/$t")
  fi
  # The regression cases first, each once; then fuzzing from the seeds and what earlier runs found.
  if [ ${#regressions[@]} -gt 0 ] && ! "${run[@]}" -timeout=10 -rss_limit_mb=2048 "${regressions[@]}" > "$log" 2>&1; then
    echo "fuzz: $t FAILED on a regression case (log: $log)"; tail -30 "$log"; failed+=("$t"); continue
  fi
  if ASAN_OPTIONS=detect_leaks=1 "${run[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -close_fd_mask=1 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
      "$work" "tests/fuzz/corpus/$t" >> "$log" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    cov=$(grep -oE '(DONE|pulse|NEW|REDUCE|INITED) +cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+)/cov \1 ft \2/')
    echo "fuzz: $t ok: ${execs:-?} executions in ${seconds} s, ${cov:-coverage ?}, corpus $(ls "$work" | wc -l) + $(ls "tests/fuzz/corpus/$t" | wc -l) seeds"
  else
    echo "fuzz: $t FAILED (log: $log; the input is under $build/artifacts/)"
    grep -E 'ERROR|SUMMARY|Uncaught|Traceback|Error:|runtime error' "$log" | head -10
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
