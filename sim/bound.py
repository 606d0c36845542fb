"""A floor under the hot misses of *any* policy on a trace: what the hardware cannot do.

A group of hot requests that all arrive at or after ``lo`` and are all due (arrival + TTFT
target) by ``hi`` cannot all be on time when their prefill alone needs more than
``hi - lo`` seconds of the machine. Prefill time is priced from below: every prompt token
at the cheapest per-token rate any step of the cost model reaches (its fixed cost spread
over a full budget), plus the prompt's attention, which no chunking changes (the chunks'
``c (s + (c + 1) / 2)`` terms always sum to ``N (N + 1) / 2``). Disjoint such groups each
cost at least one miss. Demotable requests are left out (a policy may demote them, and a
demoted one leaves the share), so ``1 - misses / hot`` bounds the attainment from above.

Only for traces without shared prefixes: cached blocks would make prefill cheaper.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.request import Tier
from sim.config import Contracts
from sim.cost_model import CostModel
from sim.traces import TraceRequest
from sim.workload import Workload

GROUP = 16  # longest run of consecutive arrivals examined as one group


@dataclass(frozen=True, slots=True)
class HotBound:
    hot: int  # hot requests that fit the context
    misses: int  # at least this many of them miss, whatever the policy

    @property
    def max_attainment(self) -> float:
        return 1.0 - self.misses / self.hot if self.hot else 1.0


def hot_miss_bound(trace: list[TraceRequest], cost: CostModel, contracts: Contracts, *,
                   budget: int, chunk: int, max_len: int) -> HotBound | None:
    """The bound for ``trace`` (None when prefixes are shared)."""
    if any(r.prefix_blocks for r in trace):
        return None
    work = Workload(contracts, cost, chunk, 16)
    rate = min(cost.step_time(n) / n for n in range(1, budget + 1))
    hot = [r for r in trace
           if r.tier is Tier.HOT and r.prompt_tokens + r.output_tokens <= max_len]
    jobs = sorted((r.arrival_s,
                   r.arrival_s + work.targets(r).ttft_p99_s,
                   rate * r.prompt_tokens + cost.prefill_attn_s(0, r.prompt_tokens))
                  for r in hot if not r.demotable)
    return HotBound(len(hot), _disjoint_infeasible(jobs))


def _disjoint_infeasible(jobs: list[tuple[float, float, float]]) -> int:
    """Greedy count of disjoint runs of consecutive (arrival, deadline, work) jobs whose work
    exceeds the span from their first arrival to their last deadline."""
    count, i = 0, 0
    while i < len(jobs):
        lo, hi, total = jobs[i][0], jobs[i][1], jobs[i][2]
        end = None
        for j in range(i, min(len(jobs), i + GROUP)):
            if j > i:
                hi, total = max(hi, jobs[j][1]), total + jobs[j][2]
            if total > hi - lo:
                end = j
                break
        if end is None:
            i += 1
        else:
            count += 1
            i = end + 1
    return count
