"""Special-token policy per tokenizer family, and the survey-inputs HDF5 files."""

import json

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
