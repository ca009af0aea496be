"""data_prep chat-demo: the demo's generated chat is deterministic, in the layout `data_prep sft` reads, and
its answers are right; sft masks exactly the assistant turns of it."""
import json

import h5py
from data_prep.__main__ import main
from data_prep.fixtures import make_model_dir
from data_prep.tokenization import load_tokenizer


def test_chat_demo_is_deterministic_and_correct(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert main(["chat-demo", "--out", str(a), "--n", "50", "--seed", "3"]) == 0
    assert main(["chat-demo", "--out", str(b), "--n", "50", "--seed", "3"]) == 0
    assert main(["chat-demo", "--out", str(c), "--n", "50", "--seed", "4"]) == 0
    assert a.read_bytes() == b.read_bytes() and a.read_bytes() != c.read_bytes()
    records = [json.loads(line) for line in a.read_text().splitlines()]
    assert len(records) == 50
    sums = 0
    for r in records:
        roles = [m["role"] for m in r["messages"] if m["role"] != "system"]
        assert roles and roles == ["user", "assistant"] * (len(roles) // 2)
        for q, ans in zip(r["messages"][-len(roles)::2], r["messages"][-len(roles) + 1::2]):
            assert ans["content"].startswith("The answer is ") and ans["content"].endswith(".")
            if q["content"].startswith("What is ") and " + " in q["content"]:  # check the sums
                x, y = q["content"][len("What is "):-1].split(" + ")
                assert ans["content"] == f"The answer is {int(x) + int(y)}."
                sums += 1
    assert sums > 0


def test_sft_of_chat_demo_masks_the_answers(tmp_path):
    main(["chat-demo", "--out", str(tmp_path / "chat.jsonl"), "--n", "20", "--seed", "0"])
    model = make_model_dir(tmp_path / "m", "gpt2")
    assert main(["sft", "--input", str(tmp_path / "chat.jsonl"), "--model", str(model), "--out",
                 str(tmp_path / "sft.h5"), "--context", "64"]) == 0
    tok = load_tokenizer(model)
    with h5py.File(tmp_path / "sft.h5", "r") as f:
        tokens, mask = f["tokens"][:].reshape(-1), f["loss_mask"][:].reshape(-1)
        assert f.attrs["n_conversations"] == 20
    answers = [m["content"] for line in (tmp_path / "chat.jsonl").read_text().splitlines()
               for m in json.loads(line)["messages"] if m["role"] == "assistant"]
    eos = tok.token_id("<|endoftext|>")
    expected = [t for a in answers for t in tok.encode(a) + [eos]]
    assert tokens[mask == 1].tolist() == expected  # the answers with their EOS, nothing else
