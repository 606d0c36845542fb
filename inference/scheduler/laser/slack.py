"""Slack: how much time a request can still lose and keep its contract.

Work is priced with a ``Speeds`` snapshot of the cost estimator: a prompt token costs its
marginal share of a step with prompt chunks, an output token costs a whole step (a sequence
decodes one token per step however large the batch).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from inference.request import ContractTargets
from inference.scheduler.cost import CostEstimator
from inference.sequence import Sequence

_PROBE = 1024


@dataclass(frozen=True, slots=True)
class Speeds:
    base_s: float  # fixed cost of a step
    per_token_s: float  # marginal cost of one more token in a step
    step_s: float  # a typical step: the decode cadence
    chunk: int = 1 << 30  # most prompt tokens one sequence advances per step
    full_step_s: float = 0.0  # a step that spends the whole token budget

    @classmethod
    def measure(cls, est: CostEstimator, typical_tokens: int, context_tokens: int,
                chunk: int = 1 << 30, budget: int = 0) -> Speeds:
        base = est.step_time(0, context_tokens)
        per_token = max(0.0, (est.step_time(_PROBE, context_tokens, _PROBE) - base) / _PROBE)
        step = max(est.step_time(max(1, typical_tokens), context_tokens), 1e-9)
        full = max(step, est.step_time(budget, context_tokens, budget))
        return cls(base, per_token, step, chunk, full)


def prefill_left(seq: Sequence) -> int:
    """Tokens still to compute before the sequence only decodes."""
    return max(0, seq.num_tokens - seq.num_computed_tokens - 1)


def tokens_left(seq: Sequence) -> int:
    """Tokens the sequence still computes: its prompt left and its expected output."""
    return prefill_left(seq) + seq.expected_output_left


def work_s(seq: Sequence, sp: Speeds, *, step_s: float | None = None) -> float:
    """Seconds the sequence needs if it ran every step from now on: its prompt chunks, each
    a step of its own but the last (which yields the first token), then one step a token,
    each ``step_s`` (default the cadence, ``sp.step_s``; ``sp.full_step_s`` for steps
    others' prefill fills)."""
    left = prefill_left(seq)
    chunks = -(-(left + 1) // sp.chunk) - 1
    step = sp.step_s if step_s is None else step_s
    return left * sp.per_token_s + chunks * sp.base_s + seq.expected_output_left * step


def cold_slack(seq: Sequence, now: float, sp: Speeds) -> float:
    """Deadline minus now minus the remaining work; infinite without a deadline."""
    if seq.deadline is None:
        return math.inf
    return seq.deadline - now - work_s(seq, sp)


def ttft_slack_frac(seq: Sequence, now: float, per_token_s: float, step_s: float) -> float:
    """A prompt's slack before its first token, as a fraction of its TTFT target: the target
    less the wait so far, its prefill left and one step."""
    t = seq.targets
    left = prefill_left(seq) * per_token_s
    return (t.ttft_p99_s - (now - seq.arrival_time) - left - step_s) / t.ttft_p99_s


def hot_slack_frac(seq: Sequence, now: float, sp: Speeds) -> float:
    """Slack as a fraction of the binding target: TTFT before the first token, TBT after."""
    if seq.first_token_time is None:
        return ttft_slack_frac(seq, now, sp.per_token_s, sp.step_s)
    t = seq.targets
    return (t.tbt_p99_s - sp.step_s) / t.tbt_p99_s


def min_hot_slack_frac(seqs: Iterable[Sequence], now: float, sp: Speeds) -> float:
    """The least ``hot_slack_frac`` over ``seqs``, inf for none; a NaN (an infinite target)
    counts as no slack figure (the fill takes it over every waiting hot prompt each step)."""
    low = math.inf
    for seq in seqs:
        frac = hot_slack_frac(seq, now, sp)
        if frac < low:
            low = frac
    return low


def warm_step_s(t: ContractTargets) -> float:
    """The longest step that keeps a warm stream at its contracted rate: the floor is a mean
    (docs/slo.md: delivered tokens over decoding time, at least ``1 - warm_band`` of the rate),
    so the band, not the TBT caps' percentile safety, absorbs the step estimate's error (with
    ``tbt_safety`` on top, 64 warm streams ran steps of 42 ms for a 53 ms floor and queued
    the streams that did not fit: a third fewer tokens, seconds more TTFT)."""
    return 1.0 / t.warm_rate_tps


def cold_need_tokens(cold: Iterable[Sequence], now: float, sp: Speeds) -> float:
    """Prefill tokens per step cold needs so that every deadline holds if it got them."""
    need = 0.0
    for seq in cold:
        left = prefill_left(seq)
        if not left or seq.deadline is None:
            continue
        steps = (seq.deadline - now) / sp.step_s - seq.expected_output_left
        need += left / max(1.0, steps)
    return need
