"""End-to-end tests of sinklab-survey on tiny models: the HF fixtures of every family
(tests/fixtures/hf: GPT-2, OPT, GPT-NeoX, LLaMA with grouped-query attention, Mistral) and sinklab's own
checkpoint (sinklab-pretrain on the conftest corpus, loaded as a LLaMA model), over natural inputs
(data_prep survey-inputs through a real tokenizer, matched by its sha256, and explicitly named files),
random and repeated tokens, and the Table 7 interventions.

- the measurements equal those recomputed from transformers' own attention probabilities and hidden
  states (the fixture goldens, float64, every family including Jamba, and the Table 7 cases);
- `mpirun -np 2` writes the same HDF5 content as one process (every dataset and measurement attribute);
- kill -9 midway, then --resume, gives the same results; so does SIGTERM/SIGUSR1 (exit 0, then --resume);
- a truncated safetensors file, an unknown model_type and a missing tensor fail their items only, each
  with one error line, and the survey exits non-zero with a summary;
- every job file in jobs/survey is a valid configuration; bad flags give one clear line.

The binaries come from $SINKLAB_BIN_DIR (tests/run_all.sh builds them first); the tests skip only when
they are absent.
"""
import csv
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import SYNTHETIC_VOCAB, _synthetic_documents, assert_same_contents, survey_contents

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
SURVEY, PRETRAIN = BIN / "sinklab-survey", BIN / "sinklab-pretrain"
FIXTURES = ROOT / "tests" / "fixtures" / "hf"
pytestmark = pytest.mark.skipif(not SURVEY.exists(), reason=f"{SURVEY} not built")

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
DOMAINS = ("pile_cc", "arxiv", "github")
T = 12  # the fixtures' smallest context is 16 positions
# (name, fixture) of the HF fixture models used; "gpt2" gets a real tokenizer (see `survey_setup`).
HF_MODELS = (("gpt2", "gpt2"), ("opt", "opt_pre"), ("neox", "neox_rot1_sequential"), ("llama_gqa", "llama_gqa"),
             ("mistral", "mistral_sliding"))
SOURCE_NOTES = {"source": "m.gguf", "source_sha256": "ab" * 32, "quantization": "Q4_1 (blocks), F32 (norms)"}
# Per run: the flags every survey here shares (the resume checks need them equal).
COMMON = [f"--seq-len={T}", "--n-seq=24", "--max-k=6", "--batch=4", "--commit-every=0",
          "--qk-maps=0:1,-1:0,7:0", "--attention-maps=1:0", "--interventions=replace:5,swap:5",
          f"--domains={','.join(DOMAINS)}", "--inputs=natural,random,repeat"]


def _run(cmd, np_=1, check=True, timeout=300):
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), *map(str, cmd)]
    proc = subprocess.run(list(map(str, cmd)), env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def _write_inputs(path, vocab, prefix_id=-1, seed=0):
    """A survey-inputs file in data_prep's layout (/<domain>/tokens int32 [n, T], root attrs) from the
    conftest progressions, folded into [0, vocab) and kept clear of the prefix token."""
    docs = [d for d in _synthetic_documents(300, 10 + seed) if len(d) >= T]
    with h5py.File(path, "w") as f:
        f.attrs["T"] = T
        f.attrs["prefix_id"] = prefix_id
        f.attrs["tokenizer_sha256"] = "0" * 64
        for k, domain in enumerate(DOMAINS):
            rows = np.array([d[:T] for d in docs[k * 30:(k + 1) * 30]], dtype=np.int32) % (vocab - 3) + 3
            if prefix_id >= 0:
                rows[:, 0] = prefix_id
            f.create_dataset(f"{domain}/tokens", data=rows)


@pytest.fixture(scope="module")
def survey_setup(corpus, tmp_path_factory):
    """A model root with the HF fixtures, a copy of the GPT-2 fixture with a tokenizer, and sinklab's own
    tiny checkpoint; a survey-inputs directory; a config listing them all."""
    assert FIXTURES.is_dir(), f"{FIXTURES}: the HF fixtures are missing"
    d = tmp_path_factory.mktemp("survey")
    root, inputs = d / "models", d / "inputs"
    root.mkdir()
    inputs.mkdir()
    lines = []
    for name, fixture in HF_MODELS:
        src = FIXTURES / fixture
        vocab = json.loads((src / "config.json").read_text())["vocab_size"]
        if name == "gpt2":
            # A tokenizer (WordLevel over data_prep's fixture words, GPT-2's special tokens) beside the
            # fixture's weights: its inputs come from data_prep survey-inputs and are found by sha256.
            from data_prep.fixtures import make_model_dir
            make_model_dir(root / name, "gpt2")
            for f in ("config.json", "model.safetensors"):
                shutil.copy(src / f, root / name / f)
            # Provenance notes as data_prep gguf-import writes them, to be copied into the results.
            (root / name / "sinklab_source.json").write_text(json.dumps(SOURCE_NOTES | {"note": "not copied"}))
            lines.append(f"model = {name} {name}")
        else:
            (root / name).symlink_to(src)
            _write_inputs(inputs / f"{name}_tokens.h5", vocab, prefix_id=2 if name == "opt" else -1)
            lines.append(f"model = {name} {name} inputs={name}_tokens.h5")
    from data_prep.fixtures import make_pile
    pile = make_pile(d / "pile.jsonl", docs_per_domain=30, n_words=40, domains=list(DOMAINS))
    _run([sys.executable, "-m", "data_prep", "survey-inputs", "--pile",
          pile, "--model", root / "gpt2", "--out-dir", inputs, "--n", "24", "--T", str(T)])
    # sinklab's own checkpoint: a LLaMA model in HF layout without a tokenizer.
    _run([PRETRAIN, f"--vocab-size={SYNTHETIC_VOCAB}", "--d-model=32", "--n-layers=2", "--n-heads=2",
          "--ffn-hidden=64", "--context=16", f"--train-data={corpus / 'train.bin'}",
          f"--valid-data={corpus / 'valid.bin'}", "--steps=30", "--global-batch-tokens=128",
          "--micro-batch-rows=2", "--lr=3e-3", "--eval-every=0", "--probe-sequences=4", "--probe-length=8",
          f"--out-dir={d / 'own'}", "--run-name=t"])
    step = sorted((d / "own" / "checkpoints").glob("step_*"))[-1]
    _write_inputs(inputs / "own_tokens.h5", SYNTHETIC_VOCAB, seed=1)
    lines.append(f"model = sinklab_tiny {step} inputs=own_tokens.h5")
    config = d / "survey.ini"
    config.write_text("\n".join(lines) + "\n")
    names = [n for n, _ in HF_MODELS] + ["sinklab_tiny"]
    return {"dir": d, "root": root, "inputs": inputs, "config": config, "names": names}


def _cmd(setup, output, *extra):
    """The survey of `setup` into `output`; `extra` ("--name=value" or "--name") overrides COMMON."""
    names = {e.split("=")[0] for e in extra}
    common = [a for a in COMMON if a.split("=")[0] not in names]
    return [SURVEY, "--config", setup["config"], "--model-root", setup["root"], "--survey-inputs-dir",
            setup["inputs"], "--output", output, *common, *extra]


@pytest.fixture(scope="module")
def reference(survey_setup):
    """One uninterrupted single-process survey: the reference of the other runs."""
    out = survey_setup["dir"] / "ref" / "survey.h5"  # a parent that does not exist yet
    proc = _run(_cmd(survey_setup, out))
    return {"out": out, "proc": proc, "contents": survey_contents(out)}


def _n_items(names):
    # 3 domains + random + repeat per model; replace/swap on repeat for the learned-position ones.
    return len(names) * (len(DOMAINS) + 2) + 2 * 2


def test_layout_and_measurements(survey_setup, reference):
    out, proc = reference["out"], reference["proc"]
    names = survey_setup["names"]
    total = _n_items(names)
    assert f"items {total}/{total}, model " in proc.stdout and "ETA" in proc.stdout, proc.stdout
    assert Path(str(out) + ".done").exists()
    with h5py.File(out, "r") as f:
        for attr in ("sinklab_version", "created_utc", "command_line", "config", "survey_params"):
            assert attr in f.attrs, attr
        assert "model = gpt2 gpt2" in f.attrs["config"] and "seq-len = 12" in f.attrs["config"]
        assert len(f["items"]) == total
        for item in f["items"].values():
            assert item.attrs["status"] == "ok" and item.attrs["error"] == "" and item.attrs["rank"] == 0
            assert item.attrs["seconds"] >= 0
        assert sorted(f["models"]) == sorted(names)
        for name in names:
            cfg = json.loads((survey_setup["root"] / name / "config.json").read_text()) if name != "sinklab_tiny" else {}
            for label in ("natural/" + DOMAINS[0], "random/-", "repeat/-"):
                g = f[f"models/{name}/{label}"]
                L = g["hnorm_first"].shape[0]
                La, H, K = g["alpha"].shape
                assert K == 6 and La == L and g["attention_layers"][:].tolist() == list(range(L))
                assert g["sink"].shape == (3,) and g["sink_k"].shape == (6, 3)
                np.testing.assert_array_equal(g["sink"][:], g["sink_k"][0])
                np.testing.assert_array_equal(g["sink_eps"][:], [0.2, 0.3, 0.4])
                for k in ("hnorm_rest", "massive_ratio", "knorm_first", "knorm_rest", "vnorm_first", "vnorm_rest"):
                    assert g[k].shape == (L,), k
                assert g["last_to_first"].shape == (L, H)
                a = g["alpha"][:]
                assert np.all(a[:, :, 0] >= 1.0 / T - 1e-9) and np.all(a <= 1 + 1e-9)  # 1/T <= alpha_1 <= 1
                assert np.all((g["sink"][:] >= 0) & (g["sink"][:] <= 100))
                # Pairs 0:1 and -1:0 exist in every model here (>= 2 heads); 7:0 in none.
                assert g["qk_pairs"][:].tolist() == [[0, 1], [L - 1, 0]]
                assert g["qk_cos"].shape == (2, T, T) and g["qk_normprod"].shape == (2, T, T)
                assert np.all(np.abs(g["qk_cos"][:]) <= 1 + 1e-5) and np.all(g["qk_normprod"][:] >= 0)
                m = g["attention_maps"][0]
                np.testing.assert_allclose(m.sum(axis=1), 1.0, rtol=1e-5)  # rows of A are distributions
                assert np.all(np.triu(m, 1) == 0)                           # causal
                assert g["attention_pairs"][:].tolist() == [[1, 0]]
                np.testing.assert_allclose(g["last_to_first"][1, 0], m[T - 1, 0], rtol=1e-5)
                assert g.attrs["skipped_pairs"] == f"7:0 (the model has {L} layers)"
                assert g.attrs["T"] == T and g.attrs["n_seq"] == 24
                # The token ids measured; the next-token loss where the model gives logits (HF models).
                tokens = g["tokens"][:]
                assert tokens.dtype == np.int32 and tokens.shape == (24, T)
                if label.startswith("natural"):
                    inputs = survey_setup["inputs"] / {"gpt2": "gpt2.h5", "sinklab_tiny": "own_tokens.h5"}.get(
                        name, f"{name}_tokens.h5")
                    with h5py.File(inputs, "r") as fi:
                        np.testing.assert_array_equal(tokens, fi[f"{DOMAINS[0]}/tokens"][:24, :T])
                elif label.startswith("repeat"):
                    assert np.all(tokens == tokens[:, :1])
                if name == "sinklab_tiny":
                    assert "loss" not in g.attrs  # sinklab's own checkpoints give no logits
                else:
                    assert 0 < g.attrs["loss"] < 2 * np.log(cfg["vocab_size"]), g.attrs["loss"]
                notes = {k: g.attrs[k] for k in ("source", "source_sha256", "quantization", "note") if k in g.attrs}
                assert notes == (SOURCE_NOTES if name == "gpt2" else {}), notes
            if cfg.get("model_type") in ("gpt2", "opt"):
                for label in ("repeat+replace_5", "repeat+swap_5"):
                    g = f[f"models/{name}/{label}/-"]
                    assert g.attrs["t"] == 5 and g["sink_t"].shape == (3,)
                    np.testing.assert_array_equal(g["sink_t"][:], g["sink_k"][4])
            else:
                assert "repeat+replace_5" not in f[f"models/{name}"]
                # Repeated tokens without learned positions: every position computes the same hidden
                # state (paper App. B.1), so ||h_1|| / mean ||h_t|| = 1 in every layer.
                np.testing.assert_allclose(f[f"models/{name}/repeat/-/massive_ratio"][:], 1.0, rtol=1e-4)
        # Natural inputs: gpt2's came through its tokenizer (no prefix for GPT-2), opt's file has a BOS.
        gpt2 = f[f"models/gpt2/natural/{DOMAINS[0]}"]
        assert gpt2.attrs["inputs_file"].endswith("gpt2.h5") and gpt2.attrs["bos"] == -1
        assert f[f"models/opt/natural/{DOMAINS[0]}"].attrs["bos"] == 2
        assert "special excluded" in f["models/gpt2/random/-"].attrs["vocabulary"]


@pytest.mark.identity
def test_two_ranks_write_what_one_rank_writes(survey_setup, reference, tmp_path):
    out = tmp_path / "np2.h5"
    _run(_cmd(survey_setup, out), np_=2)
    assert_same_contents(survey_contents(out), reference["contents"])
    with h5py.File(out, "r") as f:
        ranks = {int(item.attrs["rank"]) for item in f["items"].values()}
    assert ranks == {0, 1}, ranks  # both ranks measured items


def test_hellaswag_scored_through_the_models_tokenizer(survey_setup, tmp_path):
    """data_prep hellaswag with the GPT-2 copy's tokenizer, found by its fingerprint in --hellaswag-dir;
    --hellaswag-n keeps the first examples; a model without a file of its tokenizer fails its item only."""
    from data_prep.fixtures import WORDS
    rng = np.random.default_rng(0)
    words = lambda n: " ".join(rng.choice(WORDS, n))
    jsonl = tmp_path / "hs.jsonl"
    jsonl.write_text("".join(json.dumps({"activity_label": words(1), "ctx_a": words(6), "ctx_b": words(3),
                                         "endings": [words(int(rng.integers(2, 6))) for _ in range(4)],
                                         "label": int(rng.integers(4))}) + "\n" for _ in range(7)))
    _run([sys.executable, "-m", "data_prep", "hellaswag", "--jsonl", jsonl, "--model", survey_setup["root"] / "gpt2",
          "--out-dir", tmp_path / "hs"])
    out = tmp_path / "r.h5"
    proc = _run(_cmd(survey_setup, out, "--models=gpt2,llama_gqa", "--inputs=hellaswag", "--hellaswag-n=5", "--interventions=none",
                     f"--hellaswag-dir={tmp_path / 'hs'}"), check=False)
    assert proc.returncode == 1 and "1 of 2 items failed" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    with h5py.File(out, "r") as f:
        g = f["models/gpt2/hellaswag/-"]
        assert g.attrs["n_examples"] == 5 and g["label"].shape == (5,) and g["loglik"].shape == (20,)
        assert g.attrs["inputs_file"] == str(tmp_path / "hs" / "gpt2.h5")
        ll = g["loglik"][:].reshape(5, 4)
        assert np.all(np.isfinite(ll)) and np.all(ll < 0)
        assert g["pred"][:].tolist() == ll.argmax(axis=1).tolist()
        assert g.attrs["acc"] == np.mean(ll.argmax(axis=1) == g["label"][:])
        failed = f["items/llama_gqa:hellaswag:-"]
        assert failed.attrs["status"] == "failed" and "to match hellaswag files by" in failed.attrs["error"]


def test_report_draws_sink_vs_T_accuracy_long_inputs_and_ablations(survey_setup, tmp_path):
    """The report on a real survey file: Sink_1^eps against T (Fig. 3) from --seq-lens items, Sink against
    accuracy (Fig. 10) from hellaswag items, the long-input figure with error bars over heads, the loss
    against the attention window with and without sink tokens (the ablations); the tables hold the file's
    numbers."""
    mc = tmp_path / "mc.h5"
    ids = np.arange(3, 3 + 2 * T, dtype=np.int32).reshape(2, T) % 50 + 3
    _write_golden_multiple_choice(mc, ids)
    out = tmp_path / "r.h5"
    _run(_cmd(survey_setup, out, "--models=llama_gqa,mistral", "--inputs=natural,long,hellaswag",
              "--interventions=none", "--seq-lens=4,8", "--long-input-len=12", "--long-n-seq=4",
              "--long-domains=pile_cc", f"--hellaswag-dir={mc}",
              "--ablations=window:2,window:4,window_sinks:2:1,window_sinks:4:1,massive_mean:0:2"))
    from analysis.report import build_report
    rep = build_report([out], tmp_path / "report")
    figs = {Path(p).stem: Path(p) for p in rep.figures}
    for name in ("sink_vs_T_llama_gqa_natural", "sink_vs_T_mistral_natural", "sink_vs_accuracy",
                 "llama_gqa_long_last_to_first", "loss_vs_window_llama_gqa_natural", "loss_vs_window_mistral_natural_T8"):
        assert name in figs and figs[name].stat().st_size > 5000, (name, sorted(figs))
    with h5py.File(out, "r") as f:
        table = (tmp_path / "report" / "tables" / "sink_vs_T.csv").read_text().splitlines()
        header = table[0].split(",")
        rows = [dict(zip(header, line.split(","))) for line in table[1:]]
        for T_ in (4, 8, T):
            label = "natural" if T_ == T else f"natural@T{T_}"
            want = np.mean([f[f"models/llama_gqa/{label}/{d}/sink"][1] for d in DOMAINS])  # eps 0.3
            got = [float(r["Sink_1"]) for r in rows if r["model"] == "llama_gqa" and r["T"] == str(T_) and r["eps"] == "0.3"]
            assert got == [pytest.approx(want)], (T_, got, want)
        lines = (tmp_path / "report" / "tables" / "downstream.csv").read_text().splitlines()
        down = {r["model"]: r for r in (dict(zip(lines[0].split(","), line.split(","))) for line in lines[1:])}
        for m in ("llama_gqa", "mistral"):
            g = f[f"models/{m}/hellaswag/-"]
            assert float(down[m]["acc"]) == pytest.approx(g.attrs["acc"])
            assert float(down[m]["acc_norm"]) == pytest.approx(g.attrs["acc_norm"])
            sink = np.mean([f[f"models/{m}/natural/{d}/sink"][1] for d in DOMAINS])
            assert float(down[m]["Sink_1^0.3"]) == pytest.approx(sink)
        # Fig. 4 left: the surveyed models at their parameter counts.
        with open(tmp_path / "report" / "tables" / "fig4_left.csv", newline="") as table:
            fig4 = {r["model or run"]: r for r in csv.DictReader(table)}
        for m in ("llama_gqa", "mistral"):
            assert int(fig4[m]["parameters"]) == f[f"models/{m}/natural/{DOMAINS[0]}"].attrs["n_params"] > 0
        assert "fig4_left" in figs and "fig9" in figs  # Fig. 9 from the survey file itself
        # The ablation table: each ablation's loss and full attention's, means over the domains.
        lines = (tmp_path / "report" / "tables" / "ablations.csv").read_text().splitlines()
        rows = [dict(zip(lines[0].split(","), line.split(","))) for line in lines[1:]]
        assert len(rows) == 2 * 3 * 5  # models x lengths (12, 4, 8) x ablations
        for r in rows:
            base = r["input"]
            want = np.mean([f[f"models/{r['model']}/{base}+{r['ablation']}/{d}"].attrs["loss"] for d in DOMAINS])
            full = np.mean([f[f"models/{r['model']}/{base}/{d}"].attrs["loss"] for d in DOMAINS])
            assert float(r["loss"]) == pytest.approx(want) and float(r["loss (full)"]) == pytest.approx(full)
            if r["ablation"].startswith("massive"):
                assert r["Sink_1^0.3 before"] and r["Sink_1^0.3 after"]


def _descendants(pid):
    """pid and every process below it (OpenMPI's ranks are not in mpirun's process group)."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _ok_items(path):
    with h5py.File(path, "r") as f:
        return sum(item.attrs["status"] == "ok" for item in f["items"].values())


def _start_and_wait_for_items(cmd, out, np_, n=2):
    """Starts a survey and returns it once the committed file records at least n items."""
    if np_ > 1:
        cmd = ["mpirun", "-np", str(np_), *cmd]
    proc = subprocess.Popen(list(map(str, cmd)), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    t0 = time.time()
    while True:
        assert proc.poll() is None, "the survey ended before it could be interrupted:\n" + proc.stdout.read()
        assert time.time() - t0 < 120, "no committed results appeared"
        if out.exists():
            try:
                if _ok_items(out) >= n:
                    return proc
            except (OSError, KeyError):
                pass  # a commit in progress
        time.sleep(0.002)


@pytest.mark.identity
@pytest.mark.parametrize("np_", [1, 2])
def test_kill9_then_resume_gives_the_same_results(survey_setup, reference, tmp_path, np_):
    out = tmp_path / "killed.h5"
    proc = _start_and_wait_for_items(_cmd(survey_setup, out), out, np_)
    pids = _descendants(proc.pid)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate()
    total = _n_items(survey_setup["names"])
    done = _ok_items(out)
    assert 2 <= done < total, f"{done} of {total} items done at the kill: nothing left to resume"
    assert not Path(str(out) + ".done").exists()
    resumed = _run(_cmd(survey_setup, out, "--resume"), np_=np_)
    assert resumed.stdout.count("measuring ") == total - done, resumed.stdout  # only what was missing
    assert f"({done} done before)" in resumed.stdout
    assert_same_contents(survey_contents(out), reference["contents"])
    assert Path(str(out) + ".done").exists()


@pytest.mark.identity
@pytest.mark.parametrize("np_", [1, 2])
def test_stop_signal_commits_exits_zero_and_resume_completes(survey_setup, reference, tmp_path, np_):
    out = tmp_path / "stopped.h5"
    proc = _start_and_wait_for_items(_cmd(survey_setup, out), out, np_)
    # What Slurm does: SIGTERM (or --signal=USR1) to every rank.
    ranks = [p for p in _descendants(proc.pid) if Path(f"/proc/{p}/exe").exists()
             and os.readlink(f"/proc/{p}/exe").endswith("sinklab-survey")]
    assert len(ranks) == np_, ranks
    for p in ranks:
        os.kill(p, signal.SIGTERM if np_ == 1 else signal.SIGUSR1)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout + stderr
    assert "survey stopped" in stdout and "--resume" in stdout, stdout
    assert not Path(str(out) + ".done").exists()
    done = _ok_items(out)
    assert done < _n_items(survey_setup["names"])
    _run(_cmd(survey_setup, out, "--resume"), np_=np_)
    assert_same_contents(survey_contents(out), reference["contents"])


def _drop_tensor(path, suffix):
    """Rewrites a safetensors file without its last tensor whose name ends with `suffix` (a valid file,
    just one tensor short); returns the dropped name."""
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header, blob = json.loads(data[8:8 + n]), data[8 + n:]
    dropped = sorted(k for k in header if k.endswith(suffix))[-1]
    del header[dropped]
    kept, offset = [], 0
    for name, info in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                             key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = info["data_offsets"]
        kept.append(blob[b:e])
        info["data_offsets"] = [offset, offset + e - b]
        offset += e - b
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(kept))
    return dropped


def test_broken_models_fail_their_items_only(tmp_path):
    root = tmp_path / "models"
    src = FIXTURES / "llama_gqa"
    for name in ("good", "truncated", "unknown_type", "missing_tensor"):
        shutil.copytree(src, root / name)
    weights = root / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    cfg = json.loads((src / "config.json").read_text())
    (root / "unknown_type" / "config.json").write_text(json.dumps({**cfg, "model_type": "no_such_family"}))
    dropped = _drop_tensor(root / "missing_tensor" / "model.safetensors", "k_proj.weight")
    out = tmp_path / "r.h5"
    proc = _run([SURVEY, "--model-root", root, "--models", "good,truncated,unknown_type,missing_tensor",
                 "--inputs=random", "--n-seq=4", f"--seq-len={T}", "--commit-every=0", "--output", out], check=False)
    assert proc.returncode != 0
    errors = proc.stderr.strip().splitlines()
    failed = {"truncated": "model.safetensors", "unknown_type": "no_such_family", "missing_tensor": dropped}
    for name, what in failed.items():
        lines = [l for l in errors if f"item {name}:random:- failed" in l]
        assert len(lines) == 1 and what in lines[0] and str(root / name) in lines[0], proc.stderr
    summary = errors[-1]
    assert "3 of 4 items failed" in summary and all(f"{n}:random:-" in summary for n in failed), summary
    assert len(errors) == 4, proc.stderr  # one line per failed item and the summary, nothing else
    with h5py.File(out, "r") as f:
        assert f["items/good:random:-"].attrs["status"] == "ok"
        assert f["models/good/random/-/alpha"].shape[0] == 2
        for name, what in failed.items():
            item = f[f"items/{name}:random:-"]
            assert item.attrs["status"] == "failed" and what in item.attrs["error"]
            assert name not in f["models"]
    assert Path(str(out) + ".done").exists()  # every item was attempted


@pytest.mark.parametrize("job", sorted((ROOT / "jobs" / "survey").glob("*.ini")), ids=lambda p: p.name)
def test_every_job_file_is_a_valid_configuration(job):
    proc = _run([SURVEY, "--config", job, "--dry-run"], check=False)
    assert proc.returncode == 0, f"{job}: {proc.stderr}"
    assert "seq-len = " in proc.stdout and " items\n" in proc.stdout


# Issue 44: a misspelled --models name failed only after every other item had run, and a model ran at
# T > max_position_embeddings without a word. Both are now decided while planning, before any item or file.
FIXTURES_JOB = ROOT / "jobs" / "survey" / "fixtures.ini"


def test_a_misspelled_model_is_refused_before_any_item(tmp_path):
    """One line naming --models, the name and the catalogue's names; nothing measured, no file."""
    out = tmp_path / "s.h5"
    proc = _run([SURVEY, "--config", FIXTURES_JOB, "--models=gpt2,lama_gqa", "--output", out], check=False)
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--models: 'lama_gqa' is neither a model of the catalogue (gpt2, gpt2_layer_scaled," in proc.stderr
    assert "measuring" not in proc.stdout and not out.exists()


def test_t_beyond_learned_positions_is_refused_while_planning(tmp_path):
    """GPT-2's 16 learned positions: T = 20 has no position embedding; one line naming the flag."""
    out = tmp_path / "s.h5"
    proc = _run([SURVEY, "--config", FIXTURES_JOB, "--models=gpt2,llama_gqa", "--seq-lens=20", "--output", out],
                check=False)
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--seq-lens: T = 20 exceeds the 16 positions of model gpt2 (n_positions in" in proc.stderr, proc.stderr
    assert "measuring" not in proc.stdout and not out.exists()


def test_t_beyond_rotary_positions_is_measured_with_a_warning(tmp_path):
    """LLaMA's max_position_embeddings = 64 with rotary positions: T = 80 runs, said once in a warning."""
    out = tmp_path / "s.h5"
    proc = _run([SURVEY, "--config", FIXTURES_JOB, "--models=llama_gqa", "--inputs=random", "--seq-lens=80",
                 "--n-seq=2", "--interventions=none", "--qk-maps", "", "--attention-maps", "", "--output", out])
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "model llama_gqa: T = 80 (--seq-lens) exceeds its max_position_embeddings = 64" in \
        warnings[0], proc.stderr
    with h5py.File(out, "r") as f:
        assert f["items/llama_gqa:random@T80:-"].attrs["status"] == "ok"


def test_open_models_job_lists_the_paper_survey():
    proc = _run([SURVEY, "--config", ROOT / "jobs" / "survey" / "open_models.ini", "--dry-run"])
    assert "# 32 models, 656 items" in proc.stdout  # 32 x (17 domains + random + repeat) + 4 GPT-2 x 12 interventions
    assert "# gpt2-xl:repeat+swap_30:- -> openai-community/gpt2-xl" in proc.stdout
    assert "# jamba-1.5-mini:natural:enron_emails -> ai21labs/AI21-Jamba-1.5-Mini" in proc.stdout
    assert "opt-13b:repeat+replace_5" not in proc.stdout


def test_bad_flags_give_one_clear_line(survey_setup, reference, tmp_path):
    def one_line(cmd, *words):
        proc = _run(cmd, check=False)
        assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
        for w in words:
            assert w in proc.stderr, proc.stderr

    out = tmp_path / "x.h5"
    one_line(_cmd(survey_setup, out, "--qk-maps=1-0"), "--qk-maps", "1-0")
    one_line(_cmd(survey_setup, out, "--inputs=natural,bogus"), "--inputs", "bogus")
    one_line(_cmd(survey_setup, out, "--interventions=move:5"), "--interventions", "move:5")
    one_line(_cmd(survey_setup, out, "--max-memory=lots"), "--max-memory")
    one_line(_cmd(survey_setup, out, "--device=gpu"), "--device", "gpu")
    one_line(_cmd(survey_setup, out, "--attn-kernel=fast"), "attn-kernel", "fast")
    # --device cuda where there is no GPU (or no CUDA in the build): one line, before any file is written.
    # (With a GPU, tests/cpp/gpu/test_cuda_pretrain.cpp compares --device cuda with the CPU.)
    proc = _run(_cmd(survey_setup, out, "--device=cuda"), check=False)
    if "no usable CUDA device" in proc.stderr or "built without CUDA" in proc.stderr:
        one_line(_cmd(survey_setup, out, "--device=cuda"), "--device cuda")
        assert not out.exists()
    one_line([SURVEY, "--model", "a/b x"], "a/b")
    # An existing results file is continued only when asked to, and only with the same parameters.
    one_line(_cmd(survey_setup, reference["out"]), "--resume", str(reference["out"]))
    one_line(_cmd(survey_setup, reference["out"], "--resume", "--seq-len=10"), "seq-len=12", "seq-len=10")


def test_fixtures_job_covers_every_family(tmp_path):
    """jobs/survey/fixtures.ini (every HF fixture, Jamba's partial attention included; random/repeat inputs,
    interventions) on two ranks."""
    out = tmp_path / "fixtures.h5"
    proc = _run([SURVEY, "--config", ROOT / "jobs" / "survey" / "fixtures.ini", "--output", out], np_=2)
    assert "survey done: 44 items, 0 failed" in proc.stdout, proc.stdout
    with h5py.File(out, "r") as f:
        types = {f[f"models/{m}/random/-"].attrs["model_type"] for m in f["models"]}
        assert types == {"gpt2", "opt", "gpt_neox", "llama", "mistral", "qwen2", "gemma3_text", "jamba"}
        assert all(item.attrs["status"] == "ok" for item in f["items"].values())
        jamba = f["models/jamba_tiny/repeat/-"]
        assert jamba["attention_layers"][:].tolist() == [1, 3] and jamba["alpha"].shape == (2, 4, 6)
        assert jamba["hnorm_first"].shape == (4,)  # every layer, Mamba ones included
        assert jamba["qk_pairs"][:].tolist() == [[3, 1]] and "0:0 (layer 0 has no attention)" in jamba.attrs["skipped_pairs"]


def _read_safetensors(path):
    """name -> numpy array (F32, F64, I32) of a safetensors file, and its metadata."""
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": np.float32, "F64": np.float64, "I32": np.int32}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out, header.get("__metadata__", {})


def _read_safetensors_shapes(path):
    """name -> shape of every tensor of a safetensors file (its header), and its metadata."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}, header.get("__metadata__", {})


def _golden_of(fixture):
    for name in ("golden.safetensors", "jamba_golden.safetensors"):
        if (fixture / name).exists():
            return _read_safetensors(fixture / name)
    raise AssertionError(f"{fixture}: no golden")


def _expected_sinks(probs, K, eps):
    """alpha [La,H,K] (mean over samples) and Sink_k^eps [K,E] (per-sample indicators, as the reference
    code) from transformers' attention probabilities [La][B,H,T,T]; `near` marks the entries of Sink a
    float32 run may legitimately count differently (a sample's alpha within 1e-4 of eps)."""
    A = np.stack([p.astype(np.float64) for p in probs])  # [La,B,H,T,T]
    n_t = A.shape[-1]
    alpha = np.stack([A[..., k:, k].sum(axis=-1) / (n_t - k) for k in range(K)], axis=-1)  # [La,B,H,K]
    sink = np.array([[100.0 * (alpha[..., k] > e).mean() for e in eps] for k in range(K)])
    near = np.array([[bool((np.abs(alpha[..., k] - e) < 1e-4).any()) for e in eps] for k in range(K)])
    return alpha.mean(axis=1), sink, near


def _next_token_loss(logits, ids):
    """Mean next-token cross-entropy (float64, numpy) over the T-1 predicted positions of every sequence:
    -log softmax(logits[b, t])[ids[b, t+1]]."""
    x = logits[:, :-1].astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    log_probs = x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_probs, ids[:, 1:, None].astype(np.int64), axis=-1).mean()


def _write_golden_multiple_choice(path, ids):
    """A multiple-choice file in data_prep hellaswag's layout whose choices are prefixes of the golden rows
    (row b, length m, continuation from s), so that transformers' golden logits score them: two examples,
    of four and two choices, mixing full rows and shorter prefixes (padded in the survey's batch)."""
    B, T = ids.shape
    last = B - 1
    examples = [([(0, T, T // 2), (last, T, T // 2), (0, T - 1, 1), (last, max(3, T // 2), 2)], 1),
                ([(last, T - 2, T - 3), (0, 2, 1)], 0)]
    chars = [5, 3, 9, 2, 4, 1]  # choice lengths in characters, for acc_norm
    tokens, choice_offsets, cont_start, example_offsets, labels, flat = [], [0], [], [0], [], []
    for choices, label in examples:
        for b, m, s in choices:
            tokens += ids[b, :m].tolist()
            choice_offsets.append(len(tokens))
            cont_start.append(s)
            flat.append((b, m, s))
        example_offsets.append(len(cont_start))
        labels.append(label)
    with h5py.File(path, "w") as f:
        f.attrs["kind"] = "hellaswag"
        f.attrs["tokenizer_sha256"] = "0" * 64
        for name, data, dtype in (("tokens", tokens, np.int32), ("choice_offsets", choice_offsets, np.int64),
                                  ("cont_start", cont_start, np.int32), ("choice_chars", chars, np.int32),
                                  ("example_offsets", example_offsets, np.int64), ("label", labels, np.int32)):
            f.create_dataset(name, data=np.asarray(data, dtype=dtype))
    return {"choices": flat, "chars": chars, "example_offsets": example_offsets, "labels": labels}


def _check_multiple_choice(g, mc, logits, ids):
    """The scorer's log-likelihoods from transformers' logits (numpy log-softmax, float64), and the
    predictions and accuracies that follow from them."""
    x = logits.astype(np.float64)
    log_probs = x - x.max(axis=-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(axis=-1, keepdims=True))
    want = [sum(log_probs[b, t - 1, ids[b, t]] for t in range(s, m)) for b, m, s in mc["choices"]]
    np.testing.assert_allclose(g["loglik"][:], want, rtol=2e-6, atol=2e-5)
    assert g["n_cont_tokens"][:].tolist() == [m - s for _, m, s in mc["choices"]]
    offsets, chars = mc["example_offsets"], np.asarray(mc["chars"], dtype=np.float64)
    pred = [int(np.argmax(want[a:b])) for a, b in zip(offsets, offsets[1:])]
    pred_norm = [int(np.argmax(np.asarray(want[a:b]) / chars[a:b])) for a, b in zip(offsets, offsets[1:])]
    assert g["pred"][:].tolist() == pred and g["pred_norm"][:].tolist() == pred_norm
    assert g.attrs["acc"] == np.mean(np.asarray(pred) == mc["labels"])
    assert g.attrs["acc_norm"] == np.mean(np.asarray(pred_norm) == mc["labels"])
    assert g.attrs["n_examples"] == 2 and g.attrs["input"] == "hellaswag"


@pytest.mark.parametrize("fixture", sorted(p for p in FIXTURES.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_measurements_match_transformers(fixture, tmp_path):
    """The survey's numbers from transformers' own outputs on the fixture goldens (float64, eager
    attention): the golden's token ids become a natural-input domain; alpha, Sink_k, last_to_first and
    attention maps are recomputed from transformers' attention probabilities, the hidden-state norms and
    massive ratio from its per-layer hidden states, the next-token loss from its logits (numpy
    log-softmax); the Table 7 cases through the interventions; the multiple-choice scorer's
    log-likelihoods of prefixes of the golden rows from the same logits; a --seq-lens item from the
    leading block of the same probabilities."""
    golden, meta = _golden_of(fixture)
    ids = golden["t13/ids"]
    B, T13 = ids.shape
    layers = sorted(int(k.split("/")[-1]) for k in golden if k.startswith("t13/hidden_out/"))
    att = sorted(int(k.split("/")[-1]) for k in golden if k.startswith("t13/probs/"))
    with h5py.File(tmp_path / "golden_ids.h5", "w") as f:
        f.attrs["T"] = T13
        f.attrs["prefix_id"] = -1
        f.create_dataset("golden/tokens", data=ids)
    # Table 7 cases of the golden (0-based position_ids p_0 := p_t / p_0 <-> p_t) within the T tokens,
    # as the survey's 1-based replace:t+1 / swap:t+1.
    cases = {c: int(float(meta[f"{c}/position"])) for c in meta.get("cases", "").split(",") if f"{c}/position" in meta}
    cases = {c: t for c, t in cases.items() if t < T13}
    flags = ",".join(f"{c.rstrip('0123456789')}:{t + 1}" for c, t in cases.items()) or "none"
    K, eps = 4, (0.2, 0.3, 0.4)
    out = tmp_path / "r.h5"
    choices = _write_golden_multiple_choice(tmp_path / "mc.h5", ids)
    # The attention maps at the model line's own pairs (qk-maps= / attention-maps=, as jobs/survey/open_models.ini
    # draws Jamba's attention layers), which win over the flag's.
    _run([SURVEY, "--model", f"m {fixture} inputs={tmp_path / 'golden_ids.h5'} interventions={flags} "
          f"attention-maps={att[0]}:0,{att[-1]}:1", "--inputs=natural,hellaswag", "--domains=golden",
          f"--hellaswag-dir={tmp_path / 'mc.h5'}", f"--seq-lens={T13 - 3},{T13}",
          "--intervention-inputs=natural", f"--seq-len={T13}", f"--n-seq={B}", f"--max-k={K}", "--batch=1",
          "--attention-maps=-1:0", "--commit-every=0", "--output", out])
    with h5py.File(out, "r") as f:
        _check_multiple_choice(f["models/m/hellaswag/-"], choices, golden["t13/logits"], ids)
        # --seq-lens: the first T' tokens of the same rows; causal attention makes their attention the
        # leading [T', T'] block of transformers' (T13 itself is the --seq-len item, not measured twice).
        short = T13 - 3
        g = f[f"models/m/natural@T{short}/golden"]
        assert g.attrs["T"] == short and g.attrs["input"] == "natural" and f"natural@T{T13}" not in f["models/m"]
        alpha, sink, near = _expected_sinks([golden[f"t13/probs/{l}"][..., :short, :short] for l in att], K, eps)
        np.testing.assert_allclose(g["alpha"][:], alpha, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.where(near, 0, g["sink_k"][:]), np.where(near, 0, sink), rtol=1e-12)
        np.testing.assert_allclose(g.attrs["loss"], _next_token_loss(golden["t13/logits"][:, :short], ids[:, :short]),
                                   rtol=2e-6)
        g = f["models/m/natural/golden"]
        assert g["attention_layers"][:].tolist() == att
        if (fixture / "model.safetensors").exists():  # Fig. 4 left's x: every stored weight, counted once
            stored, _ = _read_safetensors_shapes(fixture / "model.safetensors")
            assert g.attrs["n_params"] == sum(int(np.prod(shape)) for name, shape in stored.items()
                                              if not name.endswith((".attn.bias", ".attn.masked_bias")))
        alpha, sink, near = _expected_sinks([golden[f"t13/probs/{l}"] for l in att], K, eps)
        np.testing.assert_allclose(g["alpha"][:], alpha, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.where(near, 0, g["sink_k"][:]), np.where(near, 0, sink), rtol=1e-12)
        A = {l: golden[f"t13/probs/{l}"].astype(np.float64) for l in att}
        np.testing.assert_allclose(g["last_to_first"][:], [A[l][:, :, -1, 0].mean(axis=0) for l in att],
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(g["attention_maps"][:], [A[att[0]][:, 0].mean(axis=0), A[att[-1]][:, 1].mean(axis=0)],
                                   rtol=1e-4, atol=1e-6)
        def hidden_norms(h):
            norms = [np.linalg.norm(x.astype(np.float64), axis=-1) for x in h]  # [B,T] per layer
            return ([n[:, 0].mean() for n in norms], [n[:, 1:].mean() for n in norms],
                    [(n[:, 0] / n[:, 1:].mean(axis=1)).mean() for n in norms])

        np.testing.assert_allclose(g.attrs["loss"], _next_token_loss(golden["t13/logits"], ids), rtol=2e-6)
        np.testing.assert_array_equal(g["tokens"][:], ids)
        first, rest, massive = hidden_norms([golden[f"t13/hidden_out/{l}"] for l in layers])
        np.testing.assert_allclose(g["hnorm_first"][:], first, rtol=1e-4)
        np.testing.assert_allclose(g["hnorm_rest"][:], rest, rtol=1e-4)
        np.testing.assert_allclose(g["massive_ratio"][:], massive, rtol=1e-4)
        # Post-norm layers (OPT-350M style) also before their last norm, where transformers' hook saw
        # hidden_pre_norm.
        if f"t13/hidden_pre_norm/{layers[0]}" in golden:
            first, rest, massive = hidden_norms([golden[f"t13/hidden_pre_norm/{l}"] for l in layers])
            np.testing.assert_allclose(g["hnorm_first_pre_norm"][:], first, rtol=1e-4)
            np.testing.assert_allclose(g["hnorm_rest_pre_norm"][:], rest, rtol=1e-4)
            np.testing.assert_allclose(g["massive_ratio_pre_norm"][:], massive, rtol=1e-4)
        else:
            assert "massive_ratio_pre_norm" not in g
        for case, t in cases.items():
            g = f[f"models/m/natural+{case.rstrip('0123456789')}_{t + 1}/golden"]
            alpha, sink, near = _expected_sinks([golden[f"{case}/probs/{l}"] for l in att], max(K, t + 1), eps)
            np.testing.assert_allclose(g["alpha"][:], alpha, rtol=1e-4, atol=1e-6, err_msg=case)
            np.testing.assert_allclose(np.where(near, 0, g["sink_k"][:]), np.where(near, 0, sink), rtol=1e-12,
                                       err_msg=case)
            np.testing.assert_array_equal(g["sink_t"][:], g["sink_k"][t])
            np.testing.assert_allclose(g.attrs["loss"], _next_token_loss(golden[f"{case}/logits"], ids), rtol=2e-6,
                                       err_msg=case)


ABLATIONS = json.loads((ROOT / "tests" / "golden" / "hf_ablations.json").read_text())


@pytest.mark.parametrize("fixture", sorted(p for p in FIXTURES.iterdir() if p.is_dir()), ids=lambda p: p.name)
def test_ablations_match_transformers(fixture, tmp_path):
    """Every ablation (window, StreamingLLM's sinks + window with re-assigned rotary positions, the first
    token masked from a layer on, massive activations zeroed or replaced by their mean) gives the
    next-token loss transformers gives under the same change (tests/python/goldens/gen_hf_ablations.py,
    float64) on the fixture's golden ids, within 1e-5; the massive ones keep the probe, the attention ones
    hold the loss alone."""
    golden, _ = _golden_of(fixture)
    ids = golden["t13/ids"]
    B, T13 = ids.shape
    assert T13 == ABLATIONS["T"]
    with h5py.File(tmp_path / "golden_ids.h5", "w") as f:
        f.attrs["T"] = T13
        f.attrs["prefix_id"] = -1
        f.create_dataset("golden/tokens", data=ids)
    out = tmp_path / "r.h5"
    _run([SURVEY, "--model", f"m {fixture} inputs={tmp_path / 'golden_ids.h5'} interventions=none", "--inputs=natural",
          "--domains=golden", f"--ablations={','.join(ABLATIONS['cases'])}", f"--seq-len={T13}", f"--n-seq={B}",
          "--max-k=4", "--batch=2", "--commit-every=0", "--output", out])
    want = ABLATIONS["losses"][fixture.name]
    with h5py.File(out, "r") as f:
        groups = {g.attrs["ablation"]: g for name, g in f["models/m"].items() if "+" in name for g in [g["golden"]]}
        assert len(groups) == len(ABLATIONS["cases"])
        np.testing.assert_allclose(f["models/m/natural/golden"].attrs["loss"], want["none"], rtol=1e-5)
        for case in ABLATIONS["cases"]:
            kind, *args = case.split(":")
            tag = {"window": "window_{0}", "window_sinks": "window_{0}_sinks_{1}", "mask_first": "mask_first_from_{0}",
                   "massive_zero": "massive_zero_{0}_top{1}", "massive_mean": "massive_mean_{0}_top{1}"}[kind].format(*args)
            g = groups[tag]
            np.testing.assert_allclose(g.attrs["loss"], want[case], rtol=1e-5, err_msg=case)
            assert g.attrs["ablation_kind"] == kind
            assert ("alpha" in g) == kind.startswith("massive"), case


# PyTorch checkpoints (tests/python/goldens/gen_hf_torch_bin.py): the layouts the hub serves for
# facebook/opt-* and the original GPT-2 repositories, and the weights file each survey records.
BIN_FIXTURES = {"opt_bin_tied": "pytorch_model.bin", "opt_bin_sharded": "pytorch_model.bin.index.json",
                "gpt2_bin": "pytorch_model.bin"}


def test_pytorch_checkpoints_survey_like_transformers(tmp_path):
    """A tied OPT with vocab.json + merges.txt and no tokenizer.json, a sharded OPT and a GPT-2 with strided
    views, surveyed together from their .bin files: alpha within 1e-5 of transformers' eager attention
    (float64), Sink_k^eps equal, the weights file recorded; the tied OPT has no safetensors at all."""
    assert set((FIXTURES / "opt_bin_tied").glob("*.safetensors*")) == {FIXTURES / "opt_bin_tied" / "golden.safetensors"}
    assert not (FIXTURES / "opt_bin_tied" / "tokenizer.json").exists()
    lines, K, eps = [], 4, (0.2, 0.3, 0.4)
    for name in BIN_FIXTURES:
        golden, _ = _golden_of(FIXTURES / name)
        with h5py.File(tmp_path / f"{name}.h5", "w") as f:
            f.attrs["T"] = golden["t13/ids"].shape[1]
            f.attrs["prefix_id"] = -1
            f.create_dataset("golden/tokens", data=golden["t13/ids"])
        lines.append(f"model = {name} {FIXTURES / name} inputs={tmp_path / (name + '.h5')}")
    (tmp_path / "bin.ini").write_text("\n".join(lines) + "\n")
    out = tmp_path / "r.h5"
    proc = _run([SURVEY, "--config", tmp_path / "bin.ini", "--inputs=natural", "--domains=golden", "--seq-len=13",
                 "--n-seq=2", f"--max-k={K}", "--batch=2", "--commit-every=0", "--output", out])
    assert "survey done: 3 items, 0 failed" in proc.stdout, proc.stdout
    with h5py.File(out, "r") as f:
        for name, weights in BIN_FIXTURES.items():
            golden, _ = _golden_of(FIXTURES / name)
            g = f[f"models/{name}/natural/golden"]
            assert g.attrs["weights"] == weights
            att = g["attention_layers"][:].tolist()
            alpha, sink, near = _expected_sinks([golden[f"t13/probs/{l}"] for l in att], K, eps)
            np.testing.assert_allclose(g["alpha"][:], alpha, rtol=0, atol=1e-5, err_msg=name)
            assert not near.all(), name  # the comparison below is not vacuous
            np.testing.assert_array_equal(np.where(near, 0, g["sink_k"][:]), np.where(near, 0, sink), err_msg=name)
            np.testing.assert_allclose(g.attrs["loss"], _next_token_loss(golden["t13/logits"], golden["t13/ids"]),
                                       rtol=2e-6)
        assert f["models/opt_bin_tied/natural/golden"].attrs["model_type"] == "opt"


def test_a_pickle_that_runs_code_is_refused_and_nothing_runs(tmp_path):
    """A pytorch_model.bin whose data.pkl calls os.system (a real payload: plain pickle runs it) fails its
    model's items with one line naming the file and the global; the command never runs; the other model
    finishes."""
    import pickle
    import zipfile

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    pkl = pickle.dumps({"model.decoder.embed_tokens.weight": Payload()}, protocol=2)
    pickle.loads(pkl)  # what torch.load(weights_only=False) would do
    assert marker.exists(), "the payload is not a real one"
    marker.unlink()
    root = tmp_path / "models"
    for name in ("good", "evil"):
        shutil.copytree(FIXTURES / "opt_bin_tied", root / name)
    with zipfile.ZipFile(root / "evil" / "pytorch_model.bin", "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
    out = tmp_path / "r.h5"
    proc = _run([SURVEY, "--model-root", root, "--models", "good,evil", "--inputs=random", "--n-seq=2",
                 f"--seq-len={T}", "--commit-every=0", "--output", out], check=False)
    assert proc.returncode != 0
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 2 and "item evil:random:- failed" in errors[0], proc.stderr
    assert f"{root / 'evil' / 'pytorch_model.bin'}: archive/data.pkl: refused pickle global 'posix.system'" in errors[0]
    assert "1 of 2 items failed" in errors[1]
    assert not marker.exists()
    with h5py.File(out, "r") as f:
        assert f["items/good:random:-"].attrs["status"] == "ok"
        assert f["models/good/random/-"].attrs["weights"] == "pytorch_model.bin"
        assert "refused pickle global 'posix.system'" in f["items/evil:random:-"].attrs["error"]


def test_natural_inputs_found_by_the_fingerprint_of_every_tokenizer_form(tmp_path):
    """data_prep survey-inputs from vocab.json + merges.txt (the OPT .bin fixture, no tokenizer.json) and
    from tokenizer.model (LLaMA weights with the sentencepiece fixture), then the survey finds each
    model's file by the fingerprint of its tokenizer files (no inputs= in the config) and measures the
    rows data_prep wrote, the family's first token (OPT's </s>, LLaMA's <s>) in front."""
    root, inputs = tmp_path / "models", tmp_path / "inputs"
    shutil.copytree(FIXTURES / "opt_bin_tied", root / "opt")
    shutil.copytree(FIXTURES / "llama_gqa", root / "llama")
    for f in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copy(ROOT / "tests" / "fixtures" / "tokenizers" / "llama_sp" / f, root / "llama" / f)
    from data_prep.fixtures import make_pile
    pile = make_pile(tmp_path / "pile.jsonl", docs_per_domain=6, n_words=40, domains=list(DOMAINS))
    _run([sys.executable, "-m", "data_prep", "survey-inputs", "--pile", pile, "--model", root / "opt", root / "llama",
          "--out-dir", inputs, "--n", "4", "--T", str(T)])
    (tmp_path / "s.ini").write_text("model = opt opt\nmodel = llama llama\n")
    out = tmp_path / "r.h5"
    proc = _run([SURVEY, "--config", tmp_path / "s.ini", "--model-root", root, "--survey-inputs-dir", inputs,
                 "--inputs=natural", f"--domains={DOMAINS[0]}", f"--seq-len={T}", "--n-seq=4", "--commit-every=0",
                 "--output", out])
    assert "survey done: 2 items, 0 failed" in proc.stdout, proc.stdout
    with h5py.File(out, "r") as f:
        for name, bos in (("opt", 2), ("llama", 1)):
            g = f[f"models/{name}/natural/{DOMAINS[0]}"]
            assert g.attrs["inputs_file"] == str(inputs / f"{name}.h5") and g.attrs["bos"] == bos
            with h5py.File(inputs / f"{name}.h5", "r") as fi:
                np.testing.assert_array_equal(g["tokens"][:], fi[f"{DOMAINS[0]}/tokens"][:4])
            assert (g["tokens"][:, 0] == bos).all()
    # Another tokenizer file: no inputs match any more, one line naming the form and the fingerprint.
    (root / "opt" / "merges.txt").write_text((root / "opt" / "merges.txt").read_text() + "\n")
    proc = _run([SURVEY, "--model", "opt opt", "--model-root", root, "--survey-inputs-dir", inputs, "--inputs=natural",
                 f"--domains={DOMAINS[0]}", f"--seq-len={T}", "--n-seq=4", "--output", tmp_path / "r2.h5"], check=False)
    assert proc.returncode != 0
    assert f"were made with the tokenizer of {root / 'opt'} (vocab.json + merges.txt, fingerprint" in proc.stderr


def test_a_model_over_the_memory_budget_fails_its_items_only(tmp_path):
    """Two ranks under an 80 KiB budget each: the tiny GPT-NeoX and the OPT .bin stream within it, Jamba's
    streamed footprint (resident weights + one layer + the staged block: ~160 KiB) does not, so its items
    fail with that reason before anything is converted; the others finish, and the survey exits 1 with
    one line per failed item and the summary (README), the results file complete (.done)."""
    out = tmp_path / "r.h5"
    models = ["neox neox_rot1_sequential", "opt opt_bin_tied", "jamba jamba_tiny"]
    proc = _run([SURVEY, *[a for m in models for a in ("--model", m)], "--model-root", FIXTURES,
                 "--inputs=random,repeat", "--n-seq=2", "--seq-len=8", "--batch=2", "--max-memory=80K",
                 "--commit-every=0", "--output", out], np_=2, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [l for l in proc.stderr.strip().splitlines() if "sinklab-survey" in l or "failed" in l]
    failed = [l for l in errors if "item jamba:" in l]
    assert len(failed) == 2, proc.stderr
    for line in failed:
        assert f"--max-memory 0.1 MiB is too small for {FIXTURES / 'jamba_tiny'}" in line, line
    # The summary is rank 0's last line; mpirun may pass another rank's lines on after it.
    summary = [l for l in errors if "items failed:" in l]
    assert len(summary) == 1 and "2 of 6 items failed: jamba:random:-, jamba:repeat:-" in summary[0], proc.stderr
    assert Path(str(out) + ".done").exists()
    with h5py.File(out, "r") as f:
        for name in ("neox", "opt"):
            for label in ("random/-", "repeat/-"):
                g = f[f"models/{name}/{label}"]
                assert g.attrs["weights_streamed"] == 1
        assert f["items/jamba:random:-"].attrs["status"] == "failed" and "jamba" not in f["models"]


@pytest.mark.parametrize("np_", [1, 2])
def test_default_memory_budget_is_the_nodes_share_per_rank(tmp_path, np_):
    """Without --max-memory each rank's budget is the node's memory (cgroup limit or MemTotal) over the
    ranks on the node; tiny models fit it and stay resident."""
    out = tmp_path / "r.h5"
    proc = _run([SURVEY, "--model", "g gpt2", "--model-root", FIXTURES, "--inputs=random", "--n-seq=2", "--seq-len=8",
                 "--output", out], np_=np_)
    import re
    m = re.search(r"memory per rank: ([0-9.]+) MiB \(auto: ([0-9.]+) GiB \((MemTotal|cgroup v[12] [^)]+)\) / "
                  r"(\d+) ranks? on this node\)", proc.stdout)
    assert m, proc.stdout
    per_rank, node, ranks = float(m.group(1)), float(m.group(2)), int(m.group(4))
    assert ranks == np_
    assert abs(per_rank * ranks / 1024 - node) < 0.1
    mem_total = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) / 2**20  # GiB
    assert node <= mem_total + 0.05
    with h5py.File(out, "r") as f:
        assert f["models/g/random/-"].attrs["weights_streamed"] == 0
