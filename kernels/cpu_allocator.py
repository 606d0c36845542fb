"""glibc allocator tuning for the CPU engine.

Why: a forward pass allocates and frees many tensors of a few MB. glibc serves those with fresh
``mmap`` calls and returns them on free, so every call page-faults its output in again (zeroed
by the kernel). Measured on the SmolLM2 decode attention reference (16 seqs x 256 tokens) that
costs ~4x the arithmetic. Raising the mmap and trim thresholds keeps freed blocks in the heap
for reuse. It is process-wide, so the engine opts in once at start; nothing here runs at import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc caps the mmap threshold at 32 MiB on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


def tune_cpu_allocator(trim_threshold: int = 1 << 30) -> bool:
    """Make glibc keep freed tensors (up to 32 MiB each) for reuse; True if it took effect.

    A no-op returning False off glibc (macOS, musl) or when ``mallopt`` refuses.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
    return mallopt(_M_TRIM_THRESHOLD, min(trim_threshold, 2**31 - 1)) == 1 and ok
