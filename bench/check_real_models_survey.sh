#!/usr/bin/env bash
# The real models as sinklab-survey measured them (jobs/survey/real_models.ini -> results/survey/real_models.h5,
# or the demo's results/demo/survey.h5) against transformers' own GGUF loader and eager attention on the same
# tokens: loss, alpha[L,H,K], Sink_k^eps (bench/check_real_models_survey.py says how and with which
# tolerances). Installs the oracle environment (.venv-oracle, torch + transformers + gguf) on first use,
# unless ORACLE_PYTHON names an interpreter that has them.
#
#   [ORACLE_PYTHON=...] bench/check_real_models_survey.sh [results/survey/real_models.h5] [more flags of the .py]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
survey=${1:-$root/results/survey/real_models.h5}
shift || true
py=${ORACLE_PYTHON:-}
if [ -z "$py" ]; then
  bash "$root/env/oracle.sh"
  py="$root/.venv-oracle/bin/python"
fi
exec "$py" "$root/bench/check_real_models_survey.py" "$survey" "$@"
