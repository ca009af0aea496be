"""The mini-corpus builder on a reduced size (the full build is measured by hand: see README)."""

import json

import h5py

from data_prep.__main__ import main
from data_prep.pile import DOMAIN_KEYS, SkipReport, count_domains
from data_prep.shards import read_shard
from data_prep.tokenization import load_tokenizer, special_token_policy


def test_reduced_mini_corpus(tmp_path, capsys):
    out = tmp_path / "mini"
    args = ["mini-corpus", "--out", str(out), "--max-chars-per-domain", "40000", "--vocab-size", "400",
            "--survey-n", "5", "--T", "32", "--workers", "2"]
    assert main(args) == 0
    capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["domains"]) == set(DOMAIN_KEYS)
    report = SkipReport()
    counts = count_domains([out / "pile_mini.jsonl.zst"], report)
    assert report.skipped == 0
    for d in DOMAIN_KEYS:
        assert counts[d]["documents"] == manifest["domains"][d]["documents"] >= 5
        assert manifest["domains"][d]["chars"] <= 40000 + 7000 and manifest["domains"][d]["survey_rows"] == 5
    biggest = max(s["chars"] for s in manifest["domains"].values())
    assert biggest < 0.2 * sum(s["chars"] for s in manifest["domains"].values())  # no domain dominates

    tok = load_tokenizer(out / "tokenizer")
    assert tok.vocab_size == 400 and tok.token_id("<|endoftext|>") == 0 and tok.token_id("<|bos|>") == 1
    assert special_token_policy(tok).prefix_id is None  # GPT-2-like: no BOS
    text = "Let f(x) = 3*x**2 + 1. What is f(2)?"
    assert tok.decode(tok.encode(text)) == text  # byte-level: lossless
    h, toks = read_shard(out / "train.bin")
    assert h.vocab_size == 400 and h.eos_id == 0 and h.bos_id == 0xFFFFFFFF
    assert h.n_tokens == sum(s["train_tokens"] for s in manifest["domains"].values())
    with h5py.File(out / "survey_inputs.h5") as f:
        assert f["github"]["tokens"].shape == (5, 32) and f.attrs["prefix_id"] == -1

    # Idempotent: same parameters -> says so and does not rewrite anything.
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert main(args) == 0
    assert "up to date, skipping" in capsys.readouterr().err
    assert mtimes == {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    # A damaged output is noticed and rebuilt, to the same bytes.
    before = (out / "train.bin").read_bytes()
    (out / "train.bin").write_bytes(before[:-2])
    assert main(args) == 0
    assert "up to date" not in capsys.readouterr().err
    assert (out / "train.bin").read_bytes() == before
