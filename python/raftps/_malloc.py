"""glibc malloc settings for a process that moves model-sized messages.

A pull or push of a large slot goes in messages of up to
STREAM_CHUNK_BYTES (4 MiB), each a new buffer of that size: a ``bytes``
grpcio copies it into, or the slice gRPC's C core joins it into
(raftps._grpccore, which applies these settings before the core starts
its threads). With glibc's defaults each such buffer is above the dynamic mmap
threshold or sits at the top of the heap, where ``free`` trims it: the
memory goes back to the kernel after every message, and the next one
faults its pages in again; and each grpcio thread gets a malloc arena of
its own, whose heaps (64 MiB at most) are trimmed whatever the thresholds
say. Measured on push+pull of 8-10M float32 params: 15,000-20,000 minor
page faults per round with glibc's defaults (one per 4 KiB moved) and
140-170 ms of client CPU per 10M-param round; 6-1,750 faults
(tests/test_malloc.py, over grpcio) and 77-96 ms with the settings
below; over the C core, 5,700-11,000 faults per round of 8M params with
the defaults and 375-1,074 with the settings (python/PERFORMANCE.md).
glibc also reads the settings from the environment, as MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_ and MALLOC_ARENA_MAX (mallopt(3)). The Go client
keeps its buffers in its own heap and pools. raftps.ps and
raftps._grpccore apply them when imported: the arena limit only holds for
threads that have not allocated yet.

The cost: up to TRIM_THRESHOLD bytes of freed memory stay in the process
instead of going back to the kernel, and the process's threads share one
malloc lock (PyTorch's compute threads allocate little per step). Set RAFTPS_MALLOC_TUNING=0 to leave
malloc alone; a process that sets either glibc variable itself is left
alone too.
"""

from __future__ import annotations

import ctypes
import os
import threading

# mallopt(3) parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

# MMAP_THRESHOLD: buffers below it come from the heap, not from mmap
# (glibc's maximum for it is 32 MiB on 64-bit). TRIM_THRESHOLD: free
# memory at the heap's top kept before trimming.
MMAP_THRESHOLD = 16 << 20
TRIM_THRESHOLD = 256 << 20
# ARENA_MAX: one arena. grpcio's and ParamClient's threads would each get
# their own, whose heaps (at most 64 MiB each) give a message's pages back
# whatever the thresholds say.
ARENA_MAX = 1

SETTINGS = ((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_ARENA_MAX, ARENA_MAX))

_ENV_OPT_OUT = "RAFTPS_MALLOC_TUNING"
_GLIBC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX")

_lock = threading.Lock()
_applied: bool | None = None  # None: not tried yet


def _mallopt(param: int, value: int) -> bool:
    """glibc's mallopt; False where there is none (another libc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallopt
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn(param, value) == 1


def keep_message_buffers() -> bool:
    """Set MMAP_THRESHOLD and TRIM_THRESHOLD once per process (see the
    module doc) and report whether they are in effect. Not done, and
    False, when RAFTPS_MALLOC_TUNING=0, when the environment sets either
    glibc variable, or without glibc's mallopt."""
    global _applied
    with _lock:
        if _applied is None:
            if os.environ.get(_ENV_OPT_OUT, "1") == "0" or any(v in os.environ for v in _GLIBC_ENV):
                _applied = False
            else:
                _applied = all(_mallopt(p, v) for p, v in SETTINGS)
        return _applied
