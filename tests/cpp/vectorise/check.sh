#!/usr/bin/env bash
# Compiles loops.cpp with the compiler and flags sinklab's library is built with and checks that GCC
# reports a vectorised loop (-fopt-info-vec: GCC only; CMake adds the test for GCC builds) inside every
# function marked "must vectorise", on a line of its loop (after its "#pragma omp simd" line, whose own
# reports are the reduction's set-up loops, up to the function's closing brace in column 0).
#   check.sh <source dir> <g++> <flags...>
set -euo pipefail
src=$1; cxx=$2; shift 2
here="$src/tests/cpp/vectorise"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
"$cxx" "$@" -I "$src/src" -c "$here/loops.cpp" -o "$out/loops.o" -fopt-info-vec-optimized="$out/report.txt"
failed=0
while IFS=: read -r first _; do
  pragma=$(awk -v f="$first" 'NR > f && /#pragma omp simd/ { print NR; exit }' "$here/loops.cpp")
  last=$(awk -v f="$first" 'NR > f && /^}/ { print NR; exit }' "$here/loops.cpp")
  name=$(sed -n "${first}p" "$here/loops.cpp" | sed 's/(.*//; s/.* //')
  if awk -F: -v f="$pragma" -v l="$last" '$2 > f && $2 <= l && /optimized: loop vectorized/ { ok = 1 }
      END { exit !ok }' "$out/report.txt"; then
    echo "$name: vectorised"
  else
    echo "$name (loops.cpp:$first): NOT vectorised"; failed=1
  fi
done < <(grep -n "must vectorise" "$here/loops.cpp" | grep -v '^[0-9]*:// ')
exit $failed
