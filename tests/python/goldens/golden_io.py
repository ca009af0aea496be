"""Writes golden files for the C++ op tests: safetensors (header length, JSON header, raw data) with
scalar parameters in __metadata__. Dependency-free (numpy only) so the format is read exactly as the
C++ reader sees it. Run by the gen_*.py scripts beside this file with torch as the oracle."""
import json
import os

import numpy as np

_DTYPES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int32"): "I32"}


def save_golden(path, tensors, params):
    """tensors: {"case/name": ndarray}; params: {"case/name": number}; also records the case list."""
    header, blobs, offset = {}, [], 0
    cases = sorted({k.split("/")[0] for k in tensors})
    meta = {k: repr(float(v)) for k, v in params.items()}
    meta["cases"] = ",".join(cases)
    header["__metadata__"] = meta
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in _DTYPES:
            raise ValueError(f"{name}: unsupported dtype {arr.dtype}")
        data = arr.tobytes()
        header[name] = {"dtype": _DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, sort_keys=False).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def f32_input(rng, *shape, scale=1.0):
    """Random input exactly representable in f32 (so the f32 and f64 runs see the same numbers)."""
    return (rng.standard_normal(shape) * scale).astype(np.float32)
