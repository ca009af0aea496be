#!/usr/bin/env bash
# The demo on the embedded default: builds the mini corpus (data_prep), pre-trains three tiny LLaMA-style
# models on it with 2 MPI ranks each, same size, data and schedule -- softmax attention on sequences that
# start with the tokenizer's BOS (softmax_bos: --fixed-token-position 1), sigmoid attention without
# normalisation on the same sequences (sigmoid_bos: the paper's sink-free operation, Sec. 7.4), and
# softmax on sequences that start anywhere in the text (softmax) -- probes the checkpoints with natural,
# random and repeated-token inputs, prints their valid loss, Sink_1^eps and mean alpha_1 against its
# uniform baseline side by side over training, fine-tunes the two BOS-first models for 30 steps on
# generated chat (sinklab-sft, jobs/sft/tiny_cpu_*.ini: loss and grad norm curves, the monitor's events,
# the sink before and after; paper App. D), surveys two checkpoints as HF-format models with
# sinklab-survey (mpirun -np 2; named tiny_<model>_hf, so that the report keeps the survey's rows apart
# from the probe's tiny_<model>), then
# surveys a real pretrained model, SmolLM2-135M (jobs/demo_smollm2.sh), and writes the report
# (report/demo/index.html). CPU only. SINKLAB_BUILD_DIR picks the build directory (default build).
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
cmake --build "$build" -j"$(nproc)" --target sinklab-pretrain sinklab-probe sinklab-shard sinklab-survey sinklab-sft >> build.log 2>&1 || { tail -40 build.log; exit 1; }

echo "== mini corpus (data_prep)"
.venv/bin/python -m data_prep mini-corpus --out data/mini

rm -rf results/demo
# The mini corpus tokenizer's BOS: every training sequence of the *_bos runs starts with it, and their
# evaluations also probe inputs that start with it (eval/alpha_k_intervened), where a sink can form.
bos_id=$(.venv/bin/python -c "import json; print(next(t['id'] for t in json.load(open('data/mini/tokenizer/tokenizer.json'))['added_tokens'] if t['content'] == '<|bos|>'))")
bos=(--fixed-token-position 1 --fixed-token-id "$bos_id")
echo "== pre-training a tiny softmax model on sequences that start with BOS (token $bos_id) (mpirun -np 2)"
mpirun -np 2 "$build/bin/sinklab-pretrain" --config jobs/pretrain/tiny_cpu.ini "${bos[@]}" \
  --out-dir results/demo/softmax_bos --run-name softmax_bos

echo "== the same with sigmoid attention without normalisation (mpirun -np 2)"
mpirun -np 2 "$build/bin/sinklab-pretrain" --config jobs/pretrain/tiny_cpu.ini "${bos[@]}" --attn-sim sigmoid \
  --attn-norm one --out-dir results/demo/sigmoid_bos --run-name sigmoid_bos

echo "== softmax again, on sequences that start anywhere in the text (no fixed first token) (mpirun -np 2)"
mpirun -np 2 "$build/bin/sinklab-pretrain" --config jobs/pretrain/tiny_cpu.ini --out-dir results/demo/softmax \
  --run-name softmax

echo "== probing the final checkpoints (the *_bos models on inputs that start with BOS, as they were trained)"
for model in softmax_bos sigmoid_bos softmax; do
  with_bos=()
  [[ $model == *_bos ]] && with_bos=("${bos[@]}")
  for input in natural random repeat; do
    "$build/bin/sinklab-probe" --checkpoint "results/demo/$model" --data data/mini/valid.bin --input "$input" \
      "${with_bos[@]}" --name "tiny_$model" --out results/demo/probe.h5
  done
done

echo "== summary"
.venv/bin/python -m analysis.summary results/demo/probe.h5
echo
echo "== softmax vs sigmoid without normalisation (both BOS-first) vs softmax without BOS, over training"
runs=(results/demo/softmax_bos/results.h5 results/demo/sigmoid_bos/results.h5 results/demo/softmax/results.h5)
.venv/bin/python -m analysis.compare "${runs[@]}"

echo "== fine-tuning the two BOS-first models on generated arithmetic chat (data_prep chat-demo + sft; sinklab-sft, mpirun -np 2)"
.venv/bin/python -m data_prep chat-demo --out data/mini/chat_demo.jsonl --n 2000 --seed 0
.venv/bin/python -m data_prep sft --input data/mini/chat_demo.jsonl --model data/mini/tokenizer --context 64 \
  --out data/mini/chat_demo_sft.h5
for model in softmax sigmoid; do
  mpirun -np 2 "$build/bin/sinklab-sft" --config "jobs/sft/tiny_cpu_$model.ini"
done
.venv/bin/python -m analysis.compare results/demo/sft_softmax/results.h5 results/demo/sft_sigmoid/results.h5

echo "== surveying both checkpoints as HF-format models tiny_{softmax,sigmoid}_hf (sinklab-survey, mpirun -np 2)"
domains=$(.venv/bin/python -c "import h5py; print(','.join(sorted(h5py.File('data/mini/survey_inputs.h5').keys())))")
survey_models=()
for model in softmax_bos sigmoid_bos; do
  step_dir=$(ls -d "results/demo/$model"/checkpoints/step_* | sort | tail -1)
  survey_models+=(--model "tiny_${model}_hf $root/$step_dir inputs=$root/data/mini/survey_inputs.h5")
done
mpirun -np 2 "$build/bin/sinklab-survey" "${survey_models[@]}" --inputs natural,random,repeat --domains "$domains" \
  --n-seq 32 \
  --seq-len 64 --max-k 8 --batch 8 --qk-maps 0:0,-1:0 --attention-maps -1:0 --output results/demo/survey.h5

if [ -x jobs/demo_smollm2.sh ] || [ -f jobs/demo_smollm2.sh ]; then
  echo "== a real pretrained model: SmolLM2-135M (jobs/demo_smollm2.sh)"
  SINKLAB_BUILD_DIR="$build" bash jobs/demo_smollm2.sh
fi

echo "== report (tables, figures, one HTML page)"
.venv/bin/python -m analysis.report "${runs[@]}" results/demo/sft_softmax/results.h5 results/demo/sft_sigmoid/results.h5 \
  results/demo/probe.h5 results/demo/survey.h5 $([ -f results/demo/streaming.h5 ] && echo results/demo/streaming.h5) \
  -o report/demo
echo "report: report/demo/index.html (mean alpha_1 against its uniform baseline: report/demo/figures/runs_mean_alpha1.png)"
elapsed=$((SECONDS - demo_start))
echo "demo: done in $((elapsed / 60)) min $((elapsed % 60)) s (installs included; budget 20 min on a 2-core machine)"
