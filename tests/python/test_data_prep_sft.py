"""SFT formatting: chat template, loss mask only on assistant tokens, packing, bad records."""

import json

import h5py
import numpy as np

from data_prep.__main__ import main
from data_prep.fixtures import make_model_dir
from data_prep.sft import build_sft, render
from data_prep.tokenization import load_tokenizer


def _records(path):
    good = [
        {"prompt": "q", "prompt_id": "1", "messages": [
            {"role": "user", "content": "what is the first token"},
            {"role": "assistant", "content": "the sink token"},
            {"role": "user", "content": "and the value"},
            {"role": "assistant", "content": "a value of one"}]},
        {"messages": [{"role": "system", "content": "answer the question"},
                      {"role": "user", "content": "two plus two"},
                      {"role": "assistant", "content": "four"}]},
    ]
    lines = [json.dumps(good[0]), "{bad json", json.dumps({"messages": []}),
             json.dumps({"messages": [{"role": "robot", "content": "x"}]}),
             json.dumps({"messages": [{"role": "user", "content": "only a question"}]}),
             json.dumps({"messages": [{"role": "user"}]}), json.dumps(good[1])]
    path.write_text("\n".join(lines) + "\n")
    return good


def test_render_masks_only_assistant_tokens(tmp_path):
    tok = load_tokenizer(make_model_dir(tmp_path / "m", "llama"))
    eos = tok.token_id("</s>")
    turns = [("user", "what is the first token"), ("assistant", "the sink token"),
             ("user", "and the value"), ("assistant", "a value of one")]
    ids, mask = render(tok, turns, eos, tok.token_id("<s>"))
    assert len(ids) == len(mask) and ids[0] == tok.token_id("<s>") and mask[0] == 0
    masked = [i for i, m in zip(ids, mask) if m]
    assert masked == tok.encode("the sink token") + [eos] + tok.encode("a value of one") + [eos]
    assert ids[-1] == eos and mask[-1] == 1
    # every user token is unmasked
    user_ids = set(tok.encode("what is first and"))
    assert all(m == 0 for i, m in zip(ids, mask) if i in user_ids)


def test_sft_file_packing_and_report(tmp_path, capsys):
    _records(tmp_path / "chat.jsonl")
    model = make_model_dir(tmp_path / "m", "gpt2")
    out = tmp_path / "sft.h5"
    assert main(["sft", "--input", str(tmp_path / "chat.jsonl"), "--model", str(model), "--out", str(out),
                 "--context", "16"]) == 0
    err = capsys.readouterr().err
    assert "read 7 records: 2 accepted, 5 skipped" in err
    for reason in ("invalid JSON", "missing or empty 'messages'", "unknown role", "no assistant turn",
                   "message without string 'content'"):
        assert f"skipped 1 ({reason})" in err
    tok = load_tokenizer(model)
    eos = tok.token_id("<|endoftext|>")
    with h5py.File(out) as f:
        t, m = f["tokens"][:], f["loss_mask"][:]
        assert t.dtype == np.int32 and m.dtype == np.uint8 and t.shape == m.shape and t.shape[1] == 16
        n = int(f.attrs["n_tokens"])
        assert f.attrs["n_conversations"] == 2 and f.attrs["n_pad_tokens"] == t.size - n
        assert "assistant" in f.attrs["chat_template"]
    flat_t, flat_m = t.reshape(-1), m.reshape(-1)
    assert (flat_m[n:] == 0).all() and (flat_t[n:] == eos).all()
    assert tok.decode([int(i) for i in flat_t[:n][flat_m[:n] == 1]]).split() == \
        "the sink token <|endoftext|> a value of one <|endoftext|> four <|endoftext|>".split()
    assert int(flat_m.sum()) == f_loss(out)


def f_loss(path):
    with h5py.File(path) as f:
        return int(f.attrs["n_loss_tokens"])


def test_sft_no_usable_record(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text("{nope\n")
    model = make_model_dir(tmp_path / "m", "gpt2")
    assert main(["sft", "--input", str(tmp_path / "bad.jsonl"), "--model", str(model),
                 "--out", str(tmp_path / "o.h5")]) == 2
    assert "bad.jsonl: no usable conversation" in capsys.readouterr().err
    assert not (tmp_path / "o.h5").exists()
    assert build_sft  # imported API
