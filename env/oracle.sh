#!/usr/bin/env bash
# Installs the test-time oracles (torch, transformers; env/requirements-oracle.txt) into .venv-oracle
# on demand. Only golden regeneration and benchmarks need it; CI does not. Several GB on first run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-oracle"
stamp="$venv/.requirements.sha"
want_sha=$(sha256sum "$root/env/requirements-oracle.txt" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want_sha" ]; then
  echo "env/oracle.sh: installing the oracle environment into .venv-oracle (torch is large)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/env/requirements-oracle.txt"
  echo "$want_sha" > "$stamp"
fi
