"""Fashion-MNIST from the repository's gzip IDX files (datasets/fashion-mnist;
nothing is downloaded), as numpy arrays."""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np

FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def _read_idx(path: str, limit: int | None) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        if magic >> 8 != 0x08:
            raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
        ndim = magic & 0xFF
        if not 1 <= ndim <= 4:
            raise ValueError(f"{path}: {ndim} dimensions")
        dims = list(struct.unpack(">" + "I" * ndim, f.read(4 * ndim)))
        if limit is not None:
            dims[0] = min(dims[0], limit)
        n = int(np.prod(dims))
        buf = f.read(n)
        if len(buf) != n:
            raise ValueError(f"{path}: truncated ({len(buf)} of {n} bytes)")
        return np.frombuffer(buf, dtype=np.uint8).reshape(dims)


def fashion_mnist(path: str, split: str = "train", limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(images float32 [n, 28, 28] scaled to [0, 1], labels int64 [n]) of
    split "train" or "test"; ``limit`` reads only the first records."""
    imgs, labels = FILES[split]
    x = _read_idx(os.path.join(path, imgs), limit).astype(np.float32) / 255.0
    y = _read_idx(os.path.join(path, labels), limit).astype(np.int64)
    if len(x) != len(y):
        raise ValueError(f"{path}: {len(x)} images, {len(y)} labels")
    return x, y
