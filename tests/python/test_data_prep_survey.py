"""Special-token policy per tokenizer family, and the survey-inputs HDF5 files."""

import hashlib
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from data_prep import DataPrepError
from data_prep.__main__ import main
from data_prep.fixtures import make_model_dir, make_pile
from data_prep.pile import DOMAIN_KEYS
from data_prep.tokenization import load_tokenizer, special_token_policy

EXPECTED_PREFIX = {"llama": "<s>", "llama3": "<|begin_of_text|>", "mistral": "<s>", "opt": "</s>",
                   "gpt2": None, "pythia": None}


@pytest.mark.parametrize("family", sorted(EXPECTED_PREFIX))
def test_policy_per_family(tmp_path, family):
    tok = load_tokenizer(make_model_dir(tmp_path / family, family))
    p = special_token_policy(tok)
    assert p.prefix_token == EXPECTED_PREFIX[family]
    assert p.prefix_id == (None if p.prefix_token is None else tok.token_id(p.prefix_token))
    if family == "opt":
        assert p.prefix_id == 2  # OPT's </s>, as HF prepends it
    assert family in p.describe() or p.family in p.describe()


def test_policy_overrides_and_errors(tmp_path):
    d = make_model_dir(tmp_path / "m", "gpt2")
    tok = load_tokenizer(d)
    assert special_token_policy(tok, "<|endoftext|>").prefix_id == 0
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "add_bos_token": True}))
    assert special_token_policy(tok).prefix_token == "<|endoftext|>"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(DataPrepError, match="config.json.*mamba"):
        special_token_policy(tok)
    assert special_token_policy(tok, "none").prefix_id is None
    with pytest.raises(DataPrepError, match="not in the vocabulary"):
        special_token_policy(tok, "<s>")


def test_survey_inputs_files(tmp_path, capsys):
    pile = make_pile(tmp_path / "p.jsonl.zst", docs_per_domain=8, n_words=40,
                     domains=[d for d in DOMAIN_KEYS if d != "enron_emails"])
    # One short domain: only 2 documents long enough for T.
    from data_prep.pile import write_pile
    write_pile(tmp_path / "short.jsonl", [("enron_emails", "the a of"), ("enron_emails", "law " * 20),
                                           ("enron_emails", "code " * 20)])
    models = [str(make_model_dir(tmp_path / f, f)) for f in ("llama", "opt", "pythia")]
    args = ["survey-inputs", "--pile", str(pile), str(tmp_path / "short.jsonl"), "--model", *models,
            "--out-dir", str(tmp_path / "out"), "--n", "5", "--T", "16", "--seed", "7"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "'Enron Emails' has" in err and "wanted 5" in err
    firsts = {}
    for fam in ("llama", "opt", "pythia"):
        path = tmp_path / "out" / f"{fam}.h5"
        with h5py.File(path) as f:
            assert f.attrs["T"] == 16 and f.attrs["n_per_domain"] == 5 and f.attrs["seed"] == 7
            assert len(f.attrs["tokenizer_sha256"]) == 64 and f.attrs["tokenizer_path"].endswith("tokenizer.json")
            assert len(f.attrs["source_files"]) == 2 and "decided by" in f.attrs["policy"]
            assert set(f.keys()) == set(DOMAIN_KEYS)
            for d in DOMAIN_KEYS:
                t = f[d]["tokens"]
                assert t.dtype == np.int32 and t.shape == ((5, 16) if d != "enron_emails" else (2, 16))
                assert f[d].attrs["n"] == t.shape[0] and f[d]["line"].shape == (t.shape[0],)
            firsts[fam] = f["pile_cc"]["tokens"][:, 0]
            lines = {d: f[d]["line"][:].tolist() for d in DOMAIN_KEYS}
        if fam == "llama":
            llama_lines = lines
        else:
            assert lines == llama_lines  # same documents for every tokenizer
    tok = {f: load_tokenizer(tmp_path / f) for f in ("llama", "opt", "pythia")}
    assert (firsts["llama"] == tok["llama"].token_id("<s>")).all()
    assert (firsts["opt"] == tok["opt"].token_id("</s>")).all()
    assert not np.isin(firsts["pythia"], [tok["pythia"].token_id("<|endoftext|>")]).any()


def test_survey_inputs_flag_errors(tmp_path, capsys):
    pile = make_pile(tmp_path / "p.jsonl", docs_per_domain=1)
    m1, m2 = (str(make_model_dir(tmp_path / f, f)) for f in ("gpt2", "opt"))
    assert main(["survey-inputs", "--pile", str(pile), "--model", m1, m2, "--out", str(tmp_path / "x.h5")]) == 2
    assert "--out takes exactly one --model" in capsys.readouterr().err
    assert not (tmp_path / "x.h5").exists()


# Every tokenizer form a hub repository ships: tokenizer.json, vocab.json + merges.txt (GPT-2, OPT) and
# tokenizer.model (sentencepiece: LLaMA-2, Mistral). The leading special token must not depend on it.
FORMS = [("gpt2", "bpe"), ("opt", "bpe"), ("llama", "sentencepiece"), ("mistral", "sentencepiece")]


@pytest.mark.parametrize("family,form", FORMS, ids=lambda x: x)
def test_policy_per_tokenizer_form(tmp_path, family, form):
    from data_prep.tokenization import tokenizer_fingerprint
    from data_prep.fixtures import FAMILIES

    d = make_model_dir(tmp_path / family, family, form)
    tok = load_tokenizer(d)
    files = {"bpe": ["vocab.json", "merges.txt"], "sentencepiece": ["tokenizer.model"]}[form]
    assert [f.name for f in tok.files] == files and tok.path.name == files[0]
    p = special_token_policy(tok)
    assert p.prefix_token == EXPECTED_PREFIX[family]
    specials = FAMILIES[family][1]
    if p.prefix_token is not None:
        assert p.prefix_id == specials.index(p.prefix_token)  # the family's own id (OPT's </s>: 2, LLaMA's <s>: 1)
    ids = tok.encode("the sink attention token")
    assert ids and not set(ids) & set(range(len(specials)))  # encode() adds no special token by itself
    assert tok.encode_batch(["the sink", "law code"]) == [tok.encode("the sink"), tok.encode("law code")]
    # The fingerprint: one file's sha256, or the sha256 of several files' sha256sum lines.
    if len(files) == 1:
        assert tok.sha256 == hashlib.sha256((d / files[0]).read_bytes()).hexdigest()
    else:
        lines = "".join(f"{hashlib.sha256((d / f).read_bytes()).hexdigest()}  {f}\n" for f in files)
        assert tok.sha256 == hashlib.sha256(lines.encode()).hexdigest() == tokenizer_fingerprint(tok.files)
    # tokenizer.json wins over the others when both are there (LLaMA-2 repositories ship both).
    make_model_dir(tmp_path / "both", family, form)
    make_model_dir(tmp_path / "both", family, "tokenizer.json")
    assert [f.name for f in load_tokenizer(tmp_path / "both").files] == ["tokenizer.json"]


def test_byte_level_bpe_matches_the_tokenizer_that_wrote_it(tmp_path):
    """vocab.json + merges.txt read back give the ids of the tokenizers library's own byte-level BPE that
    trained them (what transformers' GPT2TokenizerFast converts them into), specials kept whole."""
    from tokenizers import ByteLevelBPETokenizer

    d = make_model_dir(tmp_path / "opt", "opt", "bpe")
    ref = ByteLevelBPETokenizer(str(d / "vocab.json"), str(d / "merges.txt"))
    ref.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>"])
    tok = load_tokenizer(d)
    texts = ["the sink attention token", " leading space", "tabs\tand\nnewlines", "ünïcödé 数字 42", "a</s>b"]
    assert tok.encode_batch(texts) == [e.ids for e in ref.encode_batch(texts)]
    assert tok.encode("a</s>b")[1] == 2  # OPT's </s> stays one token, as in the slow tokenizer


def test_survey_inputs_from_every_form_skip_an_unreadable_directory(tmp_path, capsys):
    pile = make_pile(tmp_path / "p.jsonl", docs_per_domain=6, n_words=40)
    models = [make_model_dir(tmp_path / f"{fam}_{form}", fam, form) for fam, form in FORMS]
    broken = make_model_dir(tmp_path / "broken", "llama", "sentencepiece")
    (broken / "tokenizer.model").write_bytes(b"not a sentencepiece model")
    args = ["survey-inputs", "--pile", str(pile), "--model", *map(str, models[:2]), str(broken),
            *map(str, models[2:]), "--out-dir", str(tmp_path / "out"), "--n", "3", "--T", "12"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    skipped = [l for l in err if l.startswith("survey-inputs: skipped")]
    assert len(skipped) == 1 and str(broken) in skipped[0] and "tokenizer.model" in skipped[0], err
    assert err[-1] == f"survey-inputs: 1 of 5 model directories skipped: {broken}"
    assert not (tmp_path / "out" / "broken.h5").exists()
    for (fam, form), d in zip(FORMS, models):
        tok = load_tokenizer(d)
        with h5py.File(tmp_path / "out" / f"{d.name}.h5") as f:
            assert f.attrs["tokenizer_sha256"] == tok.sha256
            assert list(f.attrs["tokenizer_files"]) == [p.name for p in tok.files]
            rows = f["pile_cc"]["tokens"][:]
            assert rows.shape == (3, 12) and rows.max() < tok.vocab_size
            prefix = EXPECTED_PREFIX[fam]
            if prefix is None:
                assert f.attrs["prefix_id"] == -1
            else:
                assert (rows[:, 0] == tok.token_id(prefix)).all() and f.attrs["prefix_id"] == tok.token_id(prefix)
    # Alone, an unreadable directory is an error (nothing to write).
    assert main(["survey-inputs", "--pile", str(pile), "--model", str(broken), "--out", str(tmp_path / "x.h5")]) == 2
    assert "cannot load tokenizer (tokenizer.model)" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["opt_bin_tied", "llama_sp"])
def test_prefix_and_ids_match_transformers(name):
    """The ids data_prep feeds a model (the policy's prefix, then encode()) equal transformers' own
    tokenizer(text).input_ids on the committed forms: OPT's vocab.json + merges.txt (GPT2Tokenizer: </s>
    first) and a LLaMA-style tokenizer.model (LlamaTokenizer: <s> first); tests/fixtures/tokenizers,
    made by tests/python/goldens/gen_hf_torch_bin.py."""
    root = Path(__file__).resolve().parents[1] / "fixtures"
    golden = json.loads((root / "tokenizers" / "golden_ids.json").read_text())[name]
    d = root / "hf" / name if name == "opt_bin_tied" else root / "tokenizers" / name
    tok = load_tokenizer(d)
    assert tok.path.name == {"opt_bin_tied": "vocab.json", "llama_sp": "tokenizer.model"}[name]
    policy = special_token_policy(tok)
    prefix = [] if policy.prefix_id is None else [policy.prefix_id]
    for text, ids in zip(golden["texts"], golden["ids"]):
        assert prefix + tok.encode(text) == ids, (text, golden["tokenizer_class"])
