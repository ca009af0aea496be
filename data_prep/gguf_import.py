"""GGUF (llama.cpp) -> Hugging Face model directory, read and dequantised by the ``gguf`` package.

``python -m data_prep gguf-import model.gguf -o DIR`` writes DIR/config.json, DIR/model.safetensors
(float32), the tokenizer (tokenizer.json for byte-level BPE files, tokenizer.model for SentencePiece
ones, both from the GGUF's own vocabulary), tokenizer_config.json, special_tokens_map.json and
sinklab_source.json (provenance: the GGUF file, its sha256, its quantisation, for sinklab-survey). The
result loads with transformers' ``AutoModelForCausalLM.from_pretrained`` and with sinklab's HF loader.

The file is read by llama.cpp's own Python package: ``gguf.GGUFReader`` for metadata and tensors,
``gguf.quants.dequantize`` for every block format (Q4_0 ... Q6_K, IQ*, ...). What sinklab adds:

* Architectures (``ARCHITECTURES``): the GGUF hyper-parameters as the HF config of the family, and the
  GGUF tensor names as HF names, per architecture: ``llama`` (LlamaForCausalLM), ``qwen2``
  (Qwen2ForCausalLM: q/k/v biases), ``gemma3`` (Gemma3ForCausalLM, model_type gemma3_text: QK-norm,
  four norms per block, interleaved sliding-window layers).
* The rotary layout of a Llama's q_proj and k_proj. HF's Llama rotates the pair (i, i + head_dim/2) of
  every head; llama.cpp's Llama rotates the adjacent pair (2i, 2i+1), so convert_hf_to_gguf.py reorders
  the rows of attn_q (by n_head) and attn_k (by n_head_kv); ``unpermute_qk`` puts them back. Qwen2 and
  Gemma 3 use llama.cpp's NeoX rotary (the HF layout): their rows are stored as they are.
* Gemma's norms: its RMSNorm scales by (1 + w); convert_hf_to_gguf.py stores 1 + w, the importer
  subtracts 1 again in float32 (as transformers' GGUF loader does), so the HF weight is w.
* Shapes. GGUF lists dimensions innermost first (ne[0] = in_features); numpy and HF list them
  outermost first, so a GGUF [in, out] matrix is the HF [out, in] weight with the same bytes.
* The tokenizer files, and the provenance file.

Anything the importer does not know (another architecture, tokenizer or pre-tokenizer, a tensor without
an HF counterpart, a tensor type gguf cannot dequantise) stops with one line naming the file.
"""

from __future__ import annotations

import itertools
import json
import mmap
import numbers
import os
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import DataPrepError, __version__
from .safetensors_io import write_safetensors
from .tokenization import sha256_file

# ---------------------------------------------------------------------------------------------------
# Dequantisation: gguf.quants.dequantize, with the sizes checked first so that a malformed tensor is one
# error line instead of a numpy reshape failure.
# ---------------------------------------------------------------------------------------------------


def type_name(type_id: int) -> str:
    """A GGML type id as llama.cpp names it (Q4_1, IQ2_XS, ...), for messages."""
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(int(type_id)).name
    except ValueError:
        return f"type {int(type_id)}"


def can_dequantize(type_id: int) -> bool:
    """Whether gguf.quants.dequantize has a decoder for the type (F32, F16 and every block format it
    implements; not the integer types, F64, or Q8_K / Q8_1, which are llama.cpp's intermediates)."""
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import _type_traits

    try:
        qtype = Q(int(type_id))
    except ValueError:
        return False
    return qtype in (Q.F32, Q.F16) or qtype in _type_traits


def dequantize(raw: np.ndarray, type_id: int, n_elements: int) -> np.ndarray:
    """The float32 values [n_elements] of one tensor's raw bytes (uint8, any shape), by gguf's own
    dequantiser."""
    import gguf

    if not can_dequantize(type_id):
        raise ValueError(f"unsupported tensor type {type_name(type_id)}")
    qtype = gguf.GGMLQuantizationType(int(type_id))
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    if n_elements % block_size:
        raise ValueError(f"{n_elements} elements are not whole {qtype.name} blocks of {block_size}")
    n_blocks = n_elements // block_size
    raw = np.asarray(raw).reshape(-1).view(np.uint8)
    if raw.size != n_blocks * type_size:
        raise ValueError(f"{qtype.name}: {raw.size} bytes for {n_elements} elements, expected {n_blocks * type_size}")
    values = gguf.quants.dequantize(raw.reshape(n_blocks, type_size), qtype)
    return np.ascontiguousarray(values, dtype=np.float32).reshape(n_elements)


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF row order of a GGUF Llama attn_q (n_heads = n_head) or attn_k (n_heads = n_head_kv) weight
    [n_heads * head_dim, in]. Within each head GGUF row 2i + s holds HF row i + s * head_dim/2
    (s = 0, 1): the inverse of convert_hf_to_gguf.py's permute."""
    rows = w.shape[0]
    if rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(f"{rows} rows are not {n_heads} heads of an even head dimension")
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------------------------------------------
# Reading the file
# ---------------------------------------------------------------------------------------------------


# GGUF value types (gguf.GGUFValueType): byte sizes of the scalars; 8 is a string, 9 an array.
_GGUF_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def check_gguf_layout(path: Path) -> None:
    """Walks a GGUF file's header, key/value section and tensor infos with every length checked against
    the file's size, before the gguf package reads it: that reader trusts the counts (an array claiming
    2^60 elements makes it loop for ever over empty slices; found by tests/fuzz/fuzz_gguf.py). Files
    that are not little-endian GGUF v2/v3 are left to the reader's own error."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else \
            _EmptyBuffer() as data:
        size, pos = len(data), 0

        def take(n: int, what: str) -> int:
            nonlocal pos
            if n > size - pos:
                raise DataPrepError(f"{path}: truncated or corrupt GGUF file: {what} at byte {pos} needs {n} bytes, "
                                    f"{size - pos} are left")
            pos += n
            return pos - n

        def u32(what: str) -> int:
            return struct.unpack_from("<I", data, take(4, what))[0]

        def u64(what: str) -> int:
            return struct.unpack_from("<Q", data, take(8, what))[0]

        def string(what: str) -> None:
            take(u64(what), what)

        def value(vtype: int, what: str, depth: int = 0) -> None:
            if vtype in _GGUF_SCALAR_BYTES:
                take(_GGUF_SCALAR_BYTES[vtype], what)
            elif vtype == _GGUF_STRING:
                string(what)
            elif vtype == _GGUF_ARRAY and depth < 2:
                itype, n = u32(what), u64(what)
                if itype in _GGUF_SCALAR_BYTES:
                    take(n * _GGUF_SCALAR_BYTES[itype], what)
                    return
                if n > (size - pos) // 8:  # every string or array element takes at least 8 bytes
                    take(n * 8, what)
                for _ in range(n):
                    value(itype, what, depth + 1)
            else:
                raise DataPrepError(f"{path}: corrupt GGUF file: {what} has value type {vtype}")

        if size < 8 or data[:4] != b"GGUF" or struct.unpack_from("<I", data, 4)[0] not in (2, 3):
            return
        pos = 8
        n_tensors, n_keys = u64("the tensor count"), u64("the key count")
        if n_keys > (size - pos) // 13 or n_tensors > (size - pos) // 24:  # the smallest key / tensor info
            raise DataPrepError(f"{path}: corrupt GGUF file: {n_keys} keys and {n_tensors} tensors cannot fit in "
                                f"{size} bytes")
        for i in range(n_keys):
            string(f"key {i}")
            value(u32(f"key {i}"), f"key {i}")
        for i in range(n_tensors):
            string(f"tensor info {i}")
            n_dims = u32(f"tensor info {i}")
            if n_dims > 4:
                raise DataPrepError(f"{path}: corrupt GGUF file: tensor info {i} has {n_dims} dimensions (at most 4)")
            take(8 * n_dims + 4 + 8, f"tensor info {i}")


class _EmptyBuffer(bytes):
    """An empty file cannot be memory-mapped; this stands in for its (empty) map."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class GGUFFile:
    """A GGUF file opened with the ``gguf`` package's reader, with checks that turn a truncated or
    foreign file into one DataPrepError line naming it."""

    def __init__(self, path: str | Path):
        from gguf import GGUFReader

        self.path = Path(path)
        if not self.path.is_file():
            raise DataPrepError(f"{self.path}: no such file")
        check_gguf_layout(self.path)
        try:
            self.reader = GGUFReader(self.path, "r")
        except Exception as e:  # the reader raises ValueError, IndexError, struct errors ...
            raise DataPrepError(f"{self.path}: not a readable GGUF file ({type(e).__name__}: {e})") from None
        if self.reader.byte_order != "I":
            raise DataPrepError(f"{self.path}: byte-swapped (big-endian) GGUF files are not supported")
        size = self.path.stat().st_size
        self.tensors = {}
        for t in self.reader.tensors:
            if t.data_offset + t.n_bytes > size:
                raise DataPrepError(f"{self.path}: tensor {t.name} ends at byte {t.data_offset + t.n_bytes}, "
                                    f"but the file has {size} bytes (truncated?)")
            self.tensors[t.name] = t

    def has(self, key: str) -> bool:
        return key in self.reader.fields

    def get(self, key: str, default=None, required: bool = False, kind=None):
        """The value of a key (default when absent). kind, when given, is what the value must be: int,
        float (ints count), str, bool, or [str] / [int] for arrays; anything else is a DataPrepError."""
        field = self.reader.fields.get(key)
        if field is None:
            if required:
                raise DataPrepError(f"{self.path}: missing GGUF key {key}")
            return default
        try:
            value = field.contents()
        except Exception as e:  # a string that is not UTF-8, an array the reader cannot decode ...
            raise DataPrepError(f"{self.path}: GGUF key {key} is not readable ({type(e).__name__}: {e})") from None
        if kind is not None and not _is_kind(value, kind):
            shown = repr(value) if len(repr(value)) < 60 else repr(value)[:57] + "..."
            raise DataPrepError(f"{self.path}: GGUF key {key} is {shown}, expected {_kind_name(kind)}")
        return value

    def raw(self, name: str) -> np.ndarray:
        """The bytes of one tensor (a view of the memory map)."""
        t = self.tensors[name]
        return self.reader.data[t.data_offset: t.data_offset + t.n_bytes]

    def numpy_shape(self, name: str) -> tuple[int, ...]:
        """The tensor's shape outermost first (GGUF stores ne[] innermost first)."""
        return tuple(int(n) for n in reversed(self.tensors[name].shape))

    def tensor(self, name: str) -> np.ndarray:
        """The dequantised float32 tensor, numpy/HF shape."""
        t = self.tensors[name]
        try:
            flat = dequantize(self.raw(name), int(t.tensor_type), int(t.n_elements))
        except ValueError as e:
            raise DataPrepError(f"{self.path}: tensor {name}: {e}") from None
        return flat.reshape(self.numpy_shape(name))


def _is_kind(value, kind) -> bool:
    if isinstance(kind, list):
        return isinstance(value, list) and all(_is_kind(v, kind[0]) for v in value)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return isinstance(value, kind)


def _kind_name(kind) -> str:
    return f"an array of {kind[0].__name__}" if isinstance(kind, list) else f"a {kind.__name__}"


def _f32_value(x) -> float:
    """A float32 hyperparameter as the shortest decimal that is the same float32 (1e-05, not
    9.999999747378752e-06), as the HF config it came from spelled it."""
    return float(str(np.float32(x)))


# ---------------------------------------------------------------------------------------------------
# Architectures: hyper-parameters -> HF config, GGUF tensor names -> HF names
# ---------------------------------------------------------------------------------------------------

# GGUF block tensor (after "blk.N.") -> HF name (after "model.layers.N."), per architecture.
_LLAMA_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_QWEN2_BLOCK = {
    **_LLAMA_BLOCK,
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
}
_GEMMA3_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


@dataclass(frozen=True)
class Architecture:
    """What sinklab knows of one GGUF general.architecture."""

    name: str
    block_names: dict                       # GGUF block tensor -> HF decoder-layer tensor
    config: Callable                        # (GGUFFile, Hyper) -> the HF config.json dict
    permute_qk: bool = False                # llama.cpp's adjacent-pair rotary rows (Llama only)
    norm_shift: float = 0.0                 # GGUF norm weights = HF weight + shift (Gemma: 1)
    tokenizers: tuple = field(default=("gpt2",))  # tokenizer.ggml.model values it is imported with


class Hyper:
    """The `<arch>.` hyper-parameters of a GGUF file: one value of a kind (ints non-negative), not a
    per-layer list; missing required keys and wrong kinds are one DataPrepError naming the key."""

    def __init__(self, g: "GGUFFile", arch: str):
        self.g, self.arch = g, arch

    def __call__(self, name, default=None, kind=int):
        key = f"{self.arch}.{name}"
        value = self.g.get(key, default, required=default is None)
        if isinstance(value, list):
            raise DataPrepError(f"{self.g.path}: {key} varies per layer; not supported")
        if not _is_kind(value, kind) or (kind is int and value < 0) or (kind is float and not np.isfinite(value)):
            raise DataPrepError(f"{self.g.path}: {key} is {value!r}, expected a"
                                f"{' non-negative' if kind is int else ' finite'} {kind.__name__}")
        return value


def _attention_geometry(g: "GGUFFile", key: Hyper, *, head_dim_default=None) -> dict:
    """Layers, width and heads every architecture has, checked: positive, heads a multiple of the
    key/value heads, an even head size (RoPE), value size = key size, full rotary, no RoPE scaling, no MoE."""
    arch = key.arch
    n_layers, d_model, n_heads = int(key("block_count")), int(key("embedding_length")), int(key("attention.head_count"))
    if min(n_layers, d_model, n_heads) < 1:
        raise DataPrepError(f"{g.path}: {arch}.block_count, embedding_length and attention.head_count must be "
                            f"positive (got {n_layers}, {d_model}, {n_heads})")
    n_kv = int(key("attention.head_count_kv", n_heads))
    head_dim = int(key("attention.key_length", head_dim_default or d_model // n_heads))
    if n_kv < 1 or n_heads % n_kv or head_dim < 2 or head_dim % 2:
        raise DataPrepError(f"{g.path}: {n_heads} heads, {n_kv} key/value heads and head size {head_dim} are not "
                            f"a {arch} attention layout (RoPE needs an even head size)")
    if int(key("attention.value_length", head_dim)) != head_dim:
        raise DataPrepError(f"{g.path}: {arch}.attention.value_length != key_length is not supported")
    if int(key("rope.dimension_count", head_dim)) != head_dim:
        raise DataPrepError(f"{g.path}: partial rotary ({arch}.rope.dimension_count "
                            f"{key('rope.dimension_count')} < head_dim {head_dim}) is not supported")
    scaling = key("rope.scaling.type", "none", kind=str)
    if scaling != "none" or "rope_freqs.weight" in g.tensors:
        raise DataPrepError(f"{g.path}: RoPE scaling ({scaling if scaling != 'none' else 'rope_freqs'}) "
                            "is not supported")
    if int(key("expert_count", 0)) > 0:
        raise DataPrepError(f"{g.path}: mixture-of-experts models are not supported")
    if "token_embd.weight" not in g.tensors:
        raise DataPrepError(f"{g.path}: no token_embd.weight tensor")
    return {
        "vocab_size": g.numpy_shape("token_embd.weight")[0],
        "hidden_size": d_model,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "max_position_embeddings": int(key("context_length")),
        "rms_norm_eps": _f32_value(key("attention.layer_norm_rms_epsilon", kind=float)),
    }


def _special_ids(g: "GGUFFile", cfg: dict) -> dict:
    for hf_key, gguf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                             ("pad_token_id", "padding_token_id")):
        value = g.get(f"tokenizer.ggml.{gguf_key}", kind=int)
        if value is not None:
            cfg[hf_key] = int(value)
    return cfg


def llama_config(g: "GGUFFile", key: Hyper) -> dict:
    """config.json of the HF LlamaForCausalLM that a GGUF 'llama' file holds."""
    geo = _attention_geometry(g, key)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **{k: geo[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads", "num_key_value_heads", "head_dim")},
        "hidden_act": "silu",
        "max_position_embeddings": geo["max_position_embeddings"],
        "rms_norm_eps": geo["rms_norm_eps"],
        "rope_theta": _f32_value(key("rope.freq_base", 10000.0, kind=float)),
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "torch_dtype": "float32",
    }
    return _special_ids(g, cfg)


def qwen2_config(g: "GGUFFile", key: Hyper) -> dict:
    """config.json of the HF Qwen2ForCausalLM that a GGUF 'qwen2' file holds: q/k/v biases (o none),
    head_dim = hidden_size / heads, every layer full attention (llama.cpp's qwen2 has no sliding window)."""
    geo = _attention_geometry(g, key)
    if geo["head_dim"] * geo["num_attention_heads"] != geo["hidden_size"]:
        raise DataPrepError(f"{g.path}: qwen2.attention.key_length {geo['head_dim']} x {geo['num_attention_heads']} "
                            f"heads != embedding_length {geo['hidden_size']} (Qwen2's head_dim is hidden_size / heads)")
    cfg = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        **{k: geo[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads", "num_key_value_heads")},
        "hidden_act": "silu",
        "max_position_embeddings": geo["max_position_embeddings"],
        "rms_norm_eps": geo["rms_norm_eps"],
        "rope_theta": _f32_value(key("rope.freq_base", 10000.0, kind=float)),
        "use_sliding_window": False,
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "torch_dtype": "float32",
    }
    return _special_ids(g, cfg)


# llama.cpp's Gemma 3 (llama-model.cpp, LLM_ARCH_GEMMA3): every 6th layer global, the others a sliding
# window; the local layers' rope base 10000 (not in the file); the attention scale 1/sqrt(head_dim)
# except for the 27B model (62 layers), whose query_pre_attn_scalar is hidden_size / heads.
GEMMA3_SLIDING_WINDOW_PATTERN = 6
GEMMA3_ROPE_LOCAL_BASE = 10000.0


def gemma3_config(g: "GGUFFile", key: Hyper) -> dict:
    """config.json of the HF Gemma3ForCausalLM (model_type gemma3_text) that a GGUF 'gemma3' file holds."""
    geo = _attention_geometry(g, key, head_dim_default=256)
    n_layers = geo["num_hidden_layers"]
    pattern = int(key("attention.sliding_window_pattern", GEMMA3_SLIDING_WINDOW_PATTERN))
    if pattern < 1:
        raise DataPrepError(f"{g.path}: gemma3.attention.sliding_window_pattern must be positive, got {pattern}")
    for softcap in ("attn_logit_softcapping", "final_logit_softcapping"):
        if g.has(f"gemma3.{softcap}"):
            raise DataPrepError(f"{g.path}: gemma3.{softcap} is set; Gemma 3 has no soft-capping and sinklab does "
                                "not implement it")
    scalar = (geo["hidden_size"] // geo["num_attention_heads"]) if n_layers == 62 else geo["head_dim"]
    cfg = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        **{k: geo[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads", "num_key_value_heads", "head_dim")},
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": geo["max_position_embeddings"],
        "rms_norm_eps": geo["rms_norm_eps"],
        "rope_theta": _f32_value(key("rope.freq_base", 1000000.0, kind=float)),
        "rope_local_base_freq": GEMMA3_ROPE_LOCAL_BASE,
        "rope_scaling": None,
        "sliding_window": int(key("attention.sliding_window")),
        "layer_types": ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)],
        "query_pre_attn_scalar": scalar,
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "attention_bias": False,
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "torch_dtype": "float32",
    }
    return _special_ids(g, cfg)


ARCHITECTURES = {
    "llama": Architecture("llama", _LLAMA_BLOCK, llama_config, permute_qk=True),
    "qwen2": Architecture("qwen2", _QWEN2_BLOCK, qwen2_config),
    "gemma3": Architecture("gemma3", _GEMMA3_BLOCK, gemma3_config, norm_shift=1.0, tokenizers=("llama",)),
}


def hf_tensor_name(gguf_name: str, n_layers: int, arch: Architecture = ARCHITECTURES["llama"]) -> str | None:
    """The HF name of a GGUF tensor, or None if it has none."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < n_layers:
        suffix = arch.block_names.get(parts[2])
        if suffix is not None:
            return f"model.layers.{int(parts[1])}.{suffix}"
    return None


def expected_shape(hf_name: str, cfg: dict) -> tuple[int, ...]:
    """The HF shape of a tensor under config `cfg` (numpy order)."""
    d, v, f = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim", d // cfg["num_attention_heads"])
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    if hf_name in ("model.embed_tokens.weight", "lm_head.weight"):
        return (v, d)
    suffix = hf_name.split(".", 3)[-1] if hf_name.startswith("model.layers.") else hf_name
    return {"model.norm.weight": (d,), "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
            "pre_feedforward_layernorm.weight": (d,), "post_feedforward_layernorm.weight": (d,),
            "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,),
            "self_attn.q_proj.weight": (q, d), "self_attn.k_proj.weight": (kv, d),
            "self_attn.v_proj.weight": (kv, d), "self_attn.o_proj.weight": (d, q),
            "self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,),
            "mlp.gate_proj.weight": (f, d), "mlp.up_proj.weight": (f, d), "mlp.down_proj.weight": (d, f)}[suffix]


def architecture(g: "GGUFFile") -> Architecture:
    arch = g.get("general.architecture", required=True, kind=str)
    if arch not in ARCHITECTURES:
        raise DataPrepError(f"{g.path}: architecture {arch!r} is not supported; gguf-import reads "
                            f"{', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def model_config(g: "GGUFFile") -> dict:
    """config.json of the HF model that the GGUF file holds."""
    arch = architecture(g)
    return arch.config(g, Hyper(g, arch.name))


# ---------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------

# llama.cpp token types (tokenizer.ggml.token_type); SentencePiece's ModelProto.SentencePiece.Type uses
# the same numbers.
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's tokenizer.json split (llama.cpp's 'qwen2'): Llama-3's, but every digit alone.
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _pre_tokenizer(pre: str):
    """HF normalizer and pre-tokenizer for a GGUF tokenizer.ggml.pre name, and the (add_bos,
    ignore_merges) defaults llama.cpp gives that name. The split must be the one the merges were learned
    with, or texts tokenise differently from the original model, so unknown names are refused."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

    def split(pattern):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])

    if pre == "gpt-2":
        return None, gpt2, False, False
    if pre == "smollm":  # SmolLM's tokenizer.json: every digit alone, then GPT-2's split
        return None, pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2]), False, False
    if pre in ("llama3", "llama-v3", "llama-bpe"):
        return None, split(_LLAMA3_SPLIT), True, True
    if pre == "qwen2":  # Qwen2's tokenizer.json: NFC, then its split; no BOS
        return normalizers.NFC(), split(_QWEN2_SPLIT), False, False
    raise DataPrepError(f"tokenizer.ggml.pre {pre!r} is not supported (known: gpt-2, smollm, llama-bpe, qwen2)")


@dataclass
class ImportedTokenizer:
    files: dict                 # file name -> bytes or str (tokenizer.json or tokenizer.model)
    tokenizer_config: dict
    special_tokens_map: dict


def _special_tokens(g: "GGUFFile", tokens: list) -> dict:
    special = {}
    for role, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        tid = g.get(f"tokenizer.ggml.{key}", kind=int)
        if tid is None:
            continue
        if not 0 <= int(tid) < len(tokens):
            raise DataPrepError(f"{g.path}: tokenizer.ggml.{key} {tid} is outside the {len(tokens)} tokens")
        special[role] = tokens[int(tid)]
    return special


def _token_types(g: "GGUFFile", n_tokens: int) -> list:
    types = g.get("tokenizer.ggml.token_type", kind=[int]) or [TOKEN_NORMAL] * n_tokens
    if len(types) != n_tokens:
        raise DataPrepError(f"{g.path}: {len(types)} token types for {n_tokens} tokens")
    return types


def build_tokenizer(g: "GGUFFile", model_max_length: int, arch: Architecture | None = None) -> ImportedTokenizer:
    """The tokenizer of tokenizer.ggml.model: 'gpt2' (byte-level BPE) -> tokenizer.json, 'llama'
    (SentencePiece) -> tokenizer.model."""
    model = g.get("tokenizer.ggml.model", required=True)
    if model == "gpt2":
        return build_bpe_tokenizer(g, model_max_length)
    if model == "llama":
        return build_spm_tokenizer(g, model_max_length, arch)
    raise DataPrepError(f"{g.path}: tokenizer.ggml.model {model!r} is not supported; gguf-import builds "
                        "byte-level BPE ('gpt2') and SentencePiece ('llama') tokenizers")


def build_bpe_tokenizer(g: "GGUFFile", model_max_length: int) -> ImportedTokenizer:
    """A byte-level BPE tokenizer.json from tokenizer.ggml.{tokens, merges, token_type, pre} and the
    special-token ids; CONTROL tokens become special added tokens, USER_DEFINED plain added tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    tokens = g.get("tokenizer.ggml.tokens", required=True, kind=[str])
    merges = g.get("tokenizer.ggml.merges", required=True, kind=[str])
    types = _token_types(g, len(tokens))
    vocab = {}
    for i, tok in enumerate(tokens):
        if vocab.setdefault(tok, i) != i:
            raise DataPrepError(f"{g.path}: token {tok!r} appears twice (ids {vocab[tok]} and {i})")
    pairs = []
    for m in merges:
        pair = m.split(" ")
        if len(pair) != 2:
            raise DataPrepError(f"{g.path}: malformed merge {m!r} (expected 'left right')")
        pairs.append((pair[0], pair[1]))
    try:
        normalizer, pre, add_bos, ignore_merges = _pre_tokenizer(g.get("tokenizer.ggml.pre", "default", kind=str))
    except DataPrepError as e:
        raise DataPrepError(f"{g.path}: {e}") from None
    add_bos = bool(g.get("tokenizer.ggml.add_bos_token", add_bos))
    add_eos = bool(g.get("tokenizer.ggml.add_eos_token", False))

    try:
        tok = Tokenizer(models.BPE(vocab, pairs, ignore_merges=ignore_merges))
    except Exception as e:  # the tokenizers library refuses e.g. a merge of tokens the vocabulary lacks
        raise DataPrepError(f"{g.path}: the tokenizer does not build ({e})") from None
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(types) if t == TOKEN_CONTROL])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i, t in enumerate(types) if t == TOKEN_USER_DEFINED])

    special = _special_tokens(g, tokens)
    if add_bos or add_eos:
        for flag, role in ((add_bos, "bos_token"), (add_eos, "eos_token")):
            if flag and role not in special:
                raise DataPrepError(f"{g.path}: add_{role} is set but the file names no {role}")
        single = " ".join(([special["bos_token"]] if add_bos else []) + ["$A"]
                          + ([special["eos_token"]] if add_eos else []))
        pair = single + " " + single.replace("$A", "$B")
        used = {special[r] for r, f in (("bos_token", add_bos), ("eos_token", add_eos)) if f}
        tok.post_processor = processors.TemplateProcessing(
            single=single, pair=pair, special_tokens=[(t, vocab[t]) for t in sorted(used)])
    tcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": add_bos,
            "add_eos_token": add_eos, "model_max_length": model_max_length, **special}
    return ImportedTokenizer({"tokenizer.json": tok.to_str(pretty=True)}, tcfg, dict(special))


def build_spm_tokenizer(g: "GGUFFile", model_max_length: int, arch: Architecture | None = None) -> ImportedTokenizer:
    """A SentencePiece tokenizer.model from tokenizer.ggml.{tokens, scores, token_type} (the pieces of the
    model convert_hf_to_gguf.py read, in order, with their scores and types) and add_space_prefix.

    What the GGUF does not carry is set as llama.cpp's SPM tokenizer behaves: a BPE model (pieces merged
    by score), byte fallback when the file has BYTE tokens (<0xXX>), no normalisation beyond spaces
    -> U+2581, no removal of extra whitespace, runs of whitespace kept together
    (allow_whitespace_only_pieces). Gemma 3's own tokenizer.model has exactly these settings."""
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2

    tokens = g.get("tokenizer.ggml.tokens", required=True, kind=[str])
    scores = g.get("tokenizer.ggml.scores", required=True, kind=[float])
    types = _token_types(g, len(tokens))
    if len(scores) != len(tokens):
        raise DataPrepError(f"{g.path}: {len(scores)} token scores for {len(tokens)} tokens")
    seen = {}
    for i, tok in enumerate(tokens):
        if seen.setdefault(tok, i) != i:
            raise DataPrepError(f"{g.path}: token {tok!r} appears twice (ids {seen[tok]} and {i})")
        if not tok:
            raise DataPrepError(f"{g.path}: token {i} is empty")
    bad = [i for i, t in enumerate(types) if t not in (1, 2, 3, 4, 5, 6)]
    if bad:
        raise DataPrepError(f"{g.path}: token {bad[0]} has token type {types[bad[0]]} (llama.cpp's are 1-6)")
    special = _special_tokens(g, tokens)
    # SentencePiece needs exactly one UNKNOWN piece. Gemma 3's GGUF marks <unk> CONTROL and names it by
    # tokenizer.ggml.unknown_token_id, which then decides.
    unknown = [i for i, t in enumerate(types) if t == TOKEN_UNKNOWN]
    if "unk_token" in special:
        unk_id = tokens.index(special["unk_token"])
        if any(i != unk_id for i in unknown):
            raise DataPrepError(f"{g.path}: token {unknown[0]} is UNKNOWN but tokenizer.ggml.unknown_token_id is {unk_id}")
        types = list(types)
        types[unk_id] = TOKEN_UNKNOWN
    elif len(unknown) == 1:
        unk_id = unknown[0]
    else:
        raise DataPrepError(f"{g.path}: a SentencePiece vocabulary needs exactly one unknown token (UNKNOWN type or "
                            f"tokenizer.ggml.unknown_token_id), this one has {len(unknown)}")
    add_bos = bool(g.get("tokenizer.ggml.add_bos_token", True))  # llama.cpp's default for SPM
    add_eos = bool(g.get("tokenizer.ggml.add_eos_token", False))
    for flag, role in ((add_bos, "bos_token"), (add_eos, "eos_token")):
        if flag and role not in special:
            raise DataPrepError(f"{g.path}: add_{role} is set but the file names no {role}")

    m = sp_pb2.ModelProto()
    for tok, score, typ in zip(tokens, scores, types):
        m.pieces.add(piece=tok, score=float(score), type=int(typ))
    ts = m.trainer_spec
    ts.model_type = sp_pb2.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = TOKEN_BYTE in types
    ts.allow_whitespace_only_pieces = True
    ts.unk_id = unk_id
    ts.unk_piece = tokens[unk_id]
    for role, id_field, piece_field in (("bos_token", "bos_id", "bos_piece"), ("eos_token", "eos_id", "eos_piece"),
                                        ("pad_token", "pad_id", "pad_piece")):
        if role in special:
            setattr(ts, id_field, tokens.index(special[role]))
            setattr(ts, piece_field, special[role])
        else:
            setattr(ts, id_field, -1)
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = bool(g.get("tokenizer.ggml.add_space_prefix", True))
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    data = m.SerializeToString()
    try:
        import sentencepiece as spm

        spm.SentencePieceProcessor(model_proto=data)
    except Exception as e:  # sentencepiece refuses e.g. a vocabulary it cannot index
        raise DataPrepError(f"{g.path}: the SentencePiece tokenizer does not build ({e})") from None
    tcfg = {"tokenizer_class": "GemmaTokenizer" if arch is not None and arch.name == "gemma3" else "LlamaTokenizer",
            "add_bos_token": add_bos, "add_eos_token": add_eos, "model_max_length": model_max_length,
            "legacy": False, **special}
    return ImportedTokenizer({"tokenizer.model": data}, tcfg, dict(special))


# ---------------------------------------------------------------------------------------------------
# The import
# ---------------------------------------------------------------------------------------------------


def _role(gguf_name: str) -> str:
    """What a GGUF tensor is, for the quantisation summary: embedding, output, norms or blocks."""
    if gguf_name == "token_embd.weight":
        return "embedding"
    if gguf_name == "output.weight":
        return "output"
    if gguf_name.endswith("norm.weight"):
        return "norms"
    return "blocks"


def quantization_summary(tensors: dict[str, tuple[str, int]]) -> str:
    """'Q4_1 (blocks), Q8_0 (embedding), F32 (norms)' from {gguf name: (type name, elements)}: the types,
    the one holding the most elements first, each with the roles of its tensors; a role split over
    several types gets its count ('Q4_K (blocks 168/210), Q6_K (blocks 42/210, output)')."""
    per_role = Counter(_role(name) for name in tensors)
    elements, roles = Counter(), {}
    for name, (type_, n) in tensors.items():
        elements[type_] += n
        roles.setdefault(type_, Counter())[_role(name)] += 1
    order = ("blocks", "embedding", "output", "norms")
    parts = []
    for type_, _ in sorted(elements.items(), key=lambda kv: (-kv[1], kv[0])):
        listed = [r if roles[type_][r] == per_role[r] else f"{r} {roles[type_][r]}/{per_role[r]}"
                  for r in order if roles[type_][r]]
        parts.append(f"{type_} ({', '.join(listed)})")
    return ", ".join(parts)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# The model directory's provenance notes (source file, its sha256, quantisation), beside config.json.
SOURCE_NOTES = "sinklab_source.json"
# The tokenizer files an import may write; an old one of the other form is removed (the first form
# present is the one data_prep and sinklab-survey read).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


VARIANTS = ("base", "instruct")


def model_variant(g: "GGUFFile") -> str:
    """'instruct' when the file's general.name, general.finetune or file name says instruct / chat / -it
    (SmolLM2's GGUF names only its training mix; its file name says Instruct), 'base' when none does and the
    file has no chat template, else 'unknown' (then name it: gguf-import --variant)."""
    import re

    said = " ".join(str(g.get(k, "")) for k in ("general.name", "general.finetune")) + " " + g.path.name
    if re.search(r"instruct|chat|(?<![a-z])it(?![a-z])", said, re.IGNORECASE):
        return "instruct"
    return "unknown" if g.has("tokenizer.chat_template") else "base"


def file_type(g: "GGUFFile") -> str:
    """llama.cpp's name for the file's quantisation mix (general.file_type: Q4_1, Q4_K_M, ...), with
    'AWQ checkpoint' noted where general.name / finetune says the weights were AWQ-quantised before."""
    from gguf import LlamaFileType

    ft = g.get("general.file_type", kind=int)
    try:
        name = LlamaFileType(int(ft)).name.removeprefix("MOSTLY_") if ft is not None else "?"
    except ValueError:
        name = f"file_type {ft}"
    said = " ".join(str(g.get(k, "")) for k in ("general.name", "general.finetune"))
    return f"{name} of an AWQ checkpoint" if "awq" in said.lower() else name


def import_gguf(gguf_path: str | Path, out_dir: str | Path, variant: str | None = None) -> dict:
    """Writes the HF model directory (and its provenance notes, SOURCE_NOTES); returns config.json's
    contents. config.json is written last, so a directory with one is complete. variant: 'base' or
    'instruct' (what the notes say the model is), else model_variant's reading of the file."""
    if variant is not None and variant not in VARIANTS:
        raise DataPrepError(f"--variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    g = GGUFFile(gguf_path)
    arch = architecture(g)
    cfg = arch.config(g, Hyper(g, arch.name))
    n_layers, n_heads, n_kv = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    specs, source = [], {}
    for name, t in g.tensors.items():
        hf = hf_tensor_name(name, n_layers, arch)
        if hf is None:
            raise DataPrepError(f"{g.path}: tensor {name} has no counterpart in HF {cfg['architectures'][0]}")
        if not can_dequantize(t.tensor_type):
            raise DataPrepError(f"{g.path}: tensor {name} has type {type_name(t.tensor_type)}, which "
                                f"gguf.quants.dequantize cannot dequantise")
        shape = g.numpy_shape(name)
        if shape != expected_shape(hf, cfg):
            raise DataPrepError(f"{g.path}: tensor {name} has shape {list(shape)}, the config says "
                                f"{list(expected_shape(hf, cfg))}")
        specs.append((hf, shape, np.float32))
        source[hf] = name
    # The first few missing names, found lazily: block_count comes from the file and may be absurd (a
    # set of all its names hung the importer; found by tests/fuzz/fuzz_gguf.py).
    required = itertools.chain((hf_tensor_name(n, n_layers) for n in ("token_embd.weight", "output_norm.weight")),
                               (f"model.layers.{i}.{s}" for i in range(n_layers) for s in arch.block_names.values()))
    missing = list(itertools.islice((n for n in required if n not in source), 4))
    if missing:
        n_missing = 2 + n_layers * len(arch.block_names) - sum(1 for k in source if k != "lm_head.weight")
        raise DataPrepError(f"{g.path}: missing tensors for HF names {', '.join(missing)}"
                            + (f" and {n_missing - 4} more" if n_missing > 4 else ""))
    specs.sort(key=lambda s: s[0])
    tokenizer = build_tokenizer(g, cfg["max_position_embeddings"], arch)

    def produce(hf_name: str) -> np.ndarray:
        w = g.tensor(source[hf_name])
        if arch.permute_qk and hf_name.endswith("self_attn.q_proj.weight"):
            w = unpermute_qk(w, n_heads)
        elif arch.permute_qk and hf_name.endswith("self_attn.k_proj.weight"):
            w = unpermute_qk(w, n_kv)
        elif arch.norm_shift and hf_name.endswith("norm.weight"):
            w = w - np.float32(arch.norm_shift)  # float32, as transformers' GGUF loader subtracts it
        return w

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "config.json").exists():
        (out / "config.json").unlink()  # the directory is incomplete until the new one is written
    write_safetensors(out / "model.safetensors", specs, produce,
                      metadata={"format": "pt", "source": g.path.name})
    for name in _TOKENIZER_FILES:
        if name not in tokenizer.files:
            (out / name).unlink(missing_ok=True)
    for name, content in tokenizer.files.items():
        tmp = out / f".{name}.tmp"
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, out / name)
    _atomic_write_text(out / "tokenizer_config.json", json.dumps(tokenizer.tokenizer_config, indent=2) + "\n")
    _atomic_write_text(out / "special_tokens_map.json", json.dumps(tokenizer.special_tokens_map, indent=2) + "\n")
    sha = sha256_file(g.path)
    quantization = quantization_summary({name: (type_name(t.tensor_type), int(t.n_elements))
                                         for name, t in g.tensors.items()})
    cfg["gguf_import"] = {
        "source": g.path.name,
        "sha256": sha,
        "general.name": g.get("general.name", ""),
        "tensor_types": dict(sorted(Counter(type_name(t.tensor_type) for t in g.tensors.values()).items())),
        "data_prep_version": __version__,
    }
    # Provenance notes for whoever measures the directory (sinklab-survey copies source, source_sha256
    # and quantization into its results' attributes).
    _atomic_write_text(out / SOURCE_NOTES, json.dumps({
        "source": g.path.name,
        "source_sha256": sha,
        "quantization": quantization,
        "file_type": file_type(g),
        "variant": variant or model_variant(g),
        "model_name": str(g.get("general.name", "")),
        "note": f"GGUF file dequantised to float32 by data_prep gguf-import {__version__}",
    }, indent=2) + "\n")
    _atomic_write_text(out / "config.json", json.dumps(cfg, indent=2) + "\n")
    return cfg
