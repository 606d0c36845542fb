"""How far measured steps ran past the policy's estimates, so that the TBT cap's safety margin
can follow the estimator's real error instead of a fixed guess."""

from __future__ import annotations

from inference.scheduler.laser.reserve import SlidingPeak


class EstimateError:
    """How far measured steps ran past their estimates: the sliding maximum of measured /
    estimated seconds over the last ``window`` steps.

    The TBT cap sizes steps to a fraction of the target (``tbt_safety``) to absorb estimate
    errors; a fixed 0.8 wastes a fifth of every capped step when the estimates are good. The
    policy widens the fraction up to a ceiling as far as the worst recent error allows.
    """

    def __init__(self, window: int) -> None:
        self._peak = SlidingPeak(float(window))
        self._steps = 0
        self._expected: float | None = None

    def expect(self, seconds: float) -> None:
        """The estimate of the step just planned (the next ``observe`` measures it)."""
        self._expected = seconds if seconds > 0 else None

    def observe(self, seconds: float) -> None:
        if self._expected is None or seconds <= 0:
            return
        self._steps += 1
        self._peak.observe(float(self._steps), seconds / self._expected)
        self._expected = None

    def safety(self, floor: float, ceiling: float) -> float:
        """``ceiling`` over the worst recent ratio, within ``[floor, ceiling]``; ``floor``
        until a step was measured."""
        if not self._steps:
            return floor
        return max(floor, min(ceiling, ceiling / max(self._peak.value, 1e-9)))
