"""Writes the committed seed corpora of the libFuzzer targets (tests/fuzz/corpus/<target>/): small valid
inputs of each format, made here from sinklab's own writers and fixtures, so the fuzzers start from what
the parsers accept. Deterministic; run from the repository root with the CI venv:

    .venv/bin/python tests/fuzz/make_seeds.py
"""
import json
import random
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

root = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root))
from data_prep.shards import write_shard  # noqa: E402

corpus = root / "tests" / "fuzz" / "corpus"


def fresh(target: str) -> Path:
    d = corpus / target
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def safetensors_bytes(tensors: dict, metadata: dict | None = None) -> bytes:
    """safetensors as the format's spec writes it: 8-byte header length, JSON header, data."""
    header, data = {}, b""
    for name, (dtype, arr) in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def seeds_safetensors():
    d = fresh("fuzz_safetensors")
    rng = np.random.default_rng(0)
    (d / "empty").write_bytes(safetensors_bytes({}))
    (d / "f32_2d").write_bytes(safetensors_bytes({"w": ("F32", rng.standard_normal((3, 4)).astype(np.float32))},
                                                 {"format": "pt"}))
    (d / "mixed").write_bytes(safetensors_bytes({
        "a": ("BF16", rng.integers(0, 2**16, (2, 3), dtype=np.uint16)),
        "b": ("F16", rng.standard_normal(5).astype(np.float16)),
        "c": ("I32", np.arange(6, dtype=np.int32).reshape(1, 2, 3)),
        "d": ("F32", np.zeros((0, 4), np.float32)),
    }))
    (d / "scalar").write_bytes(safetensors_bytes({"s": ("F64", np.array(1.5))}))


def seeds_index():
    d = fresh("fuzz_safetensors_index")
    fixture = root / "tests" / "fixtures" / "hf" / "llama_sharded_f16" / "model.safetensors.index.json"
    index = json.loads(fixture.read_text())
    (d / "fixture").write_text(json.dumps(index))
    shards = sorted(set(index["weight_map"].values()))
    first = {k: v for k, v in index["weight_map"].items() if v == shards[0]}
    (d / "one_shard").write_text(json.dumps({"metadata": {}, "weight_map": first}))
    (d / "empty_map").write_text(json.dumps({"weight_map": {}}))


def seeds_hf_config():
    d = fresh("fuzz_hf_config")
    for cfg in sorted((root / "tests" / "fixtures" / "hf").glob("*/config.json")):
        shutil.copy(cfg, d / cfg.parent.name)


def seeds_shard():
    d = fresh("fuzz_shard")
    tmp = d / "tmp.bin"
    for name, docs, vocab, eos, bos in [("u16", [[5, 6, 7, 0], [8, 0]], 100, 0, None),
                                        ("u16_bos", [[1, 7, 2], [1, 3, 4, 5, 2]], 300, 2, 1),
                                        ("u32", [[70000, 1, 3], [3]], 70001, 3, None),
                                        ("empty", [], 10, 0, None)]:
        kwargs = {} if bos is None else {"bos_id": bos}
        write_shard(tmp, docs, vocab_size=vocab, eos_id=eos, **kwargs)
        tmp.rename(d / name)
    # A version-1 shard (no header CRC: bytes 60..63 reserved, zero), which readers still accept; the
    # fuzzer mutates its header fields without having to match a checksum.
    v1 = bytearray((d / "u16").read_bytes())
    v1[8:12] = (1).to_bytes(4, "little")
    v1[60:64] = bytes(4)
    (d / "u16_version1").write_bytes(bytes(v1))


def seeds_options():
    """An ini text followed by the two bytes fuzz_options reads first from the end (FuzzedDataProvider
    takes integers from the back): no extra command-line words, world size 2."""
    d = fresh("fuzz_options")
    jobs = sorted((root / "jobs" / "pretrain").rglob("*.ini"))
    picked = [p for p in jobs if p.parent.name == "pretrain"] + jobs[::12]
    for p in picked:
        text = p.read_text().encode()
        (d / f"{p.parent.name}__{p.stem}").write_bytes(text + bytes([0, 1]))
    # a command-line word (--steps 3 via one word "--steps=3") and a short ini
    (d / "flag_and_ini").write_bytes(b"--steps=3" + b"train-data = a.bin\nvalid-data = b.bin\n" + bytes([9, 1, 0]))


def seeds_torch_file():
    """torch.save files of the fixtures (gen_hf_torch_bin.py wrote them): views, dtypes, a tied model."""
    d = fresh("fuzz_torch_file")
    fixtures = root / "tests" / "fixtures"
    for f in [*sorted((fixtures / "torch").glob("*.pt")), fixtures / "hf" / "gpt2_bin" / "pytorch_model.bin"]:
        shutil.copy(f, d / f"{f.parent.name}__{f.name}")


def seeds_survey_inputs():
    """fuzz_survey_inputs builds its HDF5 file from the bytes (structure-aware): random seeds suffice."""
    d = fresh("fuzz_survey_inputs")
    rnd = random.Random(0)
    for i, n in enumerate([16, 64, 256, 1024]):
        (d / f"random_{i}").write_bytes(bytes(rnd.getrandbits(8) for _ in range(n)))


def seeds_multiple_choice():
    """fuzz_multiple_choice builds its HDF5 file from the bytes (structure-aware): random seeds suffice."""
    d = fresh("fuzz_multiple_choice")
    rnd = random.Random(1)
    for i, n in enumerate([16, 64, 256, 1024]):
        (d / f"random_{i}").write_bytes(bytes(rnd.getrandbits(8) for _ in range(n)))


def seeds_gguf():
    """Complete tiny Llama GGUF files (one layer, F32 and Q8_0) written by the GGUF importer's own test
    helpers (tests/python/test_gguf_import.py: gguf's writer, llama.cpp's layout), and a foreign one."""
    sys.path.insert(0, str(root / "tests" / "python"))
    import test_gguf_import as t

    d = fresh("fuzz_gguf")
    tok = t.train_tokenizer("gpt-2")
    rng = np.random.default_rng(1)
    t.write_gguf(d / "llama_f32", t.random_llama(rng, vocab=300, d=8, n_heads=2, n_kv=1, ffn=16, n_layers=1),
                 tok, n_heads=2, n_kv=1, pre="gpt-2")
    t.write_gguf(d / "llama_q8_0", t.random_llama(rng, vocab=300, d=32, n_heads=2, n_kv=1, ffn=32, n_layers=1),
                 tok, qtype=t.Q.Q8_0, n_heads=2, n_kv=1, pre="gpt-2")
    t.write_gguf(d / "other_arch", t.random_llama(rng, vocab=300, d=8, n_heads=2, n_kv=1, ffn=8, n_layers=1),
                 tok, n_heads=2, n_kv=1, arch="gpt2", pre="gpt-2")


if __name__ == "__main__":
    seeds_safetensors()
    seeds_index()
    seeds_hf_config()
    seeds_shard()
    seeds_options()
    seeds_survey_inputs()
    seeds_multiple_choice()
    seeds_torch_file()
    seeds_gguf()
    for d in sorted(corpus.iterdir()):
        print(f"{d.name}: {len(list(d.iterdir()))} seeds, {sum(f.stat().st_size for f in d.iterdir())} bytes")
