#!/usr/bin/env bash
# A sinklab-pretrain run and its PyTorch twin (bench/twin/replay.py), compared (issue #25, long-run
# equivalence): sinklab trains with --checkpoint-at-start --record-batches, then the twin starts from the
# step-0 weights, replays the recorded rows step by step and evaluates at the same steps; prints the
# per-evaluation table, the largest differences and PASS/FAIL (loss within 1 % relative, alpha_1 and
# the first-token attention within 0.02 absolute), and writes OUT_DIR/twin_<dtype>.json.
#
#   bench/twin/run_twin.sh bbm  [OUT_DIR] [extra sinklab-pretrain flags]   the BBM softmax cheap run
#   bench/twin/run_twin.sh demo [OUT_DIR] [extra flags]                    the demo's softmax_bos run
#   bench/twin/run_twin.sh run OUT_DIR [sinklab-pretrain flags]            any run (give --out-dir-free flags)
#   bench/twin/run_twin.sh replay OUT_DIR                                  only the twin, on an existing run
#
# Environment: BUILD_DIR (default build), TWIN_DTYPE (float32; float64 separates float chaos from a
# difference in semantics), NP (MPI ranks; demo: 2), OMP_NUM_THREADS (bbm: 2; demo: 1 per rank),
# TWIN_THREADS (torch threads, default 2). Run from anywhere; data paths are relative to the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
build=${BUILD_DIR:-build}
dtype=${TWIN_DTYPE:-float32}
py=.venv-oracle/bin/python
mode=${1:?usage: run_twin.sh bbm|demo|run|replay [OUT_DIR] [flags]}
shift
bash env/oracle.sh

# The run's own flags: the step-0 weights kept (no checkpoint deleted), the rows of every step recorded.
replay_flags=(--checkpoint-at-start --record-batches --keep-checkpoints 1000)

pretrain() {  # pretrain NP OUT_DIR flags...
  local np=$1 out=$2
  shift 2
  rm -rf "$out"
  local cmd=("$build/bin/sinklab-pretrain" "$@" "${replay_flags[@]}" --out-dir "$out")
  if [ "$np" -gt 1 ]; then cmd=(mpirun -np "$np" "${cmd[@]}"); fi
  echo "== sinklab: OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} ${cmd[*]}"
  local t0=$SECONDS
  "${cmd[@]}" 2>&1 | grep -v "^step .*ETA" || true
  [ -f "$out/DONE" ] || { echo "run_twin.sh: sinklab-pretrain did not finish ($out/DONE missing)" >&2; exit 1; }
  echo "== sinklab: $((SECONDS - t0)) s"
}

replay() {  # replay OUT_DIR
  echo "== twin: $py bench/twin/replay.py $1 --dtype $dtype --threads ${TWIN_THREADS:-2} --json $1/twin_$dtype.json"
  OMP_NUM_THREADS=${TWIN_THREADS:-2} "$py" bench/twin/replay.py "$1" --dtype "$dtype" --threads "${TWIN_THREADS:-2}" \
    --json "$1/twin_$dtype.json"
}

case $mode in
  bbm)
    out=${1:-results/twin/bbm_softmax}
    shift || true
    [ -f data/bbm/bbm.json ] || .venv/bin/python -m data_prep bbm --out data/bbm
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
    # The BBM softmax run at the cheap setting (jobs/pretrain/bbm_cpu.ini: Guo et al.'s 1-layer 1-head model,
    # N(0,1) embeddings, 128 rows x 256 per step, lr 2e-3 constant) for 400 steps instead of 150.
    pretrain "${NP:-1}" "$out" --config jobs/pretrain/bbm_cpu.ini --steps 400 --log-every 50 \
      --run-name bbm_softmax "$@"
    replay "$out"
    ;;
  demo)
    out=${1:-results/twin/demo_softmax_bos}
    shift || true
    [ -f data/mini/train.bin ] || .venv/bin/python -m data_prep mini-corpus --out data/mini
    bos_id=$(.venv/bin/python -c "import json; print(next(t['id'] for t in json.load(open('data/mini/tokenizer/tokenizer.json'))['added_tokens'] if t['content'] == '<|bos|>'))")
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    # jobs/demo.sh's softmax_bos run: tiny_cpu.ini with the BOS at position 1 of every training row, 2 ranks.
    pretrain "${NP:-2}" "$out" --config jobs/pretrain/tiny_cpu.ini --fixed-token-position 1 --fixed-token-id "$bos_id" \
      --run-name softmax_bos "$@"
    replay "$out"
    ;;
  run)
    out=${1:?run_twin.sh run OUT_DIR [flags]}
    shift
    pretrain "${NP:-1}" "$out" "$@"
    replay "$out"
    ;;
  replay)
    replay "${1:?run_twin.sh replay OUT_DIR}"
    ;;
  *)
    echo "run_twin.sh: unknown mode '$mode' (bbm, demo, run, replay)" >&2
    exit 2
    ;;
esac
