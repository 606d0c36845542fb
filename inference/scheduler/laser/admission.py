"""Admission: refuse cold work that cannot meet its deadline, and refuse hot fast when even it
cannot start within its TTFT target. Both raise; neither changes scheduler state."""

from __future__ import annotations

import bisect
from collections.abc import Sequence as Seqs

from inference.errors import AdmissionRefused, EngineOverloaded
from inference.request import Tier
from inference.scheduler.laser.slack import Speeds, prefill_left, tokens_left, work_s
from inference.sequence import Sequence


def cold_job_cost(seq: Sequence, sp: Speeds, concurrency: int) -> float:
    """Seconds of a whole step's capacity the job uses: its tokens, plus its share of the
    fixed step cost when ``concurrency`` sequences decode together."""
    out = seq.expected_output_left
    return (prefill_left(seq) + out) * sp.per_token_s + out * sp.base_s / concurrency


def check_cold(new: Seqs[Sequence], admitted: Seqs[Sequence], now: float, sp: Speeds, *,
               share: float, concurrency: int, safety: float, live_tokens: int = 0) -> None:
    """Raise ``AdmissionRefused`` unless the new cold sequences and every admitted cold
    sequence with a deadline can still finish in time.

    Model: cold is served earliest deadline first with ``share`` of the machine; a job
    finishes once the work of every job due before it is done, and no later than the
    smaller of two bounds on running alone from now on (``_bound_s``): each of its steps a
    full one (the whole token budget), or its own work plus every other token queued (the
    prompt and expected output left of every live sequence, ``live_tokens``, and of the new
    ones), each at most one token's price and one step's fixed cost (it may share a step or
    take one without it). The newcomers' tokens raise every admitted job's second bound so,
    and they are refused if that tips one over. With the first bound alone, a 256-token
    request was refused the platform's 300 s minimum deadline on an idle 2-core engine
    (full steps of 4.2 s; it needed about 1.5 s); the second one alone refuses cold work
    behind a long queue of other tiers that the first admits.
    """
    share = max(share, 0.05)
    queued = live_tokens + sum(map(tokens_left, new))
    deadlines = sorted((s.deadline, cold_job_cost(s, sp, concurrency))
                       for s in admitted if s.deadline is not None)
    keys = [d for d, _ in deadlines]
    cum, total = [], 0.0
    for _, c in deadlines:
        total += c
        cum.append(total)
    added, first = 0.0, len(deadlines)
    for seq in sorted(new, key=lambda s: s.deadline or 0.0):
        if seq.deadline is None:
            continue
        cost = cold_job_cost(seq, sp, concurrency)
        pos = bisect.bisect_right(keys, seq.deadline)
        first = min(first, pos)
        ahead = (cum[pos - 1] if pos else 0.0) + added + cost
        finish = now + max(safety * ahead / share, _bound_s(seq, sp, queued))
        if finish > seq.deadline:
            raise AdmissionRefused(
                f"cold request cannot meet its deadline at current load: estimated finish in "
                f"{finish - now:.0f} s, deadline in {seq.deadline - now:.0f} s",
                tier=seq.tier, retry_after_s=None)
        added += cost
    if added:
        _check_later(deadlines[first:], cum[first:], added, now, share, safety)
    for seq in admitted:  # (``admitted`` does not hold ``new``)
        if seq.deadline is not None and (
                now + _bound_s(seq, sp, queued) > seq.deadline
                >= now + _bound_s(seq, sp, live_tokens)):
            raise AdmissionRefused(
                "cold request would push admitted cold work past its deadline",
                tier=Tier.COLD, retry_after_s=None)


def _bound_s(seq: Sequence, sp: Speeds, queued_tokens: int) -> float:
    """Seconds until the job is done at the latest (``check_cold``): the smaller bound."""
    token = sp.per_token_s + sp.base_s  # a token of anyone's, in a step of its own at worst
    own = work_s(seq, sp, step_s=token)
    others = max(0, queued_tokens - tokens_left(seq)) * token
    return min(work_s(seq, sp, step_s=sp.full_step_s), own + others)


def _check_later(deadlines, cum, added, now, share, safety) -> None:
    # The new work delays every admitted job due later; refuse if it tips one of them over
    # (jobs already estimated late are not the newcomer's fault).
    for (deadline, _), ahead in zip(deadlines, cum):
        if now + safety * (ahead + added) / share > deadline >= now + safety * ahead / share:
            raise AdmissionRefused(
                "cold request would push admitted cold work past its deadline",
                tier=Tier.COLD, retry_after_s=None)


def check_hot(seq: Sequence, queued_prefill: int, now: float, sp: Speeds, factor: float) -> None:
    """Raise ``EngineOverloaded`` when a hot request queued behind ``queued_prefill`` prompt
    tokens of hot work would wait past ``factor`` times its TTFT target."""
    if queued_prefill <= 0:
        return
    ttft = (queued_prefill + prefill_left(seq)) * sp.per_token_s + sp.step_s
    limit = factor * seq.targets.ttft_p99_s
    if ttft > limit:
        raise EngineOverloaded(
            f"hot queue is full: estimated time to first token {ttft:.2f} s exceeds "
            f"{limit:.2f} s", tier=seq.tier, retry_after_s=round(ttft - limit, 3))
