"""safetensors files with numpy only: an atomic, streaming writer and a memory-mapped reader.

Format: 8-byte little-endian header length N, N bytes of JSON ({name: {dtype, shape, data_offsets
[begin, end)}, "__metadata__": {str: str}}, padded with spaces to a multiple of 8), then the raw
little-endian data of every tensor, back to back. The writer takes the tensors one at a time from a
callback, so a model larger than memory can be written; tensors go in the order given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import DataPrepError

_DTYPE_NAMES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<f8"): "F64",
                np.dtype("<i4"): "I32", np.dtype("<i8"): "I64", np.dtype("u1"): "U8"}
_NAME_DTYPES = {v: k for k, v in _DTYPE_NAMES.items()}


def write_safetensors(path: str | Path, specs: list[tuple[str, tuple[int, ...], np.dtype]],
                      produce: Callable[[str], np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Writes ``specs`` (name, shape, dtype) in that order; ``produce(name)`` returns each tensor when
    its turn comes. Temporary file + rename: a crash leaves the old file or none, never half of one."""
    path = Path(path)
    header: dict = {"__metadata__": dict(metadata or {})}
    offset = 0
    for name, shape, dtype in specs:
        dtype = np.dtype(dtype)
        if dtype not in _DTYPE_NAMES:
            raise ValueError(f"{name}: dtype {dtype} has no safetensors name here")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        header[name] = {"dtype": _DTYPE_NAMES[dtype], "shape": [int(s) for s in shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for name, shape, _ in specs:
                entry = header[name]
                arr = np.ascontiguousarray(produce(name), dtype=_NAME_DTYPES[entry["dtype"]])
                if list(arr.shape) != entry["shape"]:
                    raise ValueError(f"{name}: produced shape {arr.shape}, declared {tuple(shape)}")
                f.write(arr.tobytes())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_safetensors(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Memory-mapped tensors (read-only views) and the __metadata__ of a safetensors file."""
    path = Path(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if raw.size < 8:
        raise DataPrepError(f"{path}: too short for a safetensors file")
    n = int.from_bytes(raw[:8].tobytes(), "little")
    if 8 + n > raw.size:
        raise DataPrepError(f"{path}: header length {n} runs past the end of the file")
    try:
        header = json.loads(raw[8:8 + n].tobytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataPrepError(f"{path}: malformed safetensors header: {e}") from None
    metadata = header.pop("__metadata__", {}) or {}
    base = 8 + n
    tensors = {}
    for name, entry in header.items():
        dtype = _NAME_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise DataPrepError(f"{path}: tensor {name}: unsupported dtype {entry['dtype']}")
        begin, end = entry["data_offsets"]
        if base + end > raw.size:
            raise DataPrepError(f"{path}: tensor {name} runs past the end of the file (truncated?)")
        tensors[name] = raw[base + begin: base + end].view(dtype).reshape(entry["shape"])
    return tensors, metadata
