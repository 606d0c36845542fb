"""Hot triage: which waiting hot requests cannot all meet their TTFT, and which to let go.

Hot prefills are served earliest TTFT deadline first (EDF), which meets every deadline
whenever any order can. In a burst no order can, and plain EDF then lets the misses cascade:
a long prompt that is late anyway keeps the machine while the requests behind it expire too.
Moore and Hodgson's rule fixes that for one machine: walk the requests in deadline order,
and whenever the running finish time passes the current deadline, give up the request with
the most work left so far. What remains all meets its deadlines, and no other choice keeps
more requests on time (exact for requests that are all waiting; we re-run it every step, so
later arrivals are taken into account as they come). The requests given up are not dropped:
they are served after the on-time ones (their TTFT is missed whatever happens).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from inference.scheduler.laser.slack import Speeds, prefill_left
from inference.sequence import Sequence


@dataclass(frozen=True, slots=True)
class HotJob:
    seq_id: str
    deadline: float  # arrival + TTFT target
    work_s: float  # estimated seconds of prefill left, the machine to itself
    demotable: bool = False  # its contract lets the policy move it to warm
    excess: bool = False  # above its tenant's contract: planned after all in-contract work


def late_jobs(jobs: Iterable[HotJob], now: float) -> set[str]:
    """Moore-Hodgson: the ids to serve after the rest so that the rest meet their deadlines.

    In-contract jobs are planned first and excess jobs after them (the order the policy
    serves them in), so excess is given up before any in-contract job. A demotable job is
    given up before the longest one: demoted, it leaves the hot share instead of missing in
    it (so the count kept on time is optimal only among the others). Ties break on the id,
    so the result does not depend on the input order.
    """
    jobs = list(jobs)
    late, finish = _moore_hodgson([j for j in jobs if not j.excess], now)
    excess = [j for j in jobs if j.excess]
    if excess:
        late |= _moore_hodgson(excess, finish)[0]
    return late


def _moore_hodgson(jobs: list[HotJob], now: float) -> tuple[set[str], float]:
    """The late ids and the finish time of the jobs kept, starting at ``now``."""
    longest: list[tuple[float, str]] = []  # (-work, id) of the jobs kept so far
    demotable: list[tuple[float, str]] = []  # the same, demotable ones only
    finish, late = now, set()
    for job in sorted(jobs, key=lambda j: (j.deadline, j.seq_id)):
        heapq.heappush(longest, (-job.work_s, job.seq_id))
        if job.demotable:
            heapq.heappush(demotable, (-job.work_s, job.seq_id))
        finish += job.work_s
        # (a job due before ``now`` empties it; the tolerance keeps a job that ends exactly
        # at its deadline from being given up for float rounding in the running sum)
        while finish > job.deadline + 1e-9 and longest:
            heap = demotable if demotable else longest
            work, seq_id = heapq.heappop(heap)  # the longest (smallest id on ties)
            if seq_id in late:
                continue  # already given up through the other heap
            finish += work
            late.add(seq_id)
        while demotable and demotable[0][1] in late:
            heapq.heappop(demotable)
    return late, finish


def prefill_work_s(sp: Speeds, step_tokens: int,
                   attn: Callable[[int, int], float] | None) -> Callable[[Sequence], float]:
    """Seconds a hot prefill needs when it gets ``step_tokens`` tokens a step: its tokens at
    the marginal rate, its share of the steps' fixed cost (the fraction of a step's tokens it
    fills: short prompts share one step, and a whole fixed cost each made 16 simultaneous
    40-token chats on a CPU look 2 s deep), and the chunks' attention when the estimator
    prices it (``prefill_attn_s``)."""
    step_tokens = max(1, step_tokens)

    def work(seq: Sequence) -> float:
        left = prefill_left(seq) + 1  # the last prompt token runs in the sampling step
        start = seq.num_tokens - left
        steps = -(-left // step_tokens)
        t = left * sp.per_token_s + left / step_tokens * sp.base_s
        if attn is not None:
            for k in range(steps):
                n = min(step_tokens, left - k * step_tokens)
                t += attn(start + k * step_tokens, n)
        return t

    return work
