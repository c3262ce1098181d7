"""Keep large CPU allocations in the heap between forward passes (glibc `mallopt`).

Why: a prompt chunk's activations are large (the 1.5B's gate/up output for 2,048 tokens is 147 MB
per layer), and glibc serves every allocation above its mmap threshold (at most 32 MB) with a fresh
`mmap`, returned to the kernel on free. Each forward then pays a page fault per 4 KB it writes:
on a 2-core Zen 5 a fresh 73 MB output cost 19 ms of a 62 ms GEMM, and the 1.5B's 16-request RAG
workload spent ~12% of its time faulting (docs/performance.md, session 19). Raising the mmap and
trim thresholds makes freed blocks stay in the heap and be reused by the next chunk. Peak RSS is
unchanged (measured 2.61 vs 2.62 GB on that workload); what changes is that memory freed after a
peak is kept for the next one instead of returned to the kernel: +38 MB after that workload; a
synthetic mix of 4-147 MB buffers with small ones between settled at 480-650 MB against 250-280 MB
(fragmentation is bounded, not a leak). `generator.engine.cpu_alloc_reuse_mb: 0` turns it off.

Only glibc has `mallopt` with these parameters; elsewhere (musl, macOS) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# glibc malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

_applied: int | None = None


def _libc() -> ctypes.CDLL:
    """The C library (raises OSError where there is none to load)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def keep_large_allocations(mb: int) -> bool:
    """Serve allocations below `mb` MiB from the heap and keep up to that much freed memory in it
    (0: leave glibc's defaults). Process-wide and applied once: the first engine's value stays
    (a later, different value is logged and ignored). Returns whether the setting is in effect."""
    global _applied
    if mb <= 0:
        return False
    if _applied is not None:
        if _applied != mb:
            log.info("cpu_alloc_reuse_mb=%d ignored: this process already runs with %d", mb, _applied)
        return True
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    size = min(mb, 2047) << 20  # an int: at most 2 GiB - 1 MiB
    if not (mallopt(M_MMAP_THRESHOLD, size) and mallopt(M_TRIM_THRESHOLD, size)):
        return False
    _applied = mb
    return True


def release_free_heap() -> bool:
    """Return the heap's free memory to the kernel once (glibc `malloc_trim`): called after an engine
    has loaded, when what is free is loading's garbage (the tokenizer's JSON, GGUF metadata) that the
    raised trim threshold would otherwise keep for good. Activations grow the heap again as above.
    Measured on Qwen2.5-1.5B (GGUF blocks): RSS after load 1,510 -> 1,483 MiB. False where there is
    no glibc."""
    try:
        trim = _libc().malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True
