"""SLO accounting of a simulated run, as the platform does it (``docs/slo.md``).

- hot: a request is within contract when its TTFT and its own P99 TBT meet the targets and
  it was not interrupted (a stall over 10x the TBT target, or a started stream left
  unfinished). A demoted request whose contract is demotable leaves the latency terms and is
  counted as a demotion instead; one whose contract is not demotable is a miss (its TTFT
  counts as infinite, docs/slo.md); a refused one is a miss. ``outcome_wait`` is how long a
  request waited for an outcome: its first token, its demotion or its refusal.
- warm: per window, delivered tokens/s = sum(tokens - 1) / sum(finish - first token) over
  requests finishing in it with at least two tokens, kept when >= (1 - band) x rate, and mean
  TTFT kept when <= target. A window is attained when both hold.
- cold: a job (all lines sharing ``job``) is on time when every line finished by its
  deadline; line-level attainment too.
Requests longer than the model's context never reach the scheduler: counted apart.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from inference.request import Tier
from inference.sequence import Sequence

INTERRUPT_FACTOR = 10.0


def nearest_rank(sorted_values: list[float], q: float) -> float:
    """Smallest value with at least ``q`` % of the values at or below it."""
    if not sorted_values:
        return math.nan
    k = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[k - 1]


@dataclass(slots=True)
class Live:
    """A request in flight: what the accounting needs from its token times."""

    tier: Tier
    arrival: float
    tbt_target: float
    job: str | None
    tenant: str = ""
    ttft_target: float = math.inf
    first: float | None = None
    last: float | None = None
    tokens: int = 0
    gaps: list[float] = field(default_factory=list)
    demoted_at: float | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """A finished (or, at the end, abandoned) request."""

    tier: Tier
    arrival: float
    ttft: float  # inf when no token came
    tbt_p99: float
    tokens: int
    finish: float  # inf when unfinished
    decode_s: float  # finish - first token
    interrupted: bool
    within: bool  # the tier's per-request targets (hot: TTFT, TBT, no interruption)
    demoted: bool
    refused: bool
    job: str | None
    deadline: float | None
    tenant: str = ""
    outcome_wait: float = math.inf  # arrival to first token, demotion or refusal
    ttft_target: float = math.inf
    served_as_warm: bool = False  # demoted, whatever its contract says of demotion


class Accounting:
    def __init__(self) -> None:
        self.live: dict[str, Live] = {}
        self.records: list[Record] = []
        self.refusals: dict[str, int] = defaultdict(int)  # reason head -> count
        self.too_long: dict[Tier, int] = defaultdict(int)
        self.demotions = self.promotions = 0
        self.frag_slot_s = 0.0  # integral over time of unused allocated + reserved idle slots
        self.frag_kept_slot_s = 0.0  # the part of it in steps where work was kept out
        self.elapsed_s = 0.0

    def admitted(self, seq: Sequence, job: str | None) -> None:
        self.live[seq.seq_id] = Live(seq.asked_tier or seq.tier, seq.arrival_time,
                                     seq.targets.tbt_p99_s, job, seq.tenant_id,
                                     seq.targets.ttft_p99_s)

    def token(self, seq_id: str, now: float) -> None:
        lv = self.live[seq_id]
        if lv.last is None:
            lv.first = now
        else:
            lv.gaps.append(now - lv.last)
        lv.last = now
        lv.tokens += 1

    def demoted(self, seq_id: str, now: float) -> None:
        lv = self.live.get(seq_id)
        if lv is not None and lv.demoted_at is None:
            lv.demoted_at = now
            self.demotions += 1

    def finished(self, seq: Sequence, now: float | None) -> None:
        lv = self.live.pop(seq.seq_id)
        gaps = sorted(lv.gaps)
        tbt = nearest_rank(gaps, 99) if gaps else 0.0
        first = lv.first
        started = first is not None
        stall = bool(gaps) and gaps[-1] > INTERRUPT_FACTOR * lv.tbt_target
        interrupted = lv.tier is Tier.HOT and started and (stall or now is None)
        ttft = first - lv.arrival if first is not None else math.inf
        finish = math.inf if now is None else now
        t = seq.targets
        demoted = lv.demoted_at is not None
        within = (now is not None and not interrupted and ttft <= t.ttft_p99_s
                  and tbt <= t.tbt_p99_s and (t.demotable or not demoted))
        outcome = min(first if first is not None else math.inf,
                      lv.demoted_at if lv.demoted_at is not None else math.inf)
        self.records.append(Record(
            lv.tier, lv.arrival, ttft, tbt, lv.tokens, finish,
            (finish - first) if first is not None else 0.0, interrupted, within,
            demoted and t.demotable, False, lv.job, seq.deadline, lv.tenant,
            outcome - lv.arrival, lv.ttft_target, demoted))

    def refused(self, seq: Sequence, job: str | None, reason: str) -> None:
        """The scheduler would not take it: a miss for its tier, and its reason is counted."""
        self.refusals[f"{seq.asked_tier}: {reason.split(':')[0]}"] += 1
        self.records.append(Record(seq.asked_tier or seq.tier, seq.arrival_time, math.inf, 0.0, 0,
                                   math.inf, 0.0, False, False, False, True, job,
                                   seq.deadline, seq.tenant_id, 0.0, seq.targets.ttft_p99_s))

    def refused_live(self, seq_id: str, now: float, reason: str) -> None:
        """An admitted request the scheduler dropped before its first token: refused (its
        outcome wait is still the demotion's, which came first)."""
        lv = self.live.pop(seq_id)
        self.refusals[f"{lv.tier}: {reason.split(':')[0]}"] += 1
        wait = (lv.demoted_at if lv.demoted_at is not None else now) - lv.arrival
        self.records.append(Record(lv.tier, lv.arrival, math.inf, 0.0, 0, math.inf, 0.0, False,
                                   False, False, True, lv.job, None, lv.tenant, wait,
                                   lv.ttft_target, lv.demoted_at is not None))

    def kv_sample(self, dt: float, unused_slots: int, kept_out: bool = False) -> None:
        self.frag_slot_s += dt * unused_slots
        if kept_out:  # the same slots, in steps where they kept waiting work out
            self.frag_kept_slot_s += dt * unused_slots
        self.elapsed_s += dt
