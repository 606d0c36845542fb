"""Pure statistics shared by everyone who measures: nearest-rank percentiles and the gaps
between tokens. No Django, no state."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least ``q`` % of values ≤ it.

    ``percentile([1..100], 99) == 99``; ``None`` for no values. Nearest rank never interpolates,
    so a reported P99 is always a latency that some request actually saw.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def tbt_stats(
    token_times: Sequence[float] | Sequence[Sequence[float]],
) -> tuple[float | None, float | None, float | None]:
    """(p50, p99, max) of the gaps between consecutive tokens, in seconds.

    ``token_times`` are the per-token ``time.time()`` stamps of one choice, or a list of such
    lists (n > 1 choices: gaps are pooled, never taken across choices). The first token's wait
    is TTFT, not TBT. Fewer than two tokens → ``(None, None, None)``.
    """
    streams = token_times if token_times and isinstance(token_times[0], Sequence) else [token_times]
    gaps = [b - a for times in streams for a, b in zip(times, times[1:])]
    if not gaps:
        return None, None, None
    return percentile(gaps, 50), percentile(gaps, 99), max(gaps)
