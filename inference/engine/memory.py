"""Give the allocator's free memory back to the system while the engine is idle; and, at
start, refuse a model or KV pool that does not fit (``check_fits``).

The engine sets glibc to keep freed memory for reuse (``kernels.tune_cpu_allocator``: a 1 GiB
trim threshold, so a step's multi-MB temporaries are not page-faulted afresh), and every
thread's arena keeps its own free chunks. Over a long run of mixed traffic those free chunks
add up in the resident set although nothing uses them (the soak's RSS rose in steps of a few
MB, ``bench/soak.py``). ``malloc_trim(0)`` hands the free pages of every arena back
(``madvise``); it runs only on an idle step, at most every ``interval_s``, so no step pays
for it. A no-op off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from pathlib import Path


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class IdleTrim:
    """``maybe(now)`` on an idle step: trims when ``interval_s`` passed since the last trim."""

    def __init__(self, interval_s: float = 60.0,
                 trim: Callable[[int], int] | None = None) -> None:
        self.interval_s = interval_s
        self._trim = trim if trim is not None else _malloc_trim()
        self._at = 0.0
        self.trims = 0

    def maybe(self, now: float) -> bool:
        if self._trim is None or now - self._at < self.interval_s:
            return False
        self._at = now
        self._trim(0)
        self.trims += 1
        return True


# ---- start-up check: refuse a model that does not fit, saying what it needs ---------------

_GIB = 1024 ** 3


class InsufficientMemory(MemoryError):
    """The model or its KV pool does not fit the memory this machine has available."""


def available_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` (None off Linux)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(what: str, needs: dict[str, int], available: int | None = None) -> None:
    """Raise ``InsufficientMemory`` naming each need (bytes) and what is available when their
    sum exceeds it; a no-op when the available memory is unknown."""
    available = available_bytes() if available is None else available
    total = sum(needs.values())
    if available is None or total <= available:
        return
    parts = ", ".join(f"{name} {size / _GIB:.2f} GiB" for name, size in needs.items())
    raise InsufficientMemory(f"{what} needs {total / _GIB:.2f} GiB of memory ({parts}) but "
                             f"{available / _GIB:.2f} GiB is available")


def checkpoint_bytes(source: str | None) -> int:
    """Bytes of a checkpoint's files (a GGUF, or an HF folder's safetensors): the least the
    weights take resident (0 for the bundled model or an unreadable source)."""
    if source is None:
        return 0
    path = Path(source)
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.glob("*.safetensors"))
    return 0


def pool_summary(num_blocks: int, block_size: int, per_block: int, kv_dtype: object,
                 max_model_len: int, model_context: int,
                 available: int | None = None) -> str:
    """The start-up line that states the KV pool: its blocks, tokens and bytes, the longest
    sequence it serves (the model's context, or less where the pool is smaller) and the
    memory available beside it."""
    available = available_bytes() if available is None else available
    free = "unknown" if available is None else f"{available / _GIB:.1f} GiB"
    capped = "" if max_model_len >= model_context else \
        f" (the model's context {model_context}, capped by the pool or the configuration)"
    return (f"KV pool: {num_blocks} blocks of {block_size} tokens = {num_blocks * block_size} "
            f"tokens, {num_blocks * per_block / 2**20:.0f} MiB of {kv_dtype}; longest "
            f"sequence {max_model_len} tokens{capped}; memory available {free}")
