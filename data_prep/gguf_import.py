"""GGUF (llama.cpp) -> Hugging Face Llama model directory.

``python -m data_prep gguf-import model.gguf -o DIR`` writes DIR/config.json (LlamaForCausalLM),
DIR/model.safetensors (float32), DIR/tokenizer.json (built with HF ``tokenizers`` from the GGUF's own
vocabulary, merges and special tokens), tokenizer_config.json, special_tokens_map.json and
sinklab_source.json (provenance: the GGUF file, its sha256, its quantisation, for sinklab-survey). The result
loads with transformers' ``LlamaForCausalLM.from_pretrained`` and with sinklab's HF loader.

What a GGUF file stores differently from an HF checkpoint, and what this module undoes:

* Quantisation. Tensors are cut into blocks along the input dimension; each block stores small
  integers and one or two float16 scales. ``dequantize`` expands them with numpy, one function per
  block format (the layouts of ggml's block_q4_0 ... block_q6_k, written out in each docstring).
* The rotary layout of q_proj and k_proj. HF's Llama rotates the pair (i, i + head_dim/2) of every
  head; llama.cpp rotates the adjacent pair (2i, 2i+1), so convert_hf_to_gguf.py reorders the rows of
  attn_q (by n_head) and attn_k (by n_head_kv). ``unpermute_qk`` puts them back.
* Shapes. GGUF lists dimensions innermost first (ne[0] = in_features); numpy and HF list them
  outermost first, so a GGUF [in, out] matrix is the HF [out, in] weight with the same bytes.
* Names: token_embd / blk.N.attn_q ... / output_norm / output (absent: tied to token_embd).

Only architecture 'llama' with a byte-level BPE ('gpt2') tokenizer is accepted; anything else stops
with one line naming the file and what is unsupported.
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import DataPrepError, __version__
from .safetensors_io import write_safetensors
from .tokenization import sha256_file

# ---------------------------------------------------------------------------------------------------
# Block formats. Every function takes the raw blocks of one tensor, uint8 [n_blocks, type_size], and
# returns float32 [n_blocks, block_size]. Arithmetic is float32 in ggml's order (scale * integer
# (+/- offset)), so results agree with llama.cpp's dequantize_row_* to the last bit or nearly so.
# ---------------------------------------------------------------------------------------------------


def _half(blocks: np.ndarray, at: int) -> np.ndarray:
    """The float16 stored at byte offset ``at`` of every block, as float32 [n, 1]."""
    return np.ascontiguousarray(blocks[:, at:at + 2]).view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32]: low nibbles are elements 0..15, high nibbles elements 16..31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes, one little-endian uint32 per block -> [n, 32]: bit j belongs to element j."""
    word = np.ascontiguousarray(qh).view("<u4")  # [n, 1]
    return ((word >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)


def _f32(blocks):
    """F32: 4 bytes per element."""
    return np.ascontiguousarray(blocks).view("<f4")


def _f16(blocks):
    """F16: 2 bytes per element."""
    return np.ascontiguousarray(blocks).view("<f2").astype(np.float32)


def _bf16(blocks):
    """BF16: the upper 16 bits of a float32."""
    upper = np.ascontiguousarray(blocks).view("<u2").astype(np.uint32)
    return (upper << 16).view(np.float32)


def _q4_0(blocks):
    """Q4_0, 32 elements in 18 bytes: f16 d | 16 bytes of 4-bit q.  x = d * (q - 8)."""
    d = _half(blocks, 0)
    q = _nibbles(blocks[:, 2:18]).astype(np.int8) - 8
    return d * q


def _q4_1(blocks):
    """Q4_1, 32 elements in 20 bytes: f16 d | f16 m | 16 bytes of 4-bit q.  x = d * q + m."""
    d, m = _half(blocks, 0), _half(blocks, 2)
    return d * _nibbles(blocks[:, 4:20]) + m


def _q5_0(blocks):
    """Q5_0, 32 elements in 22 bytes: f16 d | u32 fifth bits | 16 bytes of low 4 bits.
    x = d * (q - 16)."""
    d = _half(blocks, 0)
    q = _nibbles(blocks[:, 6:22]) | (_fifth_bits(blocks[:, 2:6]) << 4)
    return d * (q.astype(np.int8) - 16)


def _q5_1(blocks):
    """Q5_1, 32 elements in 24 bytes: f16 d | f16 m | u32 fifth bits | 16 bytes of low 4 bits.
    x = d * q + m."""
    d, m = _half(blocks, 0), _half(blocks, 2)
    q = _nibbles(blocks[:, 8:24]) | (_fifth_bits(blocks[:, 4:8]) << 4)
    return d * q + m


def _q8_0(blocks):
    """Q8_0, 32 elements in 34 bytes: f16 d | 32 int8 q.  x = d * q."""
    d = _half(blocks, 0)
    return d * np.ascontiguousarray(blocks[:, 2:34]).view(np.int8)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit (scale, min) pairs of a Q4_K/Q5_K super-block, packed in 12 bytes [n, 12]:
    pairs 0..3 are the low 6 bits of bytes 0..3 (scale) and 4..7 (min); pairs 4..7 take their low 4
    bits from bytes 8..11 (scale: low nibble, min: high nibble) and their top 2 bits from the top 2
    bits of bytes 0..3 (scale) and 4..7 (min)."""
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc.astype(np.float32), mn.astype(np.float32)


def _k_low_nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 128] bytes -> [n, 8, 32]: sub-block 2g is the low nibbles of bytes 32g..32g+31, sub-block
    2g+1 their high nibbles."""
    qs = qs.reshape(-1, 4, 32)
    return np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 8, 32)


def _q4_k(blocks):
    """Q4_K, 256 elements in 144 bytes: f16 d | f16 dmin | 12 bytes of 6-bit (scale, min) x 8 |
    128 bytes of 4-bit q.  Sub-block j of 32: x = (d * scale_j) * q - dmin * min_j."""
    d, dmin = _half(blocks, 0), _half(blocks, 2)
    sc, mn = _k_scales(blocks[:, 4:16])
    q = _k_low_nibbles(blocks[:, 16:144])
    return ((d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]).reshape(-1, 256)


def _q5_k(blocks):
    """Q5_K, 256 elements in 176 bytes: f16 d | f16 dmin | 12 bytes of scales/mins | 32 bytes of
    fifth bits | 128 bytes of low 4 bits. Element l of sub-block j takes bit j of byte l of the fifth
    bits.  x = (d * scale_j) * q - dmin * min_j."""
    d, dmin = _half(blocks, 0), _half(blocks, 2)
    sc, mn = _k_scales(blocks[:, 4:16])
    qh = blocks[:, 16:48]
    fifth = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1  # [n, 8, 32]
    q = _k_low_nibbles(blocks[:, 48:176]) | (fifth << 4)
    return ((d * sc)[:, :, None] * q - (dmin * mn)[:, :, None]).reshape(-1, 256)


def _q6_k(blocks):
    """Q6_K, 256 elements in 210 bytes: 128 bytes of low 4 bits | 64 bytes of high 2 bits | 16 int8
    scales | f16 d. Each half of 128 elements uses 64 low bytes L and 32 high bytes H: its quarters
    are (L[0:32] low nibbles, L[32:64] low, L[0:32] high, L[32:64] high), the two high bits of quarter
    k from bits 2k, 2k+1 of H. Scale s = element // 16.  x = (d * scale_s) * (q - 32)."""
    ql = blocks[:, 0:128].reshape(-1, 2, 2, 32)                  # [n, half, which 32 bytes, 32]
    qh = blocks[:, 128:192].reshape(-1, 2, 1, 32)                # [n, half, 1, 32]
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2)           # [n, half, quarter, 32]
    high = (qh >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]) & 3
    q = ((low | (high << 4)).astype(np.int8) - 32).reshape(-1, 16, 16)
    scales = np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(np.float32)
    d = _half(blocks, 208)
    return ((d * scales)[:, :, None] * q).reshape(-1, 256)


@dataclass(frozen=True)
class BlockFormat:
    name: str
    block_size: int  # elements per block
    type_size: int   # bytes per block
    dequantize_blocks: Callable[[np.ndarray], np.ndarray]


# GGML type id (gguf.GGMLQuantizationType) -> format. Ids are part of the GGUF file format.
BLOCK_FORMATS = {
    0: BlockFormat("F32", 1, 4, _f32),
    1: BlockFormat("F16", 1, 2, _f16),
    2: BlockFormat("Q4_0", 32, 18, _q4_0),
    3: BlockFormat("Q4_1", 32, 20, _q4_1),
    6: BlockFormat("Q5_0", 32, 22, _q5_0),
    7: BlockFormat("Q5_1", 32, 24, _q5_1),
    8: BlockFormat("Q8_0", 32, 34, _q8_0),
    12: BlockFormat("Q4_K", 256, 144, _q4_k),
    13: BlockFormat("Q5_K", 256, 176, _q5_k),
    14: BlockFormat("Q6_K", 256, 210, _q6_k),
    30: BlockFormat("BF16", 1, 2, _bf16),
}


def type_name(type_id: int) -> str:
    """A GGML type id as llama.cpp names it (Q4_1, IQ2_XS, ...), for messages."""
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(int(type_id)).name
    except ValueError:
        return f"type {int(type_id)}"


def dequantize(raw: np.ndarray, type_id: int, n_elements: int) -> np.ndarray:
    """The float32 values [n_elements] of one tensor's raw bytes (uint8, any shape)."""
    fmt = BLOCK_FORMATS.get(int(type_id))
    if fmt is None:
        raise ValueError(f"unsupported tensor type {type_name(type_id)}")
    if n_elements % fmt.block_size:
        raise ValueError(f"{n_elements} elements are not whole {fmt.name} blocks of {fmt.block_size}")
    n_blocks = n_elements // fmt.block_size
    raw = np.asarray(raw).reshape(-1).view(np.uint8)
    if raw.size != n_blocks * fmt.type_size:
        raise ValueError(f"{fmt.name}: {raw.size} bytes for {n_elements} elements, expected "
                         f"{n_blocks * fmt.type_size}")
    return fmt.dequantize_blocks(raw.reshape(n_blocks, fmt.type_size)).reshape(n_elements)


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF row order of a GGUF attn_q (n_heads = n_head) or attn_k (n_heads = n_head_kv) weight
    [n_heads * head_dim, in]. Within each head GGUF row 2i + s holds HF row i + s * head_dim/2
    (s = 0, 1): the inverse of convert_hf_to_gguf.py's permute."""
    rows = w.shape[0]
    if rows % n_heads or (rows // n_heads) % 2:
        raise ValueError(f"{rows} rows are not {n_heads} heads of an even head dimension")
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------------------------------------------
# Tensor names
# ---------------------------------------------------------------------------------------------------

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
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


def hf_tensor_name(gguf_name: str, n_layers: int) -> str | None:
    """The HF Llama name of a GGUF tensor, or None if it has none."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) < n_layers:
        suffix = _BLOCK_NAMES.get(parts[2])
        if suffix is not None:
            return f"model.layers.{int(parts[1])}.{suffix}"
    return None


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


def expected_shape(hf_name: str, cfg: dict) -> tuple[int, ...]:
    """The HF shape of a LlamaForCausalLM tensor under config `cfg` (numpy order)."""
    d, v, f = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    q, kv = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
    if hf_name in ("model.embed_tokens.weight", "lm_head.weight"):
        return (v, d)
    suffix = hf_name.split(".", 3)[-1] if hf_name.startswith("model.layers.") else hf_name
    return {"model.norm.weight": (d,), "input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
            "self_attn.q_proj.weight": (q, d), "self_attn.k_proj.weight": (kv, d),
            "self_attn.v_proj.weight": (kv, d), "self_attn.o_proj.weight": (d, q),
            "mlp.gate_proj.weight": (f, d), "mlp.up_proj.weight": (f, d), "mlp.down_proj.weight": (d, f)}[suffix]


def llama_config(g: GGUFFile) -> dict:
    """config.json of the HF LlamaForCausalLM that the GGUF file holds."""
    arch = g.get("general.architecture", required=True)
    if arch != "llama":
        raise DataPrepError(f"{g.path}: architecture {arch!r} is not supported; gguf-import reads "
                            "Llama-family models (general.architecture 'llama') only")

    def key(name, default=None, kind=int):
        """A hyperparameter: one value of `kind` (ints positive), not a per-layer list."""
        value = g.get(f"llama.{name}", default, required=default is None)
        if isinstance(value, list):
            raise DataPrepError(f"{g.path}: llama.{name} varies per layer; not supported")
        if not _is_kind(value, kind) or (kind is int and value < 0) or (kind is float and not np.isfinite(value)):
            raise DataPrepError(f"{g.path}: llama.{name} is {value!r}, expected a"
                                f"{' non-negative' if kind is int else ' finite'} {kind.__name__}")
        return value

    n_layers = int(key("block_count"))
    d_model = int(key("embedding_length"))
    n_heads = int(key("attention.head_count"))
    if min(n_layers, d_model, n_heads) < 1:
        raise DataPrepError(f"{g.path}: llama.block_count, embedding_length and attention.head_count must be "
                            f"positive (got {n_layers}, {d_model}, {n_heads})")
    n_kv = int(key("attention.head_count_kv", n_heads))
    head_dim = int(key("attention.key_length", d_model // n_heads))
    if n_kv < 1 or n_heads % n_kv or head_dim < 2 or head_dim % 2:
        raise DataPrepError(f"{g.path}: {n_heads} heads, {n_kv} key/value heads and head size {head_dim} are not "
                            "a Llama attention layout (RoPE needs an even head size)")
    if int(key("attention.value_length", head_dim)) != head_dim:
        raise DataPrepError(f"{g.path}: value_length != key_length is not a Llama layout")
    if int(key("rope.dimension_count", head_dim)) != head_dim:
        raise DataPrepError(f"{g.path}: partial rotary (rope.dimension_count "
                            f"{key('rope.dimension_count')} < head_dim {head_dim}) is not supported")
    scaling = key("rope.scaling.type", "none", kind=str)
    if scaling != "none" or "rope_freqs.weight" in g.tensors:
        raise DataPrepError(f"{g.path}: RoPE scaling ({scaling if scaling != 'none' else 'rope_freqs'}) "
                            "is not supported")
    if int(key("expert_count", 0)) > 0:
        raise DataPrepError(f"{g.path}: mixture-of-experts Llama models are not supported")
    if "token_embd.weight" not in g.tensors:
        raise DataPrepError(f"{g.path}: no token_embd.weight tensor")
    vocab_size = g.numpy_shape("token_embd.weight")[0]
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": d_model,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": int(key("context_length")),
        "rms_norm_eps": _f32_value(key("attention.layer_norm_rms_epsilon", kind=float)),
        "rope_theta": _f32_value(key("rope.freq_base", 10000.0, kind=float)),
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "torch_dtype": "float32",
    }
    for hf_key, gguf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                             ("pad_token_id", "padding_token_id")):
        value = g.get(f"tokenizer.ggml.{gguf_key}", kind=int)
        if value is not None:
            cfg[hf_key] = int(value)
    return cfg


# ---------------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------------

# llama.cpp token types (tokenizer.ggml.token_type)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _pre_tokenizer(pre: str):
    """HF pre-tokenizer for a GGUF tokenizer.ggml.pre name, and the (add_bos, ignore_merges) defaults
    llama.cpp gives that name. The split must be the one the merges were learned with, or texts
    tokenise differently from the original model, so unknown names are refused."""
    from tokenizers import Regex, pre_tokenizers

    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "gpt-2":
        return gpt2, False, False
    if pre == "smollm":  # SmolLM's tokenizer.json: every digit alone, then GPT-2's split
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2]), False, False
    if pre in ("llama3", "llama-v3", "llama-bpe"):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), True, True
    raise DataPrepError(f"tokenizer.ggml.pre {pre!r} is not supported (known: gpt-2, smollm, llama-bpe)")


@dataclass
class ImportedTokenizer:
    tokenizer: object           # tokenizers.Tokenizer
    tokenizer_config: dict
    special_tokens_map: dict


def build_tokenizer(g: GGUFFile, model_max_length: int) -> ImportedTokenizer:
    """A byte-level BPE tokenizer from tokenizer.ggml.{tokens, merges, token_type, pre} and the
    special-token ids; CONTROL tokens become special added tokens, USER_DEFINED plain added tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    model = g.get("tokenizer.ggml.model", required=True)
    if model != "gpt2":
        raise DataPrepError(f"{g.path}: tokenizer.ggml.model {model!r} is not supported; gguf-import "
                            "builds byte-level BPE ('gpt2') tokenizers only")
    tokens = g.get("tokenizer.ggml.tokens", required=True, kind=[str])
    merges = g.get("tokenizer.ggml.merges", required=True, kind=[str])
    types = g.get("tokenizer.ggml.token_type", kind=[int]) or [TOKEN_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise DataPrepError(f"{g.path}: {len(types)} token types for {len(tokens)} tokens")
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
        pre, add_bos, ignore_merges = _pre_tokenizer(g.get("tokenizer.ggml.pre", "default", kind=str))
    except DataPrepError as e:
        raise DataPrepError(f"{g.path}: {e}") from None
    add_bos = bool(g.get("tokenizer.ggml.add_bos_token", add_bos))
    add_eos = bool(g.get("tokenizer.ggml.add_eos_token", False))

    try:
        tok = Tokenizer(models.BPE(vocab, pairs, ignore_merges=ignore_merges))
    except Exception as e:  # the tokenizers library refuses e.g. a merge of tokens the vocabulary lacks
        raise DataPrepError(f"{g.path}: the tokenizer does not build ({e})") from None
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(types) if t == TOKEN_CONTROL])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i, t in enumerate(types) if t == TOKEN_USER_DEFINED])

    special = {}
    for role, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        tid = g.get(f"tokenizer.ggml.{key}", kind=int)
        if tid is None:
            continue
        if not 0 <= int(tid) < len(tokens):
            raise DataPrepError(f"{g.path}: tokenizer.ggml.{key} {tid} is outside the {len(tokens)} tokens")
        special[role] = tokens[int(tid)]
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
    return ImportedTokenizer(tok, tcfg, dict(special))


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


def import_gguf(gguf_path: str | Path, out_dir: str | Path) -> dict:
    """Writes the HF model directory (and its provenance notes, SOURCE_NOTES); returns config.json's
    contents. config.json is written last, so a directory with one is complete."""
    g = GGUFFile(gguf_path)
    cfg = llama_config(g)
    n_layers, n_heads, n_kv = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    specs, source = [], {}
    for name, t in g.tensors.items():
        hf = hf_tensor_name(name, n_layers)
        if hf is None:
            raise DataPrepError(f"{g.path}: tensor {name} has no counterpart in HF LlamaForCausalLM")
        if int(t.tensor_type) not in BLOCK_FORMATS:
            raise DataPrepError(f"{g.path}: tensor {name} has type {type_name(t.tensor_type)}, which "
                                f"gguf-import cannot dequantise (supported: "
                                f"{', '.join(f.name for f in BLOCK_FORMATS.values())})")
        shape = g.numpy_shape(name)
        if shape != expected_shape(hf, cfg):
            raise DataPrepError(f"{g.path}: tensor {name} has shape {list(shape)}, the config says "
                                f"{list(expected_shape(hf, cfg))}")
        specs.append((hf, shape, np.float32))
        source[hf] = name
    # The first few missing names, found lazily: block_count comes from the file and may be absurd (a
    # set of all its names hung the importer; found by tests/fuzz/fuzz_gguf.py).
    required = itertools.chain((hf_tensor_name(n, n_layers) for n in ("token_embd.weight", "output_norm.weight")),
                               (f"model.layers.{i}.{s}" for i in range(n_layers) for s in _BLOCK_NAMES.values()))
    missing = list(itertools.islice((n for n in required if n not in source), 4))
    if missing:
        n_missing = 2 + n_layers * len(_BLOCK_NAMES) - sum(1 for k in source if k != "lm_head.weight")
        raise DataPrepError(f"{g.path}: missing tensors for HF names {', '.join(missing)}"
                            + (f" and {n_missing - 4} more" if n_missing > 4 else ""))
    specs.sort(key=lambda s: s[0])
    tokenizer = build_tokenizer(g, cfg["max_position_embeddings"])

    def produce(hf_name: str) -> np.ndarray:
        w = g.tensor(source[hf_name])
        if hf_name.endswith("self_attn.q_proj.weight"):
            w = unpermute_qk(w, n_heads)
        elif hf_name.endswith("self_attn.k_proj.weight"):
            w = unpermute_qk(w, n_kv)
        return w

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "config.json").exists():
        (out / "config.json").unlink()  # the directory is incomplete until the new one is written
    write_safetensors(out / "model.safetensors", specs, produce,
                      metadata={"format": "pt", "source": g.path.name})
    tokenizer.tokenizer.save(str(out / ".tokenizer.json.tmp"))
    os.replace(out / ".tokenizer.json.tmp", out / "tokenizer.json")
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
        "note": f"GGUF file dequantised to float32 by data_prep gguf-import {__version__}",
    }, indent=2) + "\n")
    _atomic_write_text(out / "config.json", json.dumps(cfg, indent=2) + "\n")
    return cfg
