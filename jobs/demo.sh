#!/usr/bin/env bash
# The demo on the embedded default: builds the mini corpus (data_prep), pre-trains a tiny softmax
# LLaMA-style model on it with 2 MPI ranks, probes its checkpoint with natural, random and repeated-token
# inputs, prints the training curve with the sink metric and writes the report (report/demo/index.html).
# CPU only; a few minutes on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one core per rank

bash env/setup.sh
echo "== build"
cmake -S . -B build -DSINKLAB_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
cmake --build build -j"$(nproc)" --target sinklab-pretrain sinklab-probe sinklab-shard >> build.log 2>&1 || { tail -40 build.log; exit 1; }

echo "== mini corpus (data_prep)"
.venv/bin/python -m data_prep mini-corpus --out data/mini

echo "== pre-training a tiny softmax model (mpirun -np 2)"
rm -rf results/demo
mpirun -np 2 build/bin/sinklab-pretrain --config jobs/pretrain/tiny_cpu.ini --out-dir results/demo/softmax --run-name softmax

echo "== probing its final checkpoint"
for input in natural random repeat; do
  build/bin/sinklab-probe --checkpoint results/demo/softmax --data data/mini/valid.bin --input "$input" \
    --name tiny_softmax --out results/demo/probe.h5
done

echo "== summary"
.venv/bin/python -m analysis.summary results/demo/softmax/results.h5 results/demo/probe.h5

echo "== report (tables, figures, one HTML page)"
.venv/bin/python -m analysis.report results/demo/softmax/results.h5 results/demo/probe.h5 -o report/demo
