#!/usr/bin/env bash
# The demo on the embedded default: a sink emerges in sinklab's own training, the paper's sink-free
# variant trained on the same data has none, and a real pretrained model has one.
#   1. data_prep bbm: the Bigram-Backcopy task of Guo et al. 2024 (a character-level text task in which a
#      transformer learns to copy after trigger characters; data_prep/README.md) from a text Debian ships.
#   2. Pre-trains Guo's one-layer model on it twice with 2 MPI ranks, at the CPU setting of
#      jobs/pretrain/bbm_cpu.ini (150 steps): softmax attention, where the non-trigger queries learn to park
#      their attention on BOS (a sink emerges in a few minutes), and sigmoid attention without
#      normalisation (jobs/pretrain/bbm/sigmoid.ini, the paper's sink-free operation, Sec. 7.4); prints
#      both side by side over training (analysis.compare).
#   3. Surveys a real pretrained model, SmolLM2-135M (jobs/demo_smollm2.sh: the mini corpus's 17 domains,
#      random and repeated tokens; StreamingLLM's window experiment), and writes the report
#      (report/demo/index.html), whose first section is the sink's emergence.
# CPU only. SINKLAB_BUILD_DIR picks the build directory (default build). The demo of earlier versions (tiny
# real-text models, their fine-tuning) no longer fits the budget on every CPU: jobs/pretrain/tiny_cpu.ini and
# jobs/sft/tiny_cpu_*.ini run them (README, "sinklab-sft").
set -euo pipefail
demo_start=$SECONDS
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one core per rank

bash env/setup.sh
echo "== build"
build=${SINKLAB_BUILD_DIR:-build}
cmake -S . -B "$build" -DSINKLAB_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
cmake --build "$build" -j"$(nproc)" --target sinklab-pretrain sinklab-probe sinklab-shard sinklab-survey >> build.log 2>&1 || { tail -40 build.log; exit 1; }

echo "== the Bigram-Backcopy task (data_prep bbm) and the mini corpus (data_prep mini-corpus, for SmolLM2)"
.venv/bin/python -m data_prep bbm --out data/bbm
.venv/bin/python -m data_prep mini-corpus --out data/mini

rm -rf results/demo
echo "== pre-training Guo's one-layer model on Bigram-Backcopy, softmax attention (mpirun -np 2)"
mpirun -np 2 "$build/bin/sinklab-pretrain" --config jobs/pretrain/bbm_cpu.ini --out-dir results/demo/bbm_softmax

echo "== the same with sigmoid attention without normalisation (mpirun -np 2)"
mpirun -np 2 "$build/bin/sinklab-pretrain" --config jobs/pretrain/bbm/sigmoid.ini --out-dir results/demo/bbm_sigmoid

echo "== softmax vs sigmoid without normalisation, over training (BOS attention of the non-trigger queries)"
runs=(results/demo/bbm_softmax/results.h5 results/demo/bbm_sigmoid/results.h5)
.venv/bin/python -m analysis.compare "${runs[@]}"

if [ -x jobs/demo_smollm2.sh ] || [ -f jobs/demo_smollm2.sh ]; then
  echo "== a real pretrained model: SmolLM2-135M (jobs/demo_smollm2.sh)"
  SINKLAB_BUILD_DIR="$build" bash jobs/demo_smollm2.sh
fi

echo "== report (tables, figures, one HTML page)"
.venv/bin/python -m analysis.report "${runs[@]}" results/demo/survey.h5 \
  $([ -f results/demo/streaming.h5 ] && echo results/demo/streaming.h5) -o report/demo
echo "report: report/demo/index.html (the sink's emergence first: report/demo/figures/bbm_emergence.png)"
elapsed=$((SECONDS - demo_start))
echo "demo: done in $((elapsed / 60)) min $((elapsed % 60)) s (installs included; budget 20 min on a 2-core machine)"
