"""Step-time estimators: how long the scheduler expects a step to take.

The tier policy reasons about slack (deadline minus expected remaining work), which needs a
model of step time. Two implementations share one protocol: the simulator hands its calibrated
cost model in, and the real engine uses ``EwmaCostEstimator``, which learns lines
``seconds = base + per_token * tokens`` online from measured steps (``observe_step``): one for
decode-only steps, one for what prompt chunks add to a step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class CostEstimator(Protocol):
    def step_time(self, num_tokens: int, context_tokens: int = 0,
                  prompt_tokens: int = 0) -> float:
        """Expected seconds of a step computing ``num_tokens`` tokens over ``context_tokens``
        tokens of cached context (summed over the batch), ``prompt_tokens`` of them in prompt
        chunks (the rest one decode row each)."""

    def observe_step(self, num_tokens: int, seconds: float, prompt_tokens: int = 0) -> None:
        """Learn from a measured step; estimators with a fixed model may ignore it."""


def max_tokens_within(est: CostEstimator, seconds: float, context_tokens: int,
                      upper: int, decode_rows: int | None = None) -> int:
    """Largest token count in ``[0, upper]`` whose estimated step fits ``seconds``: with
    ``decode_rows`` given, the tokens beyond that many are prompt tokens (a step's decodes,
    then prompt chunks), else all of them decode rows.

    Bisection on a monotone estimate: a dozen calls, whatever the estimator. An estimator
    with its own ``max_tokens_within`` (the simulator's cost model: the same bisection
    without a call per probe) answers it.
    """
    own = getattr(est, "max_tokens_within", None)
    if own is not None:
        return own(seconds, context_tokens, upper, decode_rows)

    def time(n: int) -> float:
        prompt = 0 if decode_rows is None else max(0, n - decode_rows)
        return est.step_time(n, context_tokens, prompt)
    if time(upper) <= seconds:
        return upper
    return largest_fitting(0, upper, lambda n: time(n) <= seconds)


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

    def step_time(self, num_tokens: int, context_tokens: int = 0,
                  prompt_tokens: int = 0) -> float:
        return self.base + self.per_token * num_tokens + self.per_context * context_tokens

    def observe_step(self, num_tokens: int, seconds: float, prompt_tokens: int = 0) -> None:
        return None


class EwmaLine:
    """Online least squares with exponential forgetting over (tokens, seconds) pairs.

    Keeps exponentially weighted moments of x = tokens and y = seconds; the fitted line is
    clamped to non-negative coefficients so a few noisy steps never predict negative times.
    Until two distinct token counts are seen it scales its prior line by the observed ratio.

    Two guards for a noisy machine, both off by default: ``clip`` > 0 limits how far one step
    moves the line (its residual is clipped to ``clip`` times the running mean absolute
    residual, after 8 samples: a step slowed by another process is not a slope), and
    ``spread`` > 0 keeps the slope, learning only the level, while the recent token counts
    spread less than ``spread`` times their mean (steps of nearly one width say nothing of
    the slope). Without them, 64 streams' prompt chunks of 9-11 tokens fitted slopes up to
    22 ms a prompt token where 1.1 ms was measured (docs/engine.md).
    """

    def __init__(self, base: float, per_token: float, alpha: float, *, clip: float = 0.0,
                 spread: float = 0.0) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must lie in (0, 1]")
        if clip < 0 or spread < 0:
            raise ValueError("clip and spread must be non-negative")
        self.base, self.per_token, self.alpha = base, per_token, alpha
        self.clip, self.spread = clip, spread
        self._mad = 0.0  # mean absolute residual (``clip``)
        self.samples = 0
        self._mx = self._my = self._mxx = self._mxy = 0.0

    def at(self, num_tokens: int) -> float:
        return self.base + self.per_token * num_tokens

    def observe(self, num_tokens: int, seconds: float) -> None:
        x, y = float(num_tokens), float(seconds)
        if self.clip:
            r = y - self.at(num_tokens)
            if self.samples >= 8:
                bound = self.clip * self._mad
                y -= r - max(-bound, min(bound, r))
                self._mad += self.alpha * (abs(r) - self._mad)
            else:  # a plain mean of the first residuals
                self._mad += (abs(r) - self._mad) / (self.samples + 1)
        a = self.alpha if self.samples else 1.0
        self.samples += 1
        self._mx += a * (x - self._mx)
        self._my += a * (y - self._my)
        self._mxx += a * (x * x - self._mxx)
        self._mxy += a * (x * y - self._mxy)
        var = self._mxx - self._mx ** 2
        if var > max(1e-9, self.spread ** 2) * max(1.0, self._mx ** 2):
            slope = max(0.0, (self._mxy - self._mx * self._my) / var)
            self.per_token = slope
            self.base = max(0.0, self._my - slope * self._mx)
        elif self.samples > 1 and self.spread:  # steps of one width: the level, not the slope
            self.base = max(0.0, self._my - self.per_token * self._mx)
        else:  # one token count so far: keep the prior's shape, match its level
            prior = self.base + self.per_token * self._mx
            scale = self._my / prior if prior > 0 else 1.0
            self.base *= scale
            self.per_token *= scale


class EwmaCostEstimator:
    """Decode-only steps on one ``EwmaLine`` (seconds by tokens), and what a step with prompt
    chunks costs on top of its tokens' time on that line on another (extra seconds by prompt
    tokens). Steps with prompt tokens run other kernels on a CPU (two-part activations,
    prefill attention), so they cost more than their width on the decode line, but how much
    more follows their prompt tokens, not their width: one line through every prompt step's
    tokens priced 45 decode rows plus one prompt token at 79 ms where such steps took 50, and
    a fill under the 80 ms TBT cap admitted no waiting prompt beside 45 decodes (64 streams
    from one key, docs/engine.md).

    The extra is never negative, so a step costs at least its tokens' decode time and the
    estimate grows with every token added to a step (the fill bisects on it). Until the first
    decode-only step, prompt steps teach the decode line (a stand-in: the first decode step
    replaces what they taught, keeping its slope's shape) and the extra stays 0.

    Both lines keep their slope while their widths do not spread (``EwmaLine``'s ``spread``).
    The decode line prices a prompt step's every token, but its own samples come in long
    stretches of one width (2 chats + 14 bulk streams: 16 rows, their time drifting with the
    context): unguarded, that noise pulled its slope to 0 within a few hundred steps, so a
    step of 6 decodes and 54 prompt tokens was priced at 56 ms and took 92, past hot's TBT
    target (docs/engine.md).
    """

    def __init__(self, base: float = 0.02, per_token: float = 2e-4, alpha: float = 0.05,
                 ) -> None:
        self.decode = EwmaLine(base, per_token, alpha, clip=3.0, spread=0.25)
        # extra seconds by prompt tokens: chunks of one size for long stretches (spread)
        self.prompt = EwmaLine(0.0, per_token, alpha, clip=3.0, spread=0.25)
        self._decode_seen = False

    def step_time(self, num_tokens: int, context_tokens: int = 0,
                  prompt_tokens: int = 0) -> float:
        decode = self.decode.at(num_tokens)
        if not prompt_tokens or not self.prompt.samples:
            return decode
        line = self.prompt
        return decode + max(0.0, line.base) + max(0.0, line.per_token) * prompt_tokens

    def observe_step(self, num_tokens: int, seconds: float, prompt_tokens: int = 0) -> None:
        if num_tokens <= 0 or seconds <= 0:
            return
        if not prompt_tokens:
            if not self._decode_seen:  # what prompt steps taught it gives way
                self._decode_seen = True
                self.decode.samples = 0
            self.decode.observe(num_tokens, seconds)
        elif not self._decode_seen:
            self.decode.observe(num_tokens, seconds)
        else:
            self.prompt.observe(prompt_tokens, seconds - self.decode.at(num_tokens))
