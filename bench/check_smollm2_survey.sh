#!/usr/bin/env bash
# SmolLM2-135M as sinklab-survey measured it (jobs/demo_smollm2.sh -> results/demo/survey.h5) against
# transformers' own GGUF loader and eager attention on the same tokens: loss, alpha[L,H,K], Sink_k^eps
# (bench/check_smollm2_survey.py says how and with which tolerances). Installs the oracle environment
# (.venv-oracle, torch + transformers + gguf) on first use, unless ORACLE_PYTHON names an interpreter
# that has them. About 1.3 s per sequence on two busy cores.
#
#   [ORACLE_PYTHON=...] bench/check_smollm2_survey.sh [results/demo/survey.h5] [more flags of the .py]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
survey=${1:-$root/results/demo/survey.h5}
shift || true
py=${ORACLE_PYTHON:-}
if [ -z "$py" ]; then
  bash "$root/env/oracle.sh"
  py="$root/.venv-oracle/bin/python"
fi
exec "$py" "$root/bench/check_smollm2_survey.py" "$survey" "$@"
