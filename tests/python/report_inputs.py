"""Real results files for the report's tests, written by sinklab's binaries at a tiny size: a demo-shaped
set (demo_results: what jobs/demo.sh's report reads, in seconds) and the Bigram-Backcopy runs of the study's
job files (bbm_runs).

demo_results(d, corpus) writes, under d:
  bbm/                       a data_prep bbm build of 32-character sequences
  bbm_softmax, bbm_sigmoid   BBM runs of jobs/pretrain/bbm_cpu.ini and bbm/sigmoid.ini (run-names bbm.softmax,
                             bbm.sigmoid)
  softmax_bos, sigmoid_bos   pre-training runs on the conftest corpus whose rows start with token BOS
                             (--fixed-token-position 1), softmax and sigmoid without normalisation
  probe.h5                   sinklab-probe of softmax_bos's checkpoint on natural / random / repeat inputs,
                             fed BOS first as it was trained (model tiny_softmax_bos)
  sft_softmax                sinklab-sft from softmax_bos's checkpoint (run sft_softmax)
  survey.h5, streaming.h5    sinklab-survey of the same checkpoint (tiny_softmax_bos_hf) and of an HF model
                             (tests/fixtures/hf/llama_gqa as tiny_llama) at T = 8 (natural, random, repeat),
                             and of tiny_llama at T = 16 with two window ablations (natural): as the demo
                             surveys its checkpoints and SmolLM2 at T = 64 and SmolLM2 again at T = 1024
and returns the results files in the order the demo's report reads them.
"""
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", REPO_ROOT / "build" / "bin"))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
BOS = 63            # the first token of every row of the *_bos runs (the conftest corpus: ids 0..63)
VOCAB = 64
BBM_CONTEXT = 32
DOMAINS = ("pile_cc", "arxiv")


def binaries_missing():
    """The binaries demo_results needs that $SINKLAB_BIN_DIR lacks."""
    return [b for b in ("sinklab-pretrain", "sinklab-probe", "sinklab-sft", "sinklab-survey") if not (BIN / b).exists()]


def run(cmd, timeout=300):
    proc = subprocess.run(list(map(str, cmd)), env=ENV, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def _parallel(commands):
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run, commands))


def bbm_build(out, seq_len=BBM_CONTEXT, train=400):
    from data_prep.__main__ import main
    assert main(["bbm", "--out", str(out), "--seq-len", str(seq_len), "--train-sequences", str(train),
                 "--valid-sequences", "40", "--survey-n", "0"]) == 0
    return out


def bbm_command(job, data, out, steps=30, extra=()):
    """sinklab-pretrain of a Bigram-Backcopy job file (jobs/pretrain/<job>) at a tiny size on `data`."""
    return [BIN / "sinklab-pretrain", "--config", REPO_ROOT / "jobs" / "pretrain" / job, "--vocab-size=85",
            f"--context={BBM_CONTEXT}", "--d-model=32", "--ffn-hidden=64", f"--steps={steps}",
            f"--global-batch-tokens={8 * BBM_CONTEXT}", "--micro-batch-rows=8", "--eval-every=10",
            "--eval-every-after=off", "--eval-rows=16", "--probe-sequences=8", f"--probe-length={BBM_CONTEXT}",
            "--checkpoint-every=0", "--log-every=10", "--device=cpu", f"--train-data={data / 'train.bin'}",
            f"--valid-data={data / 'valid.bin'}", f"--bbm-meta={data / 'bbm.json'}", f"--out-dir={out}", *extra]


def _text_run(corpus, out, name, *flags):
    return [BIN / "sinklab-pretrain", f"--vocab-size={VOCAB}", "--d-model=32", "--n-layers=2", "--n-heads=2",
            "--ffn-hidden=64", "--context=16", f"--train-data={corpus / 'train.bin'}",
            f"--valid-data={corpus / 'valid.bin'}", "--steps=30", "--global-batch-tokens=128", "--micro-batch-rows=4",
            "--lr=3e-3", "--eval-every=10", "--eval-rows=8", "--probe-sequences=8", "--probe-length=12",
            "--checkpoint-every=30", "--log-every=10", f"--fixed-token-position=1", f"--fixed-token-id={BOS}",
            f"--out-dir={out}", f"--run-name={name}", *flags]


def _survey_inputs(path, T, seed):
    """A survey-inputs file (data_prep's layout: /<domain>/tokens int32 [n, T]) of the corpus's progressions,
    no prefix token."""
    import h5py
    from conftest import _synthetic_documents
    docs = [d for d in _synthetic_documents(200, 20 + seed) if len(d) >= T]
    with h5py.File(path, "w") as f:
        f.attrs["T"] = T
        f.attrs["prefix_id"] = -1
        f.attrs["tokenizer_sha256"] = "0" * 64
        for k, domain in enumerate(DOMAINS):
            f.create_dataset(f"{domain}/tokens", data=np.array([x[:T] for x in docs[k * 8:(k + 1) * 8]], np.int32))


def demo_results(d, corpus):
    d = Path(d)
    data = bbm_build(d / "bbm")
    _parallel([bbm_command("bbm_cpu.ini", data, d / "bbm_softmax"),
               bbm_command("bbm/sigmoid.ini", data, d / "bbm_sigmoid")])
    _parallel([_text_run(corpus, d / "softmax_bos", "softmax_bos"),
               _text_run(corpus, d / "sigmoid_bos", "sigmoid_bos", "--attn-sim=sigmoid", "--attn-norm=one")])
    step = sorted((d / "softmax_bos" / "checkpoints").glob("step_*"))[-1]
    for inp in ("natural", "random", "repeat"):
        run([BIN / "sinklab-probe", "--checkpoint", d / "softmax_bos", "--data", corpus / "valid.bin", "--input", inp,
             "--sequences", "8", "--length", "12", "--max-k", "4", "--batch", "4", "--fixed-token-position", "1",
             "--fixed-token-id", str(BOS), "--name", "tiny_softmax_bos", "--out", d / "probe.h5"])
    from test_sft import write_sft_rows
    write_sft_rows(d / "chat.h5", 200, 3, 16)
    sft = [BIN / "sinklab-sft", f"--init-from={d / 'softmax_bos'}", f"--sft-data={d / 'chat.h5'}",
           f"--valid-data={corpus / 'valid.bin'}", "--steps=10", "--global-batch-tokens=128", "--micro-batch-rows=4",
           "--lr=1e-3", "--eval-every=5", "--eval-rows=8", "--probe-sequences=8", "--probe-length=12",
           "--checkpoint-every=0", "--log-every=5", f"--out-dir={d / 'sft_softmax'}", "--run-name=sft_softmax"]
    for T, seed in ((8, 0), (16, 1)):
        _survey_inputs(d / f"inputs_T{T}.h5", T, seed)
    common = ["--domains", ",".join(DOMAINS), "--n-seq", "4", "--max-k", "4", "--batch", "4", "--interventions", "none"]
    llama = REPO_ROOT / "tests" / "fixtures" / "hf" / "llama_gqa"
    survey = [BIN / "sinklab-survey", "--model", f"tiny_softmax_bos_hf {step} inputs={d / 'inputs_T8.h5'}",
              "--model", f"tiny_llama {llama} inputs={d / 'inputs_T8.h5'}", "--inputs", "natural,random,repeat",
              "--seq-len", "8", *common, "--qk-maps", "0:0", "--attention-maps", "0:0", "--output", d / "survey.h5"]
    streaming = [BIN / "sinklab-survey", "--model", f"tiny_llama {llama} inputs={d / 'inputs_T16.h5'}", "--inputs",
                 "natural", "--seq-len", "16", *common, "--ablations", "window:4,window_sinks:3:1",
                 "--output", d / "streaming.h5"]
    _parallel([sft, survey])
    run(streaming)
    return [d / "bbm_softmax" / "results.h5", d / "bbm_sigmoid" / "results.h5", d / "softmax_bos" / "results.h5",
            d / "sigmoid_bos" / "results.h5", d / "sft_softmax" / "results.h5", d / "probe.h5", d / "survey.h5",
            d / "streaming.h5"]
