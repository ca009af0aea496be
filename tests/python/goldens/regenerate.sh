#!/usr/bin/env bash
# Regenerates every golden file with the pinned PyTorch oracle (env/requirements-oracle.txt).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bash "$root/env/oracle.sh"
mkdir -p "$root/tests/golden"
for gen in "$root"/tests/python/goldens/gen_*.py; do
  echo "regenerate: $(basename "$gen")"
  "$root/.venv-oracle/bin/python" "$gen" "$root/tests/golden"
done
