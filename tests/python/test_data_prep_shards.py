"""Token shards: format, validation, the builder, and the round trip through the C++ reader."""

import os
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from data_prep import DataPrepError
from data_prep.__main__ import main
from data_prep.fixtures import make_model_dir, make_pile
from data_prep.pile import read_pile
from data_prep.shards import (NO_BOS, _unit, build_shards, parse_mixture, read_header, read_shard, shard_info_lines,
                              write_shard)
from data_prep.tokenization import load_tokenizer

REPO = Path(__file__).resolve().parents[2]
SHARD_TOOL = Path(os.environ.get("SINKLAB_BIN_DIR", REPO / "build" / "bin")) / "sinklab-shard"


def needs_tool():
    if not SHARD_TOOL.exists():
        pytest.skip(f"{SHARD_TOOL} not built")


def tool(*args):
    return subprocess.run([str(SHARD_TOOL), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_header_layout_and_round_trip(tmp_path):
    docs = [[5, 6, 7, 0], [9, 0], [1, 2, 3, 4, 0]]
    h = write_shard(tmp_path / "s.bin", docs, vocab_size=100, eos_id=0)
    raw = (tmp_path / "s.bin").read_bytes()
    assert len(raw) == 64 + 11 * 2
    assert raw[:8] == b"SLTOKENS" and int.from_bytes(raw[8:12], "little") == 2 == h.version
    assert int.from_bytes(raw[12:16], "little") == 64 and int.from_bytes(raw[16:20], "little") == 100
    assert int.from_bytes(raw[20:24], "little") == 2 and int.from_bytes(raw[24:32], "little") == 11
    assert int.from_bytes(raw[32:40], "little") == 3 and int.from_bytes(raw[40:44], "little") == 0
    assert int.from_bytes(raw[44:48], "little") == NO_BOS
    assert int.from_bytes(raw[48:52], "little") == zlib.crc32(raw[64:]) == h.crc32
    assert raw[52:60] == b"\0" * 8
    assert int.from_bytes(raw[60:64], "little") == zlib.crc32(raw[:60]) == h.header_crc32
    h2, toks = read_shard(tmp_path / "s.bin")
    assert h2 == h and toks.tolist() == sum(docs, [])
    assert not list(tmp_path.glob(".*tmp*"))  # the temporary file was renamed away


def test_uint32_tokens_for_large_vocab(tmp_path):
    h = write_shard(tmp_path / "big.bin", [[70000, 3, 1]], vocab_size=70001, eos_id=1, bos_id=2)
    assert h.token_bytes == 4 and (tmp_path / "big.bin").stat().st_size == 64 + 12
    assert read_shard(tmp_path / "big.bin")[1].tolist() == [70000, 3, 1]


def test_writer_refuses_bad_documents(tmp_path):
    with pytest.raises(DataPrepError, match="eos"):
        write_shard(tmp_path / "x.bin", [[1, 2]], vocab_size=10, eos_id=0)
    with pytest.raises(DataPrepError, match="out of range"):
        write_shard(tmp_path / "x.bin", [[12, 0]], vocab_size=10, eos_id=0)
    assert not list(tmp_path.iterdir())


def _corrupt(tmp_path):
    write_shard(tmp_path / "good.bin", [list(range(1, 50)) + [0]], vocab_size=64, eos_id=0)
    raw = (tmp_path / "good.bin").read_bytes()
    (tmp_path / "trunc.bin").write_bytes(raw[:-3])
    flipped = bytearray(raw)
    flipped[64 + 17] ^= 0x01
    (tmp_path / "flip.bin").write_bytes(bytes(flipped))
    (tmp_path / "magic.bin").write_bytes(b"XLTOKENS" + raw[8:])
    (tmp_path / "short.bin").write_bytes(raw[:20])
    return tmp_path / "good.bin"


@pytest.mark.parametrize("name,match", [("trunc", "truncated"), ("flip", "CRC"), ("magic", "magic"),
                                        ("short", "shorter")])
def test_python_reader_refuses_corrupt_shards(tmp_path, name, match):
    _corrupt(tmp_path)
    with pytest.raises(DataPrepError, match=match) as e:
        read_shard(tmp_path / f"{name}.bin")
    assert f"{name}.bin" in str(e.value)
    assert main(["shard-info", str(tmp_path / f"{name}.bin")]) == 2


def _with_token(src, dst, position, token_id, version=2):
    """A copy of shard `src` with token `position` set to `token_id`, its CRCs made valid again: the bad id
    of issue 44 that no checksum catches. version=1 writes the version-1 header (no header CRC)."""
    raw = bytearray(Path(src).read_bytes())
    token_bytes = int.from_bytes(raw[20:24], "little")
    at = 64 + position * token_bytes
    raw[at:at + token_bytes] = token_id.to_bytes(token_bytes, "little")
    raw[48:52] = zlib.crc32(raw[64:]).to_bytes(4, "little")
    raw[8:12] = version.to_bytes(4, "little")
    raw[60:64] = (zlib.crc32(raw[:60]) if version >= 2 else 0).to_bytes(4, "little")
    Path(dst).write_bytes(bytes(raw))
    return Path(dst)


@pytest.mark.parametrize("version", [1, 2])
def test_python_reader_checks_every_id_and_the_header_crc(tmp_path, version):
    """An id >= vocab_size under valid CRCs is refused naming the file, its position and the id; version 1
    still reads; in version 2 a changed header field (vocab_size) is caught by the header's CRC."""
    write_shard(tmp_path / "good.bin", [list(range(1, 50)) + [0]], vocab_size=64, eos_id=0)
    ok = _with_token(tmp_path / "good.bin", tmp_path / "ok.bin", 7, 63, version)
    h, toks = read_shard(ok)
    assert h.version == version and toks[7] == 63
    assert shard_info_lines(ok)[-1] == ("header_crc32=none" if version == 1 else f"header_crc32={h.header_crc32:08x}")
    bad = _with_token(tmp_path / "good.bin", tmp_path / "bad.bin", 30, 65000, version)
    with pytest.raises(DataPrepError, match=r"bad\.bin: token id 65000 at position 30 is outside the vocabulary "
                                            r"\[0, 64\)"):
        read_shard(bad)
    raw = bytearray(ok.read_bytes())
    raw[16:20] = (100).to_bytes(4, "little")  # vocab_size 64 -> 100
    (tmp_path / "vocab.bin").write_bytes(bytes(raw))
    if version == 2:
        with pytest.raises(DataPrepError, match="vocab.bin: corrupted shard header"):
            read_header(tmp_path / "vocab.bin")
    else:
        assert read_header(tmp_path / "vocab.bin").vocab_size == 100  # what version 2 closes


@pytest.mark.parametrize("version", [1, 2])
def test_cpp_tool_checks_every_id_and_the_header_crc(tmp_path, version):
    needs_tool()
    write_shard(tmp_path / "good.bin", [list(range(1, 50)) + [0]], vocab_size=64, eos_id=0)
    ok = _with_token(tmp_path / "good.bin", tmp_path / "ok.bin", 7, 63, version)
    r = tool("info", ok)
    assert r.returncode == 0, r.stderr
    assert dict(line.split("=", 1) for line in r.stdout.split()) == dict(line.split("=", 1) for line in shard_info_lines(ok))
    r = tool("info", _with_token(tmp_path / "good.bin", tmp_path / "bad.bin", 30, 65000, version))
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{tmp_path / 'bad.bin'}: token id 65000 at position 30 is outside the vocabulary [0, 64)" in r.stderr
    raw = bytearray(ok.read_bytes())
    raw[16:20] = (100).to_bytes(4, "little")
    (tmp_path / "vocab.bin").write_bytes(bytes(raw))
    r = tool("info", tmp_path / "vocab.bin")
    if version == 2:
        assert r.returncode != 0 and "vocab.bin: corrupted shard header" in r.stderr, r.stderr
    else:
        assert r.returncode == 0 and "vocab_size=100" in r.stdout


@pytest.mark.parametrize("version", [1, 2])
def test_pretrain_refuses_a_bad_id_in_a_valid_shard_at_start(corpus, tmp_path, version):
    """Issue 44's scenario: train.bin with one id >= vocab_size (65000, vocabulary 64) and valid CRCs, in the
    tail no chunk reads, so a 2-step run exited 0 before; now it is refused when the shard is opened, before
    any step, in one line naming the file, the position and the id."""
    pretrain = SHARD_TOOL.parent / "sinklab-pretrain"
    if not pretrain.exists():
        pytest.skip(f"{pretrain} not built")
    n = read_header(corpus / "train.bin").n_tokens
    assert (n - 1) % 16 != 0  # the last token lies in the tail beyond the last chunk of 16 + 1 tokens
    bad = _with_token(corpus / "train.bin", tmp_path / "train.bin", n - 1, 65000, version)
    first = int(read_shard(corpus / "valid.bin")[1][0])
    valid = _with_token(corpus / "valid.bin", tmp_path / "valid.bin", 0, first, version)  # unchanged, in `version`
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([str(pretrain), "--vocab-size=64", "--d-model=32", "--n-layers=2", "--n-heads=2",
                           "--ffn-hidden=64", "--context=16", f"--train-data={bad}",
                           f"--valid-data={valid}", "--steps=2", "--global-batch-tokens=128",
                           "--micro-batch-rows=2", "--lr=3e-3", "--warmup-steps=1", "--eval-every=0",
                           "--eval-rows=8", "--probe-sequences=8", "--probe-length=12", f"--out-dir={out}",
                           "--run-name=t"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, proc.stderr
    assert f"{bad}: token id 65000 at position {n - 1} is outside the vocabulary [0, 64)" in errors[0]
    if (out / "results.h5").exists():  # refused before any step: no loss recorded
        import h5py
        with h5py.File(out / "results.h5", "r") as f:
            assert "runs/t/train/loss" not in f or len(f["runs/t/train/loss"]) == 0


def test_cpp_tool_refuses_corrupt_shards(tmp_path):
    needs_tool()
    good = _corrupt(tmp_path)
    assert tool("info", good).returncode == 0
    for name in ("trunc", "flip", "magic", "short"):
        r = tool("info", tmp_path / f"{name}.bin")
        assert r.returncode != 0, name
        assert r.stderr.strip() and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Shards of a 17-domain fixture corpus with a GPT-2-like and a Llama-like tokenizer."""
    tmp = tmp_path_factory.mktemp("shards")
    pile = make_pile(tmp / "p.jsonl.zst", docs_per_domain=6, n_words=40)
    out = {}
    for fam in ("gpt2", "llama"):
        model = make_model_dir(tmp / fam, fam)
        d = tmp / f"out_{fam}"
        args = ["shards", "--pile", str(pile), "--tokenizer", str(model), "--out-dir", str(d),
                "--valid-fraction", "0.2", "--seed", "3"]
        if fam == "gpt2":
            args += ["--valid-domains", "Pile-CC,github"]
        if fam == "llama":
            args += ["--bos", "--pad-vocab-to", "50432"]
        assert main(args) == 0
        out[fam] = (pile, model, d)
    return out


def test_builder_eos_bos_split_and_padding(built):
    pile, model, d = built["gpt2"]
    tok = load_tokenizer(model)
    texts = [doc.text for doc in read_pile([pile])]
    h_tr, train = read_shard(d / "train.bin")
    h_va, valid = read_shard(d / "valid.bin")
    assert h_tr.n_documents + h_va.n_documents == len(texts) == 17 * 6
    assert 0 < h_va.n_documents < h_tr.n_documents
    assert h_tr.bos_id == NO_BOS and h_tr.eos_id == tok.token_id("<|endoftext|>")
    assert h_tr.vocab_size == tok.vocab_size
    expected = sorted(tuple(tok.encode(t) + [h_tr.eos_id]) for t in texts)
    got = []
    for arr in (train, valid):
        ends = np.flatnonzero(np.asarray(arr) == h_tr.eos_id)
        got += [tuple(x) for x in np.split(np.asarray(arr).tolist(), ends[:-1] + 1)]
    assert sorted(got) == expected

    _, lmodel, ld = built["llama"]
    lt = load_tokenizer(lmodel)
    h, toks = read_shard(ld / "train.bin")
    assert h.vocab_size == 50432 and h.bos_id == lt.token_id("<s>") and h.eos_id == lt.token_id("</s>")
    assert toks[0] == h.bos_id and int((np.asarray(toks) == h.bos_id).sum()) == h.n_documents


def _documents(arr, eos_id):
    ends = np.flatnonzero(np.asarray(arr) == eos_id)
    return [tuple(x) for x in np.split(np.asarray(arr).tolist(), ends[:-1] + 1)] if len(arr) else []


def test_builder_per_domain_validation_shards(tmp_path, built):
    """--valid-domains Pile-CC writes valid_pile_cc.bin (the file the paper's job files validate on):
    exactly the held-out Pile-CC documents of valid.bin, each once, and still all of them when the
    mixture drops or repeats the domain."""
    pile, model, d = built["gpt2"]
    tok = load_tokenizer(model)
    h_va, valid = read_shard(d / "valid.bin")
    held_out = set(_documents(valid, h_va.eos_id))
    for key in ("pile_cc", "github"):
        # The fixture's domains share texts, so the expected documents are found by their split hash.
        expected = [tuple(tok.encode(doc.text) + [h_va.eos_id]) for doc in read_pile([pile])
                    if doc.domain == key and _unit(3, "split", doc.file_index, doc.line) < 0.2]
        h, arr = read_shard(d / f"valid_{key}.bin")
        docs = _documents(arr, h.eos_id)
        assert h.vocab_size == h_va.vocab_size and h.n_documents == len(docs) > 0
        assert docs == expected and set(docs) <= held_out
    base = ["shards", "--pile", str(pile), "--tokenizer", str(model), "--valid-fraction", "0.2", "--seed", "3",
            "--valid-domains", "pile_cc"]
    assert main(base + ["--mixture", "Pile-CC=0", "--out-dir", str(tmp_path / "drop")]) == 0
    assert (tmp_path / "drop" / "valid_pile_cc.bin").read_bytes() == (d / "valid_pile_cc.bin").read_bytes()
    assert main(base + ["--mixture", "Pile-CC=3", "--out-dir", str(tmp_path / "triple")]) == 0
    assert (tmp_path / "triple" / "valid_pile_cc.bin").read_bytes() == (d / "valid_pile_cc.bin").read_bytes()
    assert main(base[:-1] + ["Books3", "--out-dir", str(tmp_path / "bad")]) == 2


def test_builder_workers_and_mixture(tmp_path, built):
    pile, model, d1 = built["gpt2"]
    args = ["shards", "--pile", str(pile), "--tokenizer", str(model), "--valid-fraction", "0.2",
            "--seed", "3", "--workers", "2", "--out-dir"]
    assert main(args + [str(tmp_path / "w2")]) == 0
    for name in ("train.bin", "valid.bin"):
        assert (tmp_path / "w2" / name).read_bytes() == (d1 / name).read_bytes()
    res = build_shards([pile], model, tmp_path / "mix", valid_fraction=0.2, seed=3,
                       mixture=parse_mixture("Github=0,ArXiv=2,pile_cc=0.5"), quiet=True)
    per_domain = {k: res.documents_per_domain["train"][k] + res.documents_per_domain["valid"][k]
                  for k in res.documents_per_domain["train"]}
    assert per_domain["github"] == 0 and per_domain["arxiv"] == 12 and 0 <= per_domain["pile_cc"] <= 6
    assert all(n == 6 for k, n in per_domain.items() if k not in ("github", "arxiv", "pile_cc"))
    assert read_header(tmp_path / "mix" / "train.bin").n_documents == sum(res.documents_per_domain["train"].values())


def test_builder_errors(tmp_path, built, capsys):
    pile, model, _ = built["gpt2"]
    base = ["shards", "--pile", str(pile), "--tokenizer", str(model), "--out-dir", str(tmp_path)]
    assert main(base + ["--pad-vocab-to", "10"]) == 2
    assert "--pad-vocab-to" in capsys.readouterr().err
    assert main(base + ["--mixture", "Books3=1"]) == 2
    assert "--mixture" in capsys.readouterr().err
    assert main(["shards", "--pile", str(pile), "--tokenizer", str(tmp_path / "none"),
                 "--out-dir", str(tmp_path)]) == 2
    assert "tokenizer.json" in capsys.readouterr().err


def test_round_trip_through_cpp_reader(built):
    needs_tool()
    for fam in ("gpt2", "llama"):
        _, _, d = built[fam]
        for name in ("train.bin", "valid.bin"):
            h, toks = read_shard(d / name)
            r = tool("info", d / name)
            assert r.returncode == 0, r.stderr
            info = dict(line.split("=", 1) for line in r.stdout.split())
            for key in ("vocab_size", "token_bytes", "n_tokens", "n_documents", "eos_id"):
                assert int(info[key]) == getattr(h, key), key
            assert int(info["bos_id"]) == (-1 if h.bos_id == NO_BOS else h.bos_id)
            assert int(info["crc32"], 16) == h.crc32
            assert info == dict(line.split("=", 1) for line in shard_info_lines(d / name))
            r = tool("dump", d / name)
            assert r.returncode == 0, r.stderr
            assert [int(x) for x in r.stdout.split()] == np.asarray(toks).tolist()
            r = tool("dump", d / name, "--begin", 5, "--count", 7)
            assert [int(x) for x in r.stdout.split()] == np.asarray(toks[5:12]).tolist()
