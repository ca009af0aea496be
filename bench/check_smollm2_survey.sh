#!/usr/bin/env bash
# SmolLM2-135M as the demo surveyed it (jobs/demo_smollm2.sh -> results/demo/survey.h5) against transformers'
# own GGUF loader and eager attention on the same tokens: bench/check_real_models_survey.py for the one model
# smollm2-135m (see there for how and with which tolerances). About 1.3 s per sequence on two busy cores.
#
#   [ORACLE_PYTHON=...] bench/check_smollm2_survey.sh [results/demo/survey.h5] [more flags of the .py]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
survey=${1:-$root/results/demo/survey.h5}
shift || true
exec bash "$root/bench/check_real_models_survey.sh" "$survey" \
  --model "smollm2-135m=$root/data/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$@"
