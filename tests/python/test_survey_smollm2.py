"""SmolLM2-135M-Instruct, the real pretrained model of the demo, end to end without torch: the GGUF file
env/setup.sh fetches -> data_prep gguf-import -> sinklab-survey (natural text through the imported
tokenizer, random and repeated tokens; 2 sequences of 64 tokens each) -> the results file holds the
next-token loss, alpha[L,H,K], Sink, the tokens measured and the provenance attributes of the import.

The numbers are checked against REFERENCE: what transformers' own GGUF loader with eager attention in
float32 computes on exactly these tokens (bench/check_smollm2_survey.py on this test's results file;
regenerate with SINKLAB_KEEP_SMOLLM2_SURVEY=out.h5, then `bench/check_smollm2_survey.sh out.h5`). The
random and repeated tokens depend only on the survey's seed and the vocabulary; the natural ones on the
imported tokenizer and TEXTS below, so none of them on the mini corpus.
"""
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
SURVEY = BIN / "sinklab-survey"
SMOLLM2 = ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
pytestmark = [pytest.mark.skipif(not SURVEY.exists(), reason=f"{SURVEY} not built"),
              pytest.mark.skipif(not SMOLLM2.exists(), reason=f"{SMOLLM2} absent (bash env/setup.sh fetches it)")]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
T, N_SEQ, K = 64, 2, 4
TEXTS = [
    "The attention sink is a curious property of trained language models: many heads put most of their "
    "attention on the very first token of a sequence, whatever that token is. Researchers have asked when "
    "and why this happens, and whether it can be avoided by changing the attention operation itself. "
    "Their experiments suggest that the sink appears once a model has seen enough data, and that it acts "
    "like a bias term that stores extra attention scores without adding information.",
    "Once upon a time, in a small village at the edge of a great forest, there lived an old woman who kept "
    "bees. Every morning she walked to the hives, listened to their humming, and told them the news of the "
    "village, because she believed that bees who were not told would fly away. The children laughed at "
    "her, but in the autumn, when the honey was taken, they came to her door with jars and waited.",
]
# transformers (GGUF loader, eager attention, float32) on the same tokens: mean next-token loss, mean
# alpha_1 over layers and heads, Sink_1^{0.2,0.3,0.4} (%), and per threshold how many (sequence, layer,
# head) have an alpha_1 within 1e-4 of it (each may move Sink by 100 / (2*30*9) points under float32
# rounding; the survey and the reference differ by < 2e-6 in alpha here).
REFERENCE = {
    "natural/english": {"loss": 3.6286499221170216, "alpha1": 0.4636738693221306,
                        "sink": [82.96296296296296, 72.96296296296296, 56.481481481481474], "near": [0, 0, 0]},
    "random/-": {"loss": 14.040242794228206, "alpha1": 0.5407768515380007,
                 "sink": [86.11111111111111, 81.2962962962963, 72.96296296296296], "near": [0, 0, 1]},
    "repeat/-": {"loss": 21.68163984955969, "alpha1": 0.07282201772036816, "sink": [0.0, 0.0, 0.0],
                 "near": [0, 0, 0]},
}
QUANTIZATION = "Q4_1 (blocks), Q8_0 (embedding), F32 (norms)"


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    from tokenizers import Tokenizer

    from data_prep.gguf_import import import_gguf

    d = tmp_path_factory.mktemp("smollm2")
    model = d / "smollm2"
    import_gguf(SMOLLM2, model)
    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    rows = [tok.encode(t, add_special_tokens=False).ids[:T] for t in TEXTS]
    assert all(len(r) == T for r in rows)
    inputs = d / "inputs.h5"
    with h5py.File(inputs, "w") as f:  # data_prep survey-inputs' layout; SmolLM2 takes no BOS
        f.attrs["T"] = T
        f.attrs["prefix_id"] = -1
        f.create_dataset("english/tokens", data=np.asarray(rows, dtype=np.int32))
    out = d / "survey.h5"
    cmd = [SURVEY, "--model", f"smollm2 {model} inputs={inputs}", "--inputs=natural,random,repeat",
           "--domains=english", f"--n-seq={N_SEQ}", f"--seq-len={T}", f"--max-k={K}", f"--batch={N_SEQ}",
           "--qk-maps=18:8", "--attention-maps=18:8", "--output", out]
    proc = subprocess.run(list(map(str, cmd)), env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    keep = os.environ.get("SINKLAB_KEEP_SMOLLM2_SURVEY")
    if keep:
        shutil.copy(out, keep)
    return {"out": out, "model": model, "rows": np.asarray(rows, dtype=np.int32)}


def test_survey_writes_loss_alpha_tokens_and_provenance(survey):
    notes = json.loads((survey["model"] / "sinklab_source.json").read_text())
    sha = hashlib.sha256(SMOLLM2.read_bytes()).hexdigest()
    assert notes["source"] == SMOLLM2.name and notes["source_sha256"] == sha
    assert notes["quantization"] == QUANTIZATION
    with h5py.File(survey["out"], "r") as f:
        assert sorted(f["items"]) == ["smollm2:natural:english", "smollm2:random:-", "smollm2:repeat:-"]
        for label in REFERENCE:
            g = f[f"models/smollm2/{label}"]
            assert {k: g.attrs[k] for k in ("source", "source_sha256", "quantization")} == \
                {"source": SMOLLM2.name, "source_sha256": sha, "quantization": QUANTIZATION}
            assert g.attrs["model_type"] == "llama" and g.attrs["bos"] == -1 and g.attrs["n_seq"] == N_SEQ
            assert g["alpha"].shape == (30, 9, K) and g["sink_k"].shape == (K, 3)
            assert g["tokens"].shape == (N_SEQ, T) and g["tokens"].dtype == np.int32
            assert np.isfinite(g.attrs["loss"]) and g.attrs["loss"] > 0
        np.testing.assert_array_equal(f["models/smollm2/natural/english/tokens"][:], survey["rows"])
        assert np.all(f["models/smollm2/repeat/-/tokens"][:] == f["models/smollm2/repeat/-/tokens"][:, :1])
        # A model trained on text predicts text far better than random tokens.
        assert f["models/smollm2/natural/english"].attrs["loss"] < 6 < f["models/smollm2/random/-"].attrs["loss"]
        g = f["models/smollm2/natural/english"]
        assert g["qk_pairs"][:].tolist() == [[18, 8]] and g["attention_maps"].shape == (1, T, T)


def test_numbers_match_transformers_reference(survey):
    with h5py.File(survey["out"], "r") as f:
        for label, ref in REFERENCE.items():
            g = f[f"models/smollm2/{label}"]
            np.testing.assert_allclose(g.attrs["loss"], ref["loss"], rtol=1e-5, err_msg=label)
            np.testing.assert_allclose(g["alpha"][:, :, 0].mean(), ref["alpha1"], atol=1e-5, err_msg=label)
            allowed = 100.0 * np.asarray(ref["near"]) / (N_SEQ * 30 * 9) + 1e-9
            assert np.all(np.abs(g["sink"][:] - ref["sink"]) <= allowed), (label, g["sink"][:], ref["sink"])
