"""Load a checkpoint exported with ``raftps checkpoint export --format
safetensors`` (pure Python + numpy; torch only to fill a model).

    sd = raftps.checkpoint.load_state_dict("model.safetensors")        # name -> torch tensor
    raftps.checkpoint.load_state_dict("model.safetensors", model)      # into a model (strict)
    arrays, meta = raftps.checkpoint.read_safetensors("model.safetensors")  # numpy, metadata
"""

from __future__ import annotations

import json
import struct

import numpy as np

from raftps import errors

_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def read_safetensors(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(name -> numpy array of its shape, __metadata__) of a safetensors
    file. The arrays are views of one buffer read from the file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise errors.InvalidArgument(f"{path}: not a safetensors file ({len(raw)} bytes)")
    n, = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise errors.InvalidArgument(f"{path}: header of {n} bytes in a {len(raw)}-byte file")
    try:
        hdr = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise errors.InvalidArgument(f"{path}: bad header: {e}") from e
    meta = hdr.pop("__metadata__", {}) or {}
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, t in hdr.items():
        dt = _DTYPES.get(t.get("dtype"))
        if dt is None:
            raise errors.InvalidArgument(f"{path}: tensor {name!r}: dtype {t.get('dtype')!r} unsupported")
        lo, hi = t["data_offsets"]
        shape = tuple(t["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not 0 <= lo <= hi <= len(data) or hi - lo != count * np.dtype(dt).itemsize:
            raise errors.InvalidArgument(f"{path}: tensor {name!r}: offsets {lo}..{hi} do not fit shape {shape}")
        out[name] = np.frombuffer(data, dtype=dt, count=count, offset=lo).reshape(shape)
    return out, meta


def load_state_dict(path: str, model=None, strict: bool = True):
    """The exported parameters as a state dict of torch tensors (names and
    shapes as the job's params, i.e. the model's ``named_parameters()``);
    with ``model``, also loads them into it (``strict`` as torch's) and
    returns load_state_dict's result."""
    import torch

    arrays, _ = read_safetensors(path)
    sd = {k: torch.from_numpy(np.array(v, dtype=np.float32, copy=True)) for k, v in arrays.items()}
    if model is None:
        return sd
    return model.load_state_dict(sd, strict=strict)
