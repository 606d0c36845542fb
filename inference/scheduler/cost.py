"""Step-time estimators: how long the scheduler expects a step to take.

The tier policy reasons about slack (deadline minus expected remaining work), which needs a
model of step time. Two implementations share one protocol: the simulator hands its calibrated
cost model in, and the real engine uses ``EwmaCostEstimator``, which learns a line
``seconds = base + per_token * tokens`` online from measured steps (``observe_step``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class CostEstimator(Protocol):
    def step_time(self, num_tokens: int, context_tokens: int = 0) -> float:
        """Expected seconds of a step computing ``num_tokens`` tokens over ``context_tokens``
        tokens of cached context (summed over the batch)."""

    def observe_step(self, num_tokens: int, seconds: float) -> None:
        """Learn from a measured step; estimators with a fixed model may ignore it."""


def max_tokens_within(est: CostEstimator, seconds: float, context_tokens: int,
                      upper: int) -> int:
    """Largest token count in ``[0, upper]`` whose estimated step fits ``seconds``.

    Bisection on a monotone estimate: a dozen calls, whatever the estimator. An estimator
    with its own ``max_tokens_within`` (the simulator's cost model: the same bisection
    without a call per probe) answers it.
    """
    own = getattr(est, "max_tokens_within", None)
    if own is not None:
        return own(seconds, context_tokens, upper)
    if est.step_time(upper, context_tokens) <= seconds:
        return upper
    return largest_fitting(0, upper, lambda n: est.step_time(n, context_tokens) <= seconds)


def largest_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """Largest ``n`` in ``[lo, hi)`` with ``fits(n)``, by bisection; ``fits`` is monotone
    (true up to some count, false after), ``fits(hi)`` is false and ``lo`` fits or is 0."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


class LinearCost:
    """``base + per_token * tokens + per_context * context``: fixed, for tests and priors."""

    def __init__(self, base: float, per_token: float = 0.0, per_context: float = 0.0) -> None:
        if base < 0 or per_token < 0 or per_context < 0:
            raise ValueError("cost coefficients must be non-negative")
        self.base, self.per_token, self.per_context = base, per_token, per_context

    def step_time(self, num_tokens: int, context_tokens: int = 0) -> float:
        return self.base + self.per_token * num_tokens + self.per_context * context_tokens

    def observe_step(self, num_tokens: int, seconds: float) -> None:
        return None


class EwmaCostEstimator:
    """Online least squares with exponential forgetting over (tokens, seconds) pairs.

    Keeps exponentially weighted moments of x = tokens and y = seconds; the fitted line is
    clamped to non-negative coefficients so a few noisy steps never predict negative times.
    Until two distinct token counts are seen it scales the prior line by the observed ratio.
    """

    def __init__(self, base: float = 0.02, per_token: float = 2e-4, alpha: float = 0.05,
                 ) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must lie in (0, 1]")
        self.base, self.per_token, self.alpha = base, per_token, alpha
        self._n = 0
        self._mx = self._my = self._mxx = self._mxy = 0.0

    def step_time(self, num_tokens: int, context_tokens: int = 0) -> float:
        return self.base + self.per_token * num_tokens

    def observe_step(self, num_tokens: int, seconds: float) -> None:
        if num_tokens <= 0 or seconds <= 0:
            return
        x, y = float(num_tokens), float(seconds)
        a = self.alpha if self._n else 1.0
        self._n += 1
        self._mx += a * (x - self._mx)
        self._my += a * (y - self._my)
        self._mxx += a * (x * x - self._mxx)
        self._mxy += a * (x * y - self._mxy)
        var = self._mxx - self._mx ** 2
        if var > 1e-9 * max(1.0, self._mx ** 2):
            slope = max(0.0, (self._mxy - self._mx * self._my) / var)
            self.per_token = slope
            self.base = max(0.0, self._my - slope * self._mx)
        else:  # one token count so far: keep the prior's shape, match its level
            prior = self.base + self.per_token * self._mx
            scale = self._my / prior if prior > 0 else 1.0
            self.base *= scale
            self.per_token *= scale
