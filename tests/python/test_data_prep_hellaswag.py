"""data_prep hellaswag: HellaSwag records -> the multiple-choice tokens file the survey scores (Fig. 10).

The text rules are lm-evaluation-harness's hellaswag task (context from activity_label, ctx_a and the
capitalised ctx_b; WikiHow tags cleaned; each ending scored as " " + ending); the token split is its
_encode_pair (the continuation's tokens are those of context + continuation after the context's own)."""

import json

import h5py
import pytest

from data_prep.__main__ import main
from data_prep.fixtures import make_model_dir
from data_prep.hellaswag import clean, encode_pair, example_text
from data_prep.tokenization import load_tokenizer

RECORDS = [
    {"activity_label": "Law", "ctx_a": "the court heard the answer", "ctx_b": "the user",
     "endings": ["was not at the court", "is the code", "plus two equals four", "answer a question"], "label": 2},
    {"activity_label": "Math", "ctx": "one plus two", "endings": ["equals three", "is a sink"], "label": "0"},
    {"activity_label": "Bad", "ctx": "one", "endings": ["two"], "label": 0},          # one ending
    {"activity_label": "Bad", "ctx": "one", "endings": ["two", "three"], "label": 5},  # label outside
]


def test_text_rules_as_the_harness():
    assert clean("  How to sink [title] Open the paper [step] now.  ") == "How to sink. Open the paper now."
    assert clean("a [header] b") == "a b"
    context, choices, label = example_text(RECORDS[0])
    assert context == "Law: the court heard the answer The user"  # ctx_b capitalised
    assert choices == RECORDS[0]["endings"] and label == 2
    assert example_text(RECORDS[1]) == ("Math: one plus two", ["equals three", "is a sink"], 0)  # label as a string
    for bad in RECORDS[2:]:
        with pytest.raises(ValueError):
            example_text(bad)


@pytest.mark.parametrize("family,form", [("gpt2", "bpe"), ("llama", "sentencepiece"), ("opt", "tokenizer.json")])
def test_token_split_and_prefix(tmp_path, family, form):
    """Context + continuation tokens are the encoding of the whole text (a byte-level BPE and a
    sentencepiece tokenizer, where the leading space belongs to the continuation's first token), after
    the family's prefix token; trailing spaces of a context move to its continuation."""
    tok = load_tokenizer(make_model_dir(tmp_path / family, family, form))
    prefix = {"gpt2": [], "llama": [tok.token_id("<s>")], "opt": [2]}[family]
    for context, cont in (("the court heard the answer", " plus two"), ("one plus two ", "equals three")):
        ctx_ids, cont_ids = encode_pair(tok, prefix, context, cont)
        assert ctx_ids[:len(prefix)] == prefix and cont_ids
        assert ctx_ids[len(prefix):] == tok.encode(context.rstrip())
        assert ctx_ids[len(prefix):] + cont_ids == tok.encode(context + cont)


def test_file_layout(tmp_path):
    model = make_model_dir(tmp_path / "m", "llama", "sentencepiece")
    jsonl = tmp_path / "hs.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\nnot json\n")
    out = tmp_path / "out" / "m.h5"
    assert main(["hellaswag", "--jsonl", str(jsonl), "--model", str(model), "--out", str(out)]) == 0
    tok = load_tokenizer(model)
    bos = tok.token_id("<s>")
    with h5py.File(out, "r") as f:
        assert f.attrs["kind"] == "hellaswag" and f.attrs["n_examples"] == 2 and f.attrs["prefix_id"] == bos
        assert f.attrs["tokenizer_sha256"] == tok.sha256
        assert f["label"][:].tolist() == [2, 0] and f["line"][:].tolist() == [1, 2]
        assert f["example_offsets"][:].tolist() == [0, 4, 6]
        tokens, offsets, starts = f["tokens"][:], f["choice_offsets"][:], f["cont_start"][:]
        assert offsets[0] == 0 and offsets[-1] == len(tokens) and len(starts) == 6
        texts = [example_text(r) for r in RECORDS[:2]]
        c = 0
        for context, choices, _ in texts:
            for choice in choices:
                row = tokens[offsets[c]:offsets[c + 1]].tolist()
                assert row[0] == bos and row[1:] == tok.encode(context + " " + choice)
                assert row[1:starts[c]] == tok.encode(context)
                assert f["choice_chars"][c] == len(choice)
                c += 1


def test_no_usable_example_is_one_error(tmp_path, capsys):
    model = make_model_dir(tmp_path / "m", "gpt2")
    jsonl = tmp_path / "hs.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in RECORDS[2:]) + "\n")
    assert main(["hellaswag", "--jsonl", str(jsonl), "--model", str(model), "--out", str(tmp_path / "x.h5")]) != 0
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and "hs.jsonl: no usable HellaSwag example" in errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hs.jsonl", "m"]  # nothing written
