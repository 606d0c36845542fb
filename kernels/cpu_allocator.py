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
import functools
import sys

import torch

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc caps the mmap threshold at 32 MiB on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
_MADV_HUGEPAGE = 14
_HUGE_PAGE = 2 * 1024 * 1024


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _libc_function(name: str) -> ctypes._NamedFuncPointer | None:
    """``name`` from the C library on Linux; None elsewhere or where it has no such one."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(_libc(), name)
    except (OSError, AttributeError):
        return None


def tune_cpu_allocator(trim_threshold: int = 1 << 30) -> bool:
    """Make glibc keep freed tensors (up to 32 MiB each) for reuse; True if it took effect.

    A no-op returning False off glibc (macOS, musl) or when ``mallopt`` refuses.
    """
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX) == 1
    return mallopt(_M_TRIM_THRESHOLD, min(trim_threshold, 2**31 - 1)) == 1 and ok


def zeros_in_huge_pages(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed CPU tensor whose whole 2 MiB pages are asked to be huge pages
    (``madvise(MADV_HUGEPAGE)``, before the zeroing first touches them).

    Why: the paged KV cache is read a few hundred bytes at a time from blocks scattered over
    gigabytes, so with 4 KiB pages nearly every block read misses the TLB; the decode
    attention of 64 sequences x 128 tokens over a 2 GiB cache took 21-25 ms a step against
    25-27 ms without (docs/engine.md). Where the kernel's transparent huge pages are off (or
    not Linux) the advice fails silently and the tensor is as ``torch.zeros`` makes it.
    """
    t = torch.empty(shape, dtype=dtype)
    nbytes = t.numel() * t.element_size()
    start = -(-t.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
    end = (t.data_ptr() + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    madvise = _libc_function("madvise") if end > start else None
    if madvise is not None:
        madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_HUGEPAGE)
    return t.zero_()
