"""Give the allocator's free memory back to the system while the engine is idle.

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
