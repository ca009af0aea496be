"""GGUF importer: tiny Llama GGUF files written here with gguf's own writer and quantiser, imported with
data_prep.gguf_import, compared with the original weights and with gguf's own dequantiser (an
independent reference), plus the real SmolLM2 file when env/setup.sh has fetched it."""

import json
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as Q

from data_prep import DataPrepError
from data_prep.__main__ import main
from data_prep.gguf_import import BLOCK_FORMATS, dequantize, import_gguf, quantization_summary, unpermute_qk
from data_prep.safetensors_io import read_safetensors

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = REPO_ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TRAINING_TEXT = [
    "The attention sink is the first token of the sequence.",
    "Most heads put a large share of their attention on it, whatever it says.",
    "In 2024 the model saw 12345 tokens per second; 3.50 dollars per hour.",
    "Queries and keys rotate in pairs; values do not rotate at all!",
    "def forward(x):\n    return softmax(q @ k.T / sqrt(d)) @ v\n",
    "Ünïcödé text, naïve café, 東京 and emoji 🙂 are bytes in the end.",
]
SAMPLES = [
    "The sink token draws attention in 2024, 12345 times.",
    "Hello world!\n\n  indented   spaces\tand tabs",
    "<|im_start|>user\nWhat is 3.50 + 1?<|im_end|>",
    "naïve café 東京 🙂 unseen wörds",
]


# ---------------------------------------------------------------------------------------------------
# Helpers: the Llama layout, written out here independently of data_prep.gguf_import
# ---------------------------------------------------------------------------------------------------

def llama_cpp_permute(w, n_heads):
    """convert_hf_to_gguf.py's reordering of q_proj/k_proj rows (HF half-split rotary pairs ->
    adjacent pairs), written as an explicit index map: GGUF row h*hd + 2i + s = HF row h*hd + s*hd/2 + i."""
    hd = w.shape[0] // n_heads
    out = np.empty_like(w)
    for h in range(n_heads):
        for i in range(hd // 2):
            for s in range(2):
                out[h * hd + 2 * i + s] = w[h * hd + s * hd // 2 + i]
    return out


def llama_cpp_unpermute(w, n_heads):
    hd = w.shape[0] // n_heads
    out = np.empty_like(w)
    for h in range(n_heads):
        for i in range(hd // 2):
            for s in range(2):
                out[h * hd + s * hd // 2 + i] = w[h * hd + 2 * i + s]
    return out


BLOCK = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def random_llama(rng, *, vocab, d=64, n_heads=4, n_kv=2, ffn=128, n_layers=2, tied=True):
    """HF-named float32 weights of a random Llama; matrices N(0, 0.02), norms 1 + N(0, 0.1)."""
    hd = d // n_heads
    shapes = {"model.embed_tokens.weight": (vocab, d), "model.norm.weight": (d,)}
    if not tied:
        shapes["lm_head.weight"] = (vocab, d)
    for i in range(n_layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                       p + "self_attn.q_proj.weight": (n_heads * hd, d), p + "self_attn.k_proj.weight": (n_kv * hd, d),
                       p + "self_attn.v_proj.weight": (n_kv * hd, d), p + "self_attn.o_proj.weight": (d, n_heads * hd),
                       p + "mlp.gate_proj.weight": (ffn, d), p + "mlp.up_proj.weight": (ffn, d),
                       p + "mlp.down_proj.weight": (d, ffn)})
    w = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            w[name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            w[name] = (0.02 * rng.standard_normal(shape)).astype(np.float32)
    return w


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, i, rest = hf.split(".", 3)
    short = {v: k for k, v in BLOCK.items()}[rest.removesuffix(".weight")]
    return f"blk.{i}.{short}.weight"


def train_tokenizer(pre):
    """A byte-level BPE (~300 tokens) trained on TRAINING_TEXT with the pre-tokenizer that the GGUF
    name `pre` stands for, spelt out here as SmolLM2 / GPT-2 / Llama-3 tokenizer.json files spell it."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok = Tokenizer(models.BPE())
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre == "gpt-2":
        tok.pre_tokenizer = byte_level
    elif pre == "llama-bpe":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                                       r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                                 behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    if pre == "llama-bpe":  # Llama-3's tokenizer.json sets ignore_merges, as llama.cpp does for it
        j = json.loads(tok.to_str())
        j["model"]["ignore_merges"] = True
        tok = Tokenizer.from_str(json.dumps(j))
    return tok


def quantize(w, qtype):
    """(data, raw_dtype) for GGUFWriter.add_tensor: gguf's own quantiser."""
    if qtype == Q.F32:
        return w, None
    if qtype == Q.F16:
        return w.astype(np.float16), None
    return gguf.quants.quantize(w, qtype), qtype


def write_gguf(path, weights, tok, *, qtype=Q.F32, n_heads=4, n_kv=2, arch="llama", pre="smollm",
               tokenizer_model="gpt2", raw_tensors=None, add_bos=False):
    """A GGUF file the way convert_hf_to_gguf.py lays out a Llama: q/k rows permuted, 2-D weights in
    `qtype`, norms F32. raw_tensors: {gguf name: (uint8 blocks, type)} written as given instead."""
    vocab = json.loads(tok.to_str())["model"]
    tokens = sorted(vocab["vocab"], key=vocab["vocab"].get)
    assert [vocab["vocab"][t] for t in tokens] == list(range(len(tokens)))
    d = weights["model.embed_tokens.weight"].shape[1]
    ffn = weights["model.layers.0.mlp.up_proj.weight"].shape[0]
    n_layers = 1 + max(int(k.split(".")[2]) for k in weights if k.startswith("model.layers."))
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    w.add_context_length(256)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(100000.0)
    w.add_rope_dimension_count(d // n_heads)
    w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_merges([" ".join(m) for m in vocab["merges"]])
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_unk_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(add_bos)
    for hf, x in weights.items():
        name = gguf_name(hf)
        if hf.endswith("q_proj.weight"):
            x = llama_cpp_permute(x, n_heads)
        elif hf.endswith("k_proj.weight"):
            x = llama_cpp_permute(x, n_kv)
        if raw_tensors and name in raw_tensors:
            data, raw_dtype = raw_tensors[name]
        elif x.ndim == 1:
            data, raw_dtype = x, None
        else:
            data, raw_dtype = quantize(x, qtype)
        w.add_tensor(name, data, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def error_bound(x, qtype):
    """Largest |dequantised - original| a correct quantise/dequantise may give, per element of x
    (rows cut into blocks of 32 along the last axis). Scales are rounded to float16 (relative error
    u = 2^-11), which adds at most |q| * u * step to the rounding error of the block format:
      F32 0;  F16 |x| u;  BF16 |x| 2^-8;
      Q8_0  step = amax/127, error <= step (1/2 + 127 u)
      Q4_0  step = amax/8 (levels -8..7 * step; the top level is clipped), error <= step (1 + 8 u)
      Q5_0  step = amax/16, same argument, error <= step (1 + 16 u)
      Q4_1  step = (max - min)/15, error <= step (1/2 + 15 u) + |min| u   (the offset is rounded too)
      Q5_1  step = (max - min)/31, error <= step (1/2 + 31 u) + |min| u
    plus 1e-6 * amax for float32 arithmetic."""
    u = 2.0 ** -11
    if qtype == Q.F32:
        return np.zeros_like(x)
    if qtype == Q.F16:
        return np.abs(x) * u + 2.0 ** -25
    if qtype == Q.BF16:
        return np.abs(x) * 2.0 ** -8
    b = x.reshape(-1, 32)
    amax, lo, hi = np.abs(b).max(1, keepdims=True), b.min(1, keepdims=True), b.max(1, keepdims=True)
    bound = {
        Q.Q8_0: amax / 127 * (0.5 + 127 * u),
        Q.Q4_0: amax / 8 * (1 + 8 * u),
        Q.Q5_0: amax / 16 * (1 + 16 * u),
        Q.Q4_1: (hi - lo) / 15 * (0.5 + 15 * u) + np.abs(lo) * u,
        Q.Q5_1: (hi - lo) / 31 * (0.5 + 31 * u) + np.abs(lo) * u,
    }[qtype] + 1e-6 * amax
    return np.broadcast_to(bound, b.shape).reshape(x.shape)


@pytest.fixture(scope="module")
def smollm_tok():
    return train_tokenizer("smollm")


def load_dir(d):
    tensors, meta = read_safetensors(d / "model.safetensors")
    return {k: np.array(v) for k, v in tensors.items()}, meta, json.loads((d / "config.json").read_text())


# ---------------------------------------------------------------------------------------------------
# Dequantisers against gguf's own
# ---------------------------------------------------------------------------------------------------

def random_blocks(rng, qtype, n_blocks):
    """Random raw blocks of a format with every float16 scale field set to a finite value, so that
    all bit patterns of the integer parts are exercised."""
    fmt = BLOCK_FORMATS[int(qtype)]
    raw = rng.integers(0, 256, size=(n_blocks, fmt.type_size), dtype=np.uint8)
    halves = {"Q4_0": [0], "Q5_0": [0], "Q8_0": [0], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2],
              "Q5_K": [0, 2], "Q6_K": [208]}.get(fmt.name, [])
    for at in halves:
        raw[:, at:at + 2] = rng.uniform(-0.1, 0.1, n_blocks).astype("<f2").view(np.uint8).reshape(-1, 2)
    if fmt.name in ("F32", "F16", "BF16"):
        x = rng.standard_normal(n_blocks).astype(np.float32)
        raw = {"F32": x.view(np.uint8), "F16": x.astype("<f2").view(np.uint8),
               "BF16": gguf.quants.quantize(x, Q.BF16)}[fmt.name].reshape(n_blocks, -1)
    return raw


@pytest.mark.parametrize("qtype", [Q(t) for t in BLOCK_FORMATS], ids=lambda q: q.name)
def test_dequantize_matches_gguf(qtype):
    rng = np.random.default_rng(int(qtype))
    fmt = BLOCK_FORMATS[int(qtype)]
    assert gguf.GGML_QUANT_SIZES[qtype] == (fmt.block_size, fmt.type_size)
    raw = random_blocks(rng, qtype, 96)
    n = 96 * fmt.block_size
    mine = dequantize(raw, int(qtype), n)
    if fmt.name == "F32":
        ref = raw.view(np.float32).reshape(-1)
    elif fmt.name == "F16":
        ref = raw.view(np.float16).astype(np.float32).reshape(-1)
    else:
        ref = gguf.quants.dequantize(raw.reshape(1, -1), qtype).reshape(-1)
    assert mine.dtype == np.float32 and mine.shape == (n,)
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    np.testing.assert_array_equal(mine, ref)


def test_dequantize_rejects_bad_sizes():
    with pytest.raises(ValueError, match="not whole Q4_0 blocks"):
        dequantize(np.zeros(18, np.uint8), int(Q.Q4_0), 33)
    with pytest.raises(ValueError, match="bytes"):
        dequantize(np.zeros(17, np.uint8), int(Q.Q4_0), 32)
    with pytest.raises(ValueError, match="unsupported tensor type Q2_K"):
        dequantize(np.zeros(84, np.uint8), int(Q.Q2_K), 256)


def test_unpermute_inverts_llama_cpp_permute():
    rng = np.random.default_rng(1)
    for n_heads, hd in ((4, 16), (3, 64), (1, 2)):
        w = rng.standard_normal((n_heads * hd, 5)).astype(np.float32)
        np.testing.assert_array_equal(unpermute_qk(llama_cpp_permute(w, n_heads), n_heads), w)
        np.testing.assert_array_equal(unpermute_qk(w, n_heads), llama_cpp_unpermute(w, n_heads))
    with pytest.raises(ValueError, match="even head dimension"):
        unpermute_qk(np.zeros((12, 2), np.float32), 4)


# ---------------------------------------------------------------------------------------------------
# Round trips through GGUF files
# ---------------------------------------------------------------------------------------------------

ROUND_TRIP = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]


@pytest.mark.parametrize("qtype", ROUND_TRIP, ids=lambda q: q.name)
def test_round_trip(tmp_path, smollm_tok, qtype):
    rng = np.random.default_rng(100 + int(qtype))
    vocab = smollm_tok.get_vocab_size()
    tied = qtype != Q.F32  # one untied case: output.weight -> lm_head.weight
    weights = random_llama(rng, vocab=vocab, tied=tied)
    path = write_gguf(tmp_path / "m.gguf", weights, smollm_tok, qtype=qtype)
    cfg = import_gguf(path, tmp_path / "hf")
    got, meta, cfg_file = load_dir(tmp_path / "hf")
    assert cfg_file == cfg and meta["format"] == "pt"
    assert set(got) == set(weights)
    reader = gguf.GGUFReader(path)
    raw = {t.name: t for t in reader.tensors}
    for name, x in weights.items():
        y = got[name]
        assert y.dtype == np.float32 and y.shape == x.shape, name
        if x.ndim == 1 or qtype == Q.F32:
            np.testing.assert_array_equal(y, x, err_msg=name)  # F32: bit for bit, permutation included
            continue
        err = np.abs(y - x)
        bound = error_bound(x, qtype)
        assert (err <= bound).all(), f"{name}: max error {err.max():.3g}, worst excess {(err - bound).max():.3g}"
        # and exactly what gguf's own dequantiser gives for the stored blocks, rows back in HF order
        t = raw[gguf_name(name)]
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(x.shape).astype(np.float32)
        if name.endswith("q_proj.weight"):
            ref = llama_cpp_unpermute(ref, 4)
        elif name.endswith("k_proj.weight"):
            ref = llama_cpp_unpermute(ref, 2)
        np.testing.assert_array_equal(y, ref, err_msg=name)
    types = Counter(t.tensor_type.name for t in reader.tensors)
    assert cfg["gguf_import"]["tensor_types"] == dict(sorted(types.items()))


@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda q: q.name)
def test_k_quant_file(tmp_path, smollm_tok, qtype):
    """gguf has no quantiser for the K formats: the file gets random valid blocks, and the import
    must equal gguf's dequantisation of them with q/k rows back in HF order."""
    rng = np.random.default_rng(200 + int(qtype))
    n_heads, n_kv = 4, 1
    weights = random_llama(rng, vocab=smollm_tok.get_vocab_size(), d=256, n_heads=n_heads, n_kv=n_kv,
                           ffn=512, n_layers=1)
    fmt = BLOCK_FORMATS[int(qtype)]
    raw_tensors, expected = {}, {}
    for name, x in weights.items():
        if x.ndim == 1:
            expected[name] = x
            continue
        rows, cols = x.shape
        blocks = random_blocks(rng, qtype, rows * cols // 256).reshape(rows, cols // 256 * fmt.type_size)
        raw_tensors[gguf_name(name)] = (blocks, qtype)
        y = gguf.quants.dequantize(blocks, qtype).astype(np.float32)
        if name.endswith("q_proj.weight"):
            y = llama_cpp_unpermute(y, n_heads)
        elif name.endswith("k_proj.weight"):
            y = llama_cpp_unpermute(y, n_kv)
        expected[name] = y
    path = write_gguf(tmp_path / "k.gguf", weights, smollm_tok, n_heads=n_heads, n_kv=n_kv, raw_tensors=raw_tensors)
    cfg = import_gguf(path, tmp_path / "hf")
    got, _, _ = load_dir(tmp_path / "hf")
    assert cfg["gguf_import"]["tensor_types"] == {"F32": 3, qtype.name: 8}
    for name, y in expected.items():
        np.testing.assert_array_equal(got[name], y, err_msg=name)


def test_quantization_summary():
    norms = {"blk.0.attn_norm.weight": ("F32", 64), "output_norm.weight": ("F32", 64)}
    assert quantization_summary({"token_embd.weight": ("Q8_0", 6400), "blk.0.attn_q.weight": ("Q4_1", 8192),
                                 "blk.0.ffn_up.weight": ("Q4_1", 8192), **norms}) == \
        "Q4_1 (blocks), Q8_0 (embedding), F32 (norms)"
    # A K-quant mix: one role over several types gets its counts; types by elements held, most first.
    assert quantization_summary({"token_embd.weight": ("Q4_K", 800), "output.weight": ("Q6_K", 800),
                                 "blk.0.attn_q.weight": ("Q4_K", 1000), "blk.0.ffn_down.weight": ("Q6_K", 500),
                                 "blk.0.ffn_up.weight": ("Q4_K", 500), **norms}) == \
        "Q4_K (blocks 2/3, embedding), Q6_K (blocks 1/3, output), F32 (norms)"


def test_config(tmp_path, smollm_tok):
    weights = random_llama(np.random.default_rng(3), vocab=smollm_tok.get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", weights, smollm_tok, qtype=Q.Q8_0)
    assert main(["gguf-import", str(path), "-o", str(tmp_path / "hf")]) == 0
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    vocab = smollm_tok.get_vocab()
    expected = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": len(vocab),
                "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu", "max_position_embeddings": 256,
                "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "attention_bias": False, "mlp_bias": False,
                "tie_word_embeddings": True, "torch_dtype": "float32", "bos_token_id": vocab["<|im_start|>"],
                "eos_token_id": vocab["<|im_end|>"]}
    assert {k: cfg[k] for k in expected} == expected
    assert cfg["gguf_import"]["source"] == "m.gguf" and len(cfg["gguf_import"]["sha256"]) == 64
    notes = json.loads((tmp_path / "hf" / "sinklab_source.json").read_text())
    assert (notes["source"], notes["source_sha256"]) == ("m.gguf", cfg["gguf_import"]["sha256"])
    assert notes["quantization"] == "Q8_0 (blocks, embedding), F32 (norms)", notes["quantization"]
    tcfg = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert tcfg["bos_token"] == "<|im_start|>" and tcfg["eos_token"] == "<|im_end|>"
    assert tcfg["unk_token"] == "<|endoftext|>" and tcfg["add_bos_token"] is False
    smap = json.loads((tmp_path / "hf" / "special_tokens_map.json").read_text())
    assert smap == {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"}
    # the imported directory works with data_prep's own tokenizer loading and special-token policy
    from data_prep.tokenization import eos_token, load_tokenizer, special_token_policy
    tok = load_tokenizer(tmp_path / "hf")
    assert special_token_policy(tok).prefix_id is None  # add_bos_token false: no BOS, as the GGUF says
    assert eos_token(tok) == ("<|im_end|>", vocab["<|im_end|>"])


# ---------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pre", ["smollm", "gpt-2", "llama-bpe"])
def test_tokenizer_round_trip(tmp_path, pre):
    from tokenizers import Tokenizer

    ref = train_tokenizer(pre)
    weights = random_llama(np.random.default_rng(4), vocab=ref.get_vocab_size(), n_layers=1)
    path = write_gguf(tmp_path / "m.gguf", weights, ref, pre=pre, add_bos=(pre == "llama-bpe"))
    import_gguf(path, tmp_path / "hf")
    tok = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    assert tok.get_vocab() == ref.get_vocab()
    for text in SAMPLES + TRAINING_TEXT:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert ids == ref.encode(text, add_special_tokens=False).ids, text
        assert tok.decode(ids, skip_special_tokens=False) == text
    im_start, im_end = ref.token_to_id("<|im_start|>"), ref.token_to_id("<|im_end|>")
    ids = tok.encode(SAMPLES[2], add_special_tokens=False).ids
    assert ids[0] == im_start and ids[-1] == im_end  # special tokens are matched whole
    with_specials = tok.encode("Hello", add_special_tokens=True).ids
    assert with_specials[0] == im_start if pre == "llama-bpe" else with_specials[0] != im_start
    if pre == "smollm":
        assert tok.encode("2024").tokens == ["2", "0", "2", "4"]


# ---------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------

def test_errors(tmp_path, smollm_tok, capsys):
    rng = np.random.default_rng(5)
    weights = random_llama(rng, vocab=smollm_tok.get_vocab_size(), n_layers=1)
    out = tmp_path / "hf"

    def fails(path, pattern):
        with pytest.raises(DataPrepError, match=pattern) as e:
            import_gguf(path, out)
        assert str(path) in str(e.value) and "\n" not in str(e.value)

    fails(write_gguf(tmp_path / "gpt2.gguf", weights, smollm_tok, arch="gpt2"), "architecture 'gpt2' is not supported")
    fails(write_gguf(tmp_path / "spm.gguf", weights, smollm_tok, tokenizer_model="llama"),
          "tokenizer.ggml.model 'llama' is not supported")
    fails(write_gguf(tmp_path / "pre.gguf", weights, smollm_tok, pre="qwen2"), "tokenizer.ggml.pre 'qwen2'")
    q2k = rng.integers(0, 256, size=(64, 84), dtype=np.uint8)  # 64 x 256 elements of Q2_K
    fails(write_gguf(tmp_path / "q2k.gguf", weights, smollm_tok, raw_tensors={"token_embd.weight": (q2k, Q.Q2_K)}),
          "token_embd.weight has type Q2_K")

    good = write_gguf(tmp_path / "good.gguf", weights, smollm_tok, qtype=Q.Q8_0)
    data = good.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) - 1000])
    fails(tmp_path / "cut.gguf", "truncated|not a readable GGUF")
    (tmp_path / "header.gguf").write_bytes(data[:300])
    fails(tmp_path / "header.gguf", "truncated or corrupt GGUF file: key 6 at byte 300")
    # An array claiming 2^60 strings: the gguf package's reader would loop over empty slices for ever
    # (tests/fuzz/fuzz_gguf.py found it); the layout check refuses it at once.
    huge = struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q1sIIQ", 1, b"a", 9, 8, 2**60) + bytes(16)
    (tmp_path / "huge_array.gguf").write_bytes(huge)
    fails(tmp_path / "huge_array.gguf", "truncated or corrupt GGUF file: key 0")
    (tmp_path / "text.gguf").write_text("not a model\n")
    fails(tmp_path / "text.gguf", "not a readable GGUF")
    fails(tmp_path / "absent.gguf", "no such file")
    assert not (out / "config.json").exists()

    capsys.readouterr()
    assert main(["gguf-import", str(tmp_path / "cut.gguf"), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("data_prep gguf-import: error: ") and "cut.gguf" in err[0]


# ---------------------------------------------------------------------------------------------------
# The real file (fetched by env/setup.sh)
# ---------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not SMOLLM2.exists(), reason=f"{SMOLLM2} absent (bash env/setup.sh fetches it)")
def test_smollm2(tmp_path):
    from tokenizers import Tokenizer

    cfg = import_gguf(SMOLLM2, tmp_path / "smol")
    expected = {"num_hidden_layers": 30, "hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
                "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
                "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192}
    assert {k: cfg[k] for k in expected} == expected
    assert cfg["gguf_import"]["tensor_types"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1}
    notes = json.loads((tmp_path / "smol" / "sinklab_source.json").read_text())
    assert {k: notes[k] for k in ("source", "source_sha256", "quantization")} == {
        "source": SMOLLM2.name, "source_sha256": cfg["gguf_import"]["sha256"],
        "quantization": "Q4_1 (blocks), Q8_0 (embedding), F32 (norms)"}

    reader = gguf.GGUFReader(SMOLLM2)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    tok = Tokenizer.from_file(str(tmp_path / "smol" / "tokenizer.json"))
    enc = tok.encode("Hello world")
    assert enc.ids == [tokens.index("Hello"), tokens.index("\u0120world")]
    assert tok.decode(enc.ids) == "Hello world"
    assert tok.encode("<|im_start|>user<|im_end|>").ids[::2] == [tokens.index("<|im_start|>"),
                                                                 tokens.index("<|im_end|>")]
    tcfg = json.loads((tmp_path / "smol" / "tokenizer_config.json").read_text())
    assert (tcfg["bos_token"], tcfg["eos_token"], tcfg["add_bos_token"]) == ("<|im_start|>", "<|im_end|>", False)

    got, _ = read_safetensors(tmp_path / "smol" / "model.safetensors")
    assert len(got) == 2 + 30 * 9 and "lm_head.weight" not in got
    t = {t.name: t for t in reader.tensors}
    for gname, hf, heads in (("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 9),
                             ("blk.29.attn_k.weight", "model.layers.29.self_attn.k_proj.weight", 3),
                             ("token_embd.weight", "model.embed_tokens.weight", 0)):
        ref = gguf.quants.dequantize(t[gname].data, t[gname].tensor_type).astype(np.float32)
        if heads:
            ref = llama_cpp_unpermute(ref, heads)
        np.testing.assert_array_equal(np.asarray(got[hf]), ref, err_msg=hf)


def test_fuzz_regression_cases_end_in_one_line(tmp_path):
    """Every input tests/fuzz/fuzz_gguf.py once crashed or hung on (tests/fuzz/regressions/fuzz_gguf):
    now one DataPrepError line naming the file, quickly (block_count = 10^12 listed every missing name)."""
    import time

    cases = sorted((Path(__file__).resolve().parents[1] / "fuzz" / "regressions" / "fuzz_gguf").iterdir())
    assert len(cases) >= 5
    for case in cases:
        path = tmp_path / f"{case.name}.gguf"
        path.write_bytes(case.read_bytes())
        t0 = time.time()
        with pytest.raises(DataPrepError) as e:
            import_gguf(path, tmp_path / "out")
        assert str(path) in str(e.value) and "\n" not in str(e.value), case.name
        assert time.time() - t0 < 5, case.name
