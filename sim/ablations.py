"""The ``laser`` policy's ablations: each switch of ``LaserAblations`` turned off swaps one
of its parts (``inference.scheduler.laser.LaserParts``) for a variant defined here, and
``laser_options`` gives the scheduler those parts. The policy the engine serves has every
switch on and none of these variants; nothing in it branches on a switch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from inference.scheduler.cost import CostEstimator
from inference.scheduler.laser import LaserParts, LaserPolicyConfig
from inference.scheduler.laser.admission import check_hot
from inference.scheduler.laser.hot import HotTriage, refuse_past
from inference.scheduler.laser.keys import SchedClass
from inference.scheduler.laser.parts import (
    Aging,
    ColdAdmission,
    ColdPacing,
    Contract,
    Demotion,
    FillRules,
    Keyed,
    WarmOrder,
)
from inference.scheduler.laser.reserve import HotReserve
from inference.scheduler.laser.slack import Speeds, prefill_left
from inference.scheduler.laser.triage import HotJob
from inference.sequence import Sequence


@dataclass(frozen=True, slots=True)
class LaserAblations:
    """Switches that turn one settled part of the policy off (docs/benchmarks.md records what
    each part buys). The parts are described in ``LaserPolicyConfig`` and ``LaserParts``;
    ``hot_over_warm_floor`` off holds hot prefill to the warm floor's step cap too;
    ``layer_pause_enabled`` off never pauses even where the executor could;
    ``contract_first_enabled`` off serves excess traffic (``Sequence.in_contract`` False)
    like in-contract traffic; ``overload_demotion_enabled`` off leaves late hot requests
    whose contract is not demotable in hot (served after the on-time ones) and refuses by
    the hot queue's wait instead of warm's backlog (and refuses no demoted request at warm's
    bound); ``overload_enabled`` off never refuses a hot request at admission;
    ``tbt_share_enabled`` off runs every decode each step even when the other rows push the
    step past an in-contract hot stream's TBT target (``share.py``);
    ``warm_order_enabled`` off serves class ``WARM`` in arrival order (``WarmOrder``)."""

    reserve_enabled: bool = True
    chunking_enabled: bool = True
    warm_floor_enabled: bool = True
    demotion_enabled: bool = True
    borrowing_enabled: bool = True
    cold_slack_enabled: bool = True
    admission_enabled: bool = True
    aging_enabled: bool = True
    hot_over_warm_floor: bool = True
    triage_enabled: bool = True
    layer_pause_enabled: bool = True
    contract_first_enabled: bool = True
    overload_demotion_enabled: bool = True
    overload_enabled: bool = True
    tbt_share_enabled: bool = True
    warm_order_enabled: bool = True

    @classmethod
    def none(cls) -> LaserAblations:
        """Every part off: the policy degenerates to strict priority by tier (with the
        policy config's ``warm_share`` at 1)."""
        return cls(**dict.fromkeys(cls.__dataclass_fields__, False))


ABLATIONS = tuple(f.name for f in fields(LaserAblations))
# What ``LaserAblations.none()`` assumes of the thresholds: warm is not held to a share.
NONE_POLICY = LaserPolicyConfig(warm_share=1.0)


# ---- the variants: each overrides what its switch turned off, and nothing else -----------
class NoReserve(HotReserve):
    """No hot block or token reserve: nothing held back, nothing lent."""

    def tokens(self, budget: int) -> int:
        return 0

    def blocks(self, num_blocks: int) -> int:
        return 0

    def observe(self, now: float, hot_tokens: int, hot_blocks: int) -> None:
        return None

    @property
    def lent(self) -> frozenset[str]:
        return frozenset()

    @lent.setter
    def lent(self, value: frozenset[str]) -> None:
        return None


class NoChunking(FillRules):
    """Hot prompts not chunked under hot's TBT cap, the others never deferred for hot."""

    def defers(self, ttft_min: float) -> bool:
        return False

    def hot_caps(self, safety: float, hot_tbt: list[tuple[float, float]]) -> list[float]:
        return []


class NoWarmFloor(FillRules):
    def warm_floor(self, decodes: list[Keyed], safety: float) -> list[float]:
        return []


class HotUnderWarmFloor(FillRules):
    def hot_cap_s(self, hot_caps: list[float], warm: list[float]) -> float | None:
        return min(hot_caps + warm, default=None)


class NoBorrowing(FillRules):
    def warm_cap(self, budget: int, hold_tokens: int, cold_need: float) -> int:
        return int(self.policy.warm_share * budget)


class NoTbtShare(FillRules):
    def share(self, decodes: list[Keyed], kept_tbt: list[float],
              cost: CostEstimator) -> list[Keyed]:
        return decodes


class NoDemotion(Demotion):
    def action(self, now: float, pressured: bool, have_demoted: bool) -> None:
        return None

    def demotable(self, seq: Sequence) -> bool:
        return False


class ArrivalOrder(ColdPacing):
    """Cold in arrival order, never promoted."""

    def when(self, seq: Sequence, slack: dict[str, float]) -> float:
        return seq.arrival_time

    def promotes(self, slack_s: float) -> bool:
        return False


class WarmByArrival(WarmOrder):
    def when(self, seq: Sequence) -> float:
        return seq.arrival_time


class NoColdAdmission(ColdAdmission):
    def check(self, new: list[Sequence], admitted: list[Sequence], now: float, sp: Speeds, *,
              share: float, concurrency: int, live_tokens: int) -> None:
        return None


class NoAging(Aging):
    def bound(self, tier: object) -> float | None:
        return None


class NoContractFirst(Contract):
    def excess(self, seq: Sequence) -> int:
        return 0


class NoHotAdmission(HotTriage):
    """No hot request is refused at admission."""

    def check(self, head: Sequence, now: float) -> None:
        return None


class NoTriage(HotTriage):
    """No triage: late hot requests stay in EDF order; admission refuses by the hot queue."""

    def triage(self, now: float, changes: list) -> None:
        return None

    def check(self, head: Sequence, now: float) -> None:
        rank = self.hooks.rank
        queued = sum(prefill_left(s) for s in self.hooks.seqs.values()
                     if s.first_token_time is None and rank(s) is SchedClass.HOT)
        check_hot(head, queued, now, self.hooks.speeds(), self.policy.overload_ttft_factor)


class NoOverloadDemotion(HotTriage):
    """A late hot request that is not demotable stays hot; admission refuses by the hot
    queue's wait; no demoted request is refused at warm's bound."""

    def watch(self, seqs: object) -> None:
        return None

    def refuse_overdue(self, now: float) -> tuple[tuple[str, str], ...]:
        return ()

    def _past_deadline(self, pending: list[Sequence], now: float) -> set[str]:
        return set()

    def _overload_reason(self) -> str | None:
        return None

    def _check_late(self, head: Sequence, jobs: list[HotJob], late: set[str],
                    now: float) -> None:
        mine = (head.arrival_time + head.targets.ttft_p99_s, head.seq_id)
        ahead = sum(j.work_s for j in jobs if j.seq_id != head.seq_id
                    and (j.seq_id not in late or (j.deadline, j.seq_id) <= mine))
        refuse_past(head, now, ahead, self.policy.overload_ttft_factor
                    * head.targets.ttft_p99_s, "hot queue", self.state.contention)


def _variant(base: type, swaps: list[tuple[bool, type]]) -> Any:
    """``base``, or a class with the variants whose switch is off in front of it."""
    chosen = [variant for off, variant in swaps if off]
    if not chosen:
        return base
    return type("".join(v.__name__ for v in chosen), (*chosen, base), {})


def laser_parts(ab: LaserAblations) -> LaserParts:
    """The parts of ``laser`` with ``ab``'s switched-off parts swapped for variants."""
    d = LaserParts()
    return LaserParts(
        admission=_variant(d.admission, [(not ab.admission_enabled, NoColdAdmission)]),
        contract=_variant(d.contract, [(not ab.contract_first_enabled, NoContractFirst)]),
        demotion=_variant(d.demotion, [(not ab.demotion_enabled, NoDemotion)]),
        aging=_variant(d.aging, [(not ab.aging_enabled, NoAging)]),
        cold=_variant(d.cold, [(not ab.cold_slack_enabled, ArrivalOrder)]),
        warm=_variant(d.warm, [(not ab.warm_order_enabled, WarmByArrival)]),
        fill=_variant(d.fill, [(not ab.chunking_enabled, NoChunking),
                               (not ab.warm_floor_enabled, NoWarmFloor),
                               (not ab.hot_over_warm_floor, HotUnderWarmFloor),
                               (not ab.borrowing_enabled, NoBorrowing),
                               (not ab.tbt_share_enabled, NoTbtShare)]),
        reserve=_variant(d.reserve, [(not ab.reserve_enabled, NoReserve)]),
        triage=_variant(d.triage, [(not ab.overload_enabled, NoHotAdmission),
                                   (not ab.triage_enabled, NoTriage),
                                   (not ab.overload_demotion_enabled, NoOverloadDemotion)]),
    )


def laser_options(ablations: LaserAblations | None, pause_layers: int) -> dict[str, Any]:
    """``make_scheduler`` options for ``laser`` with ``ablations`` (None: every part on):
    its parts, and the layers a forward may pause between (none with the pause off)."""
    ab = ablations or LaserAblations()
    return {"parts": laser_parts(ab),
            "pause_layers": pause_layers if ab.layer_pause_enabled else 0}
