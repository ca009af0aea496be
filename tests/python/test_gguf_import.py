"""GGUF importer: tiny Llama, Qwen2 and Gemma 3 GGUF files written here with gguf's own writer and quantiser
(laid out as llama.cpp's convert_hf_to_gguf.py lays them out, written independently below), imported with
data_prep.gguf_import, compared with the original weights; tokenizers against the tokenizers they were
made from; plus the real files when env/fetch_models.sh has fetched them (SmolLM2: the import pinned by
the sha256 of every file it writes, which the hand-written decoders of the importer before gguf's
dequantiser produced)."""

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
from data_prep.gguf_import import dequantize, import_gguf, quantization_summary, unpermute_qk
from data_prep.safetensors_io import read_safetensors
from data_prep.tokenization import sha256_file

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
# Dequantisation (gguf.quants.dequantize behind size checks)
# ---------------------------------------------------------------------------------------------------

BLOCK_TYPES = {Q.Q4_0: [0], Q.Q5_0: [0], Q.Q8_0: [0], Q.Q4_1: [0, 2], Q.Q5_1: [0, 2], Q.Q4_K: [0, 2],
               Q.Q5_K: [0, 2], Q.Q6_K: [208]}  # type -> byte offsets of its float16 scales


def random_blocks(rng, qtype, n_blocks):
    """Random raw blocks of a format with every float16 scale field set to a finite value, so that
    all bit patterns of the integer parts are exercised."""
    type_size = gguf.GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for at in BLOCK_TYPES[qtype]:
        raw[:, at:at + 2] = rng.uniform(-0.1, 0.1, n_blocks).astype("<f2").view(np.uint8).reshape(-1, 2)
    return raw


def test_dequantize_rejects_bad_sizes():
    with pytest.raises(ValueError, match="not whole Q4_0 blocks"):
        dequantize(np.zeros(18, np.uint8), int(Q.Q4_0), 33)
    with pytest.raises(ValueError, match="bytes"):
        dequantize(np.zeros(17, np.uint8), int(Q.Q4_0), 32)
    with pytest.raises(ValueError, match="unsupported tensor type Q8_K"):
        dequantize(np.zeros(292, np.uint8), int(Q.Q8_K), 256)


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
    type_size = gguf.GGML_QUANT_SIZES[qtype][1]
    raw_tensors, expected = {}, {}
    for name, x in weights.items():
        if x.ndim == 1:
            expected[name] = x
            continue
        rows, cols = x.shape
        blocks = random_blocks(rng, qtype, rows * cols // 256).reshape(rows, cols // 256 * type_size)
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
    # no general.file_type, name or chat template in this file: quantisation mix unknown, a base model
    assert (notes["file_type"], notes["variant"]) == ("?", "base")
    assert main(["gguf-import", str(path), "-o", str(tmp_path / "hf2"), "--variant", "instruct"]) == 0
    assert json.loads((tmp_path / "hf2" / "sinklab_source.json").read_text())["variant"] == "instruct"
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
# Qwen2 and Gemma 3: the other architectures
# ---------------------------------------------------------------------------------------------------

GEMMA3_BLOCK = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                "attn_v": "self_attn.v_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
                "attn_output": "self_attn.o_proj", "post_attention_norm": "post_attention_layernorm",
                "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
                "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def random_family(rng, family, *, vocab, d=64, n_heads=4, n_kv=2, head_dim=16, ffn=128, n_layers=2):
    """HF-named float32 weights of a random Qwen2 (q/k/v biases) or Gemma 3 (QK-norm, four block norms)."""
    q, kv = n_heads * head_dim, n_kv * head_dim
    shapes = {"model.embed_tokens.weight": (vocab, d), "model.norm.weight": (d,)}
    for i in range(n_layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (d,), p + "self_attn.q_proj.weight": (q, d),
                       p + "self_attn.k_proj.weight": (kv, d), p + "self_attn.v_proj.weight": (kv, d),
                       p + "self_attn.o_proj.weight": (d, q), p + "mlp.gate_proj.weight": (ffn, d),
                       p + "mlp.up_proj.weight": (ffn, d), p + "mlp.down_proj.weight": (d, ffn)})
        if family == "qwen2":
            shapes.update({p + "post_attention_layernorm.weight": (d,), p + "self_attn.q_proj.bias": (q,),
                           p + "self_attn.k_proj.bias": (kv,), p + "self_attn.v_proj.bias": (kv,)})
        else:
            shapes.update({p + "self_attn.q_norm.weight": (head_dim,), p + "self_attn.k_norm.weight": (head_dim,),
                           p + "post_attention_layernorm.weight": (d,), p + "pre_feedforward_layernorm.weight": (d,),
                           p + "post_feedforward_layernorm.weight": (d,)})
    return {name: (0.1 * rng.standard_normal(shape) if len(shape) == 1 or name.endswith("bias")
                   else 0.02 * rng.standard_normal(shape)).astype(np.float32) for name, shape in shapes.items()}


def family_gguf_name(hf, block):
    """The GGUF name of an HF tensor under a block table {GGUF stem: HF stem} (stems without .weight/.bias)."""
    if not hf.startswith("model.layers."):
        return gguf_name(hf)
    _, _, i, rest = hf.split(".", 3)
    stem, kind = rest.rsplit(".", 1)
    return f"blk.{i}.{ {v: k for k, v in block.items()}[stem]}.{kind}"


def write_family_gguf(path, family, weights, *, n_heads=4, n_kv=2, head_dim=16, qtype=Q.F32, tokenizer):
    """A Qwen2 or Gemma 3 GGUF laid out as convert_hf_to_gguf.py writes one: no q/k permutation (llama.cpp
    runs both with NeoX rotary), Gemma's norm weights stored as 1 + w, 2-D weights in `qtype`, norms and
    biases F32. tokenizer: a callable adding the tokenizer keys to the writer."""
    d = weights["model.embed_tokens.weight"].shape[1]
    ffn = weights["model.layers.0.mlp.up_proj.weight"].shape[0]
    n_layers = 1 + max(int(k.split(".")[2]) for k in weights if k.startswith("model.layers."))
    w = gguf.GGUFWriter(str(path), family)
    w.add_block_count(n_layers)
    w.add_context_length(512)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    if family == "gemma3":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_sliding_window(7)
    tokenizer(w)
    block = GEMMA3_BLOCK if family == "gemma3" else BLOCK
    for hf, x in weights.items():
        name = family_gguf_name(hf, block)
        if family == "gemma3" and hf.endswith("norm.weight"):
            x = x + np.float32(1)  # convert_hf_to_gguf.py's Gemma3Model: norm weights + 1
        data, raw_dtype = (x, None) if x.ndim == 1 else quantize(x, qtype)
        w.add_tensor(name, data, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def bpe_tokenizer_keys(tok, pre):
    vocab = json.loads(tok.to_str())["model"]
    tokens = sorted(vocab["vocab"], key=vocab["vocab"].get)

    def add(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_merges([" ".join(m) for m in vocab["merges"]])
        w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
        w.add_eos_token_id(tokens.index("<|im_end|>"))
        w.add_bos_token_id(tokens.index("<|endoftext|>"))
        w.add_add_bos_token(False)
    return add


def qwen2_tokenizer():
    """A byte-level BPE with Qwen2's tokenizer.json normalizer (NFC) and split (every digit alone), spelt
    out here as Qwen2.5's tokenizer.json spells it."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                                   r"|\s*[\r\n]+|\s+(?!\S)|\s+"), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    return tok


def sentencepiece_model(tmp_path):
    """A SentencePiece BPE with byte fallback and Gemma's settings (no dummy prefix, no normalisation,
    whitespace runs kept), trained here: the reference the imported tokenizer.model must reproduce."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TRAINING_TEXT * 4), model_writer=model, vocab_size=420,
                                   model_type="bpe", character_coverage=1.0, byte_fallback=True, pad_id=0, eos_id=1,
                                   bos_id=2, unk_id=3, user_defined_symbols=["<start_of_turn>", "\n\n"],
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   add_dummy_prefix=False, allow_whitespace_only_pieces=True, split_digits=True,
                                   num_threads=1, minloglevel=2)
    return model.getvalue()


def spm_tokenizer_keys(proto):
    """The tokenizer keys convert_hf_to_gguf.py writes for a SentencePiece model: pieces, scores, types
    (the proto's); Gemma 3's file marks <unk> CONTROL and names it by unknown_token_id, as here."""
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2

    m = sp_pb2.ModelProto()
    m.ParseFromString(proto)
    tokens = [p.piece for p in m.pieces]
    types = [int(p.type) for p in m.pieces]
    types[3] = 3  # <unk> as Gemma 3's GGUF has it

    def add(w):
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores([p.score for p in m.pieces])
        w.add_token_types(types)
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
        w.add_unk_token_id(3)
        w.add_pad_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_space_prefix(False)
    return add


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0, Q.Q5_0], ids=lambda q: q.name)
def test_qwen2(tmp_path, qtype):
    from tokenizers import Tokenizer

    ref = qwen2_tokenizer()
    weights = random_family(np.random.default_rng(7 + int(qtype)), "qwen2", vocab=ref.get_vocab_size(), d=64,
                            n_heads=4, n_kv=2, head_dim=16)
    weights["lm_head.weight"] = (0.02 * np.random.default_rng(8).standard_normal((ref.get_vocab_size(), 64))
                                 ).astype(np.float32)
    path = write_family_gguf(tmp_path / "q.gguf", "qwen2", weights, qtype=qtype,
                             tokenizer=bpe_tokenizer_keys(ref, "qwen2"))
    cfg = import_gguf(path, tmp_path / "hf")
    expected = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 128,
                "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "use_sliding_window": False,
                "tie_word_embeddings": False, "vocab_size": ref.get_vocab_size()}
    assert {k: cfg[k] for k in expected} == expected and "head_dim" not in cfg
    got, _, _ = load_dir(tmp_path / "hf")
    assert set(got) == set(weights)
    reader = {t.name: t for t in gguf.GGUFReader(path).tensors}
    for name, x in weights.items():
        if x.ndim == 1 or qtype == Q.F32:  # biases and norms F32, q/k rows unpermuted: bit for bit
            np.testing.assert_array_equal(got[name], x, err_msg=name)
        else:
            assert (np.abs(got[name] - x) <= error_bound(x, qtype)).all(), name
            t = reader[gguf_name(name)] if not name.startswith("model.layers.") else None
            if t is not None:
                np.testing.assert_array_equal(got[name], gguf.quants.dequantize(t.data, t.tensor_type), err_msg=name)
    tok = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    for text in SAMPLES + TRAINING_TEXT + ["digits 2024 and 1234567", "Cafe\u0301 (NFC: Caf\u00e9)"]:
        assert tok.encode(text, add_special_tokens=False).ids == ref.encode(text, add_special_tokens=False).ids, text
    assert tok.encode("2024").tokens == ["2", "0", "2", "4"]
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["add_bos_token"] is False


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0], ids=lambda q: q.name)
def test_gemma3(tmp_path, qtype):
    import sentencepiece as spm

    proto = sentencepiece_model(tmp_path)
    ref = spm.SentencePieceProcessor(model_proto=proto)
    weights = random_family(np.random.default_rng(11 + int(qtype)), "gemma3", vocab=ref.get_piece_size(), d=64,
                            n_heads=2, n_kv=1, head_dim=48)
    path = write_family_gguf(tmp_path / "g.gguf", "gemma3", weights, n_heads=2, n_kv=1, head_dim=48, qtype=qtype,
                             tokenizer=spm_tokenizer_keys(proto))
    cfg = import_gguf(path, tmp_path / "hf")
    expected = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 64,
                "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 48, "num_hidden_layers": 2,
                "query_pre_attn_scalar": 48, "sliding_window": 7, "rope_theta": 1000000.0,
                "rope_local_base_freq": 10000.0, "hidden_activation": "gelu_pytorch_tanh",
                "layer_types": ["sliding_attention", "sliding_attention"], "tie_word_embeddings": True,
                "attn_logit_softcapping": None, "final_logit_softcapping": None}
    assert {k: cfg[k] for k in expected} == expected
    got, _, _ = load_dir(tmp_path / "hf")
    assert set(got) == set(weights)
    for name, x in weights.items():
        if name.endswith("norm.weight"):  # stored 1 + w; back to w in float32, as transformers' loader does
            np.testing.assert_array_equal(got[name], (x + np.float32(1)) - np.float32(1), err_msg=name)
            assert np.abs(got[name] - x).max() <= 2.0 ** -23, name
        elif x.ndim == 1 or qtype == Q.F32:
            np.testing.assert_array_equal(got[name], x, err_msg=name)
        else:
            assert (np.abs(got[name] - x) <= error_bound(x, qtype)).all(), name
    assert not (tmp_path / "hf" / "tokenizer.json").exists()
    mine = spm.SentencePieceProcessor(model_file=str(tmp_path / "hf" / "tokenizer.model"))
    assert [mine.id_to_piece(i) for i in range(mine.get_piece_size())] == \
        [ref.id_to_piece(i) for i in range(ref.get_piece_size())]
    for text in SAMPLES + TRAINING_TEXT + ["  two  spaces\n\nand <start_of_turn> \u2603 bytes \U0001f600"]:
        assert mine.encode(text) == ref.encode(text), text
        assert mine.decode(mine.encode(text)) == text
    assert (mine.bos_id(), mine.eos_id(), mine.unk_id(), mine.pad_id()) == (2, 1, 3, 0)
    from data_prep.tokenization import load_tokenizer, special_token_policy
    policy = special_token_policy(load_tokenizer(tmp_path / "hf"))
    assert policy.prefix_id == 2  # add_bos_token: Gemma's inputs start with <bos>
    # a Gemma 3 GGUF with soft-capping would need what Gemma 2 has: refused
    w = gguf.GGUFWriter(str(tmp_path / "cap.gguf"), "gemma3")
    reader = gguf.GGUFReader(path)
    for f in reader.fields.values():
        if not f.name.startswith("GGUF.") and f.name != "general.architecture":
            w.add_key_value(f.name, f.contents(), f.types[0], sub_type=f.types[-1] if len(f.types) > 1 else None)
    w.add_float32("gemma3.final_logit_softcapping", 30.0)
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(DataPrepError, match="gemma3.final_logit_softcapping is set"):
        import_gguf(tmp_path / "cap.gguf", tmp_path / "cap")


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
    fails(write_gguf(tmp_path / "bert.gguf", weights, smollm_tok, tokenizer_model="bert"),
          "tokenizer.ggml.model 'bert' is not supported")
    fails(write_gguf(tmp_path / "pre.gguf", weights, smollm_tok, pre="falcon"), "tokenizer.ggml.pre 'falcon'")
    q8k = rng.integers(0, 256, size=(64, 292), dtype=np.uint8)  # 64 x 256 elements of Q8_K
    fails(write_gguf(tmp_path / "q8k.gguf", weights, smollm_tok, raw_tensors={"token_embd.weight": (q8k, Q.Q8_K)}),
          "token_embd.weight has type Q8_K, which gguf.quants.dequantize cannot dequantise")

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

# sha256 of the files `data_prep gguf-import` wrote from SmolLM2-135M-Instruct.Q4_1.gguf with the
# hand-written dequantisers it had until gguf.quants.dequantize replaced them.
SMOLLM2_IMPORT_SHA256 = {
    "model.safetensors": "b45a4ec8ee1fb1ee8876a29bb87c37fda6c92d70c83c5c6d3dd1533347e1f778",
    "tokenizer.json": "7d27c493c729a66ecefc837280b05d948b1ed50d130eebdbf911b1b36cf38ed7",
    "tokenizer_config.json": "37f1b97bc20a9d7bb164f57bd361cd030cfa027fac1ed3a3cec7e93a7d65a84b",
    "special_tokens_map.json": "5134708447a25ca51f4bed529d728d0f84d79c3296201435d34b8583140c234e",
}


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
    assert {k: notes[k] for k in ("source", "source_sha256", "quantization", "file_type", "variant")} == {
        "source": SMOLLM2.name, "source_sha256": cfg["gguf_import"]["sha256"],
        "quantization": "Q4_1 (blocks), Q8_0 (embedding), F32 (norms)", "file_type": "Q4_1", "variant": "instruct"}

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

    # The import through gguf.GGUFReader + gguf.quants.dequantize writes exactly the files that the
    # importer's own block decoders wrote before (commit 2b5d3a4), byte for byte.
    for name, sha in SMOLLM2_IMPORT_SHA256.items():
        assert sha256_file(tmp_path / "smol" / name) == sha, name

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
