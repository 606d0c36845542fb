"""Hot headroom: tokens per step that non-hot work may not take, and KV blocks it may only
borrow.

Sized from hot's own recent demand rather than a fixed fraction: the token reserve follows
the mean hot tokens per step, the block reserve the room hot needs to grow back to its peak
block count (blocks hot computed itself; a cached prefix a later turn finds again is not new
demand), both over a sliding window and with a margin, both capped.

The block reserve is lent, not kept idle: a cold or warm prompt admitted while the free
blocks are within the reserve is a *borrower*, and hot work short of blocks preempts
borrowers before anything else. So no free block idles for hot (on multi-turn traffic the
reserve's idle headroom was 3.7-8.8 % of the cache while nobody was denied a block), and
when hot comes back it takes its room from the work that borrowed it, not from cold work
that was admitted with room to spare.
"""

from __future__ import annotations

import math
from collections import deque


class SlidingPeak:
    """Maximum of the values observed in the last ``window`` seconds (monotone deque)."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._q: deque[tuple[float, float]] = deque()

    def observe(self, now: float, value: float) -> None:
        q = self._q
        while q and q[-1][1] <= value:
            q.pop()
        q.append((now, value))
        while q[0][0] < now - self.window:
            q.popleft()

    @property
    def value(self) -> float:
        return self._q[0][1] if self._q else 0.0


class HotReserve:
    """Tracks hot demand and answers how much of a step's budget and the KV pool to hold back.

    ``observe`` is fed once per step with the tokens hot ran and the blocks hot holds.
    """

    def __init__(self, window: float, margin: float, max_frac: float, min_tokens: int = 0):
        self.margin, self.max_frac, self.min_tokens = margin, max_frac, min_tokens
        self._peak_blocks = SlidingPeak(window)
        self._mean_tokens = 0.0
        self._alpha = 0.05
        self.hot_blocks = 0
        self.lent: frozenset[str] = frozenset()  # borrowers: non-hot admitted into the reserve

    def observe(self, now: float, hot_tokens: int, hot_blocks: int) -> None:
        self._mean_tokens += self._alpha * (hot_tokens - self._mean_tokens)
        self._peak_blocks.observe(now, hot_blocks)
        self.hot_blocks = hot_blocks

    def tokens(self, budget: int) -> int:
        """Tokens per step hot may need that non-hot must leave free."""
        want = max(self.min_tokens, math.ceil(self._mean_tokens * (1 + self.margin)))
        return min(want, int(self.max_frac * budget))

    def blocks(self, num_blocks: int) -> int:
        """Free KV blocks hot may want back: room to grow back to its recent peak, plus margin.
        A non-hot prompt admitted into them borrows them (``lent``)."""
        want = math.ceil(self._peak_blocks.value * (1 + self.margin)) - self.hot_blocks
        return max(0, min(want, int(self.max_frac * num_blocks)))
