"""The ``laser`` policy's rules, one class a part, each built from what it needs.

``LaserScheduler`` runs the parts named in its ``LaserParts`` (``assembly.py``); the default
is the policy the engine serves. Another set is another variant of the policy (the
simulator's ablations build theirs in ``sim.ablations`` by subclassing parts): nothing in
the policy branches on which variant it runs. The parts here are the small rules; the larger
ones have their modules: hot triage (``hot.py``), the step fill (``fill.py``, with
``FillRules`` below for its caps), preemption (``preempt.py``), the layer pause
(``pause.py``) and the hot block reserve (``reserve.py``).
"""

from __future__ import annotations

import math

from inference.request import Tier
from inference.scheduler.cost import CostEstimator
from inference.scheduler.laser.admission import check_cold
from inference.scheduler.laser.config import LaserPolicyConfig
from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.scheduler.laser.pressure import Action, PressureTracker
from inference.scheduler.laser.share import decodes_within
from inference.scheduler.laser.slack import Speeds, warm_step_s
from inference.sequence import Sequence

Keyed = tuple[SortKey, Sequence]
_C_WARM, _HOT = SchedClass.WARM, Tier.HOT  # (an enum member read off its class is slow)


class Contract:
    """Every tenant's in-contract work before any tenant's excess (``Sequence.in_contract``
    False), within each class; pressure demotes excess first."""

    def excess(self, seq: Sequence) -> int:
        """1 for traffic above its tenant's contract, else 0 (the sort key's ``excess``)."""
        return int(not seq.in_contract)


class ColdAdmission:
    """Cold work is admitted only while it and every admitted cold job can still finish by
    their deadlines (``admission.check_cold``, which raises ``AdmissionRefused``)."""

    def __init__(self, policy: LaserPolicyConfig) -> None:
        self.safety = policy.cold_need_safety

    def check(self, new: list[Sequence], admitted: list[Sequence], now: float, sp: Speeds, *,
              share: float, concurrency: int, live_tokens: int) -> None:
        check_cold(new, admitted, now, sp, share=share, concurrency=concurrency,
                   safety=self.safety, live_tokens=live_tokens)


class Demotion:
    """Hot requests served as warm with notice: under sustained hot pressure (a share of
    the demotable ones, ``PressureTracker`` says when, and when to restore them), and by
    triage, a late one whose contract allows it."""

    def __init__(self, policy: LaserPolicyConfig) -> None:
        self.tracker = PressureTracker(policy.pressure_window_s, policy.restore_window_s)

    def action(self, now: float, pressured: bool, have_demoted: bool) -> Action:
        """Demote, restore or nothing this step."""
        return self.tracker.update(now, pressured, have_demoted)

    def demotable(self, seq: Sequence) -> bool:
        """Whether ``seq``'s contract lets it be served as warm."""
        return seq.targets.demotable


class Aging:
    """A waiting warm or cold request past its tier's bound ranks as hot from then on, after
    hot's on-time work (``SortKey.late``)."""

    def __init__(self, policy: LaserPolicyConfig) -> None:
        self.bounds = {Tier.WARM: policy.aging_warm_s, Tier.COLD: policy.aging_cold_s}

    def bound(self, tier: Tier) -> float | None:
        """Seconds a waiting request of ``tier`` may wait before it ages (None: never)."""
        return self.bounds.get(tier)


class ColdPacing:
    """Cold by least deadline slack (promoted cold too), and promoted to warm once its slack
    runs below ``promote_slack_s``."""

    def __init__(self, policy: LaserPolicyConfig) -> None:
        self.promote_slack_s = policy.promote_slack_s

    def when(self, seq: Sequence, slack: dict[str, float]) -> float:
        """The sort key's ``when`` in classes ``PROMOTED`` and ``COLD``."""
        return slack.get(seq.seq_id, math.inf)

    def promotes(self, slack_s: float) -> bool:
        return slack_s < self.promote_slack_s


class WarmOrder:
    """Class ``WARM`` (warm and hot served as warm) shortest prompt first. Warm's contract
    judges the mean TTFT of each window (the tail may be sacrificed, docs/slo.md), and on
    one machine shortest-first minimises the mean wait; a warm burst of long code prompts
    served in arrival order kept every short one behind them (MT 0.35: 10 of 32 windows
    past the 2 s mean). A long prompt's wait is still bounded: ``Aging`` ranks it with hot
    past warm's aging bound."""

    def when(self, seq: Sequence) -> float:
        """The sort key's ``when`` in class ``WARM``: the prompt's length (fixed for the
        sequence's life, so a cached key stays right)."""
        return float(len(seq.prompt_token_ids))


class FillRules:
    """The caps one step's fill keeps (``StepFill._limits``): hot prompts chunked under the
    hot TBT cap and the others deferred while hot TTFT slack is short; the other decodes
    taking turns under an in-contract hot stream's TBT cap (``share.py``); warm's rate
    floor capping every step but hot's own chunks; warm borrowing the step budget hot and
    cold leave."""

    def __init__(self, policy: LaserPolicyConfig) -> None:
        self.policy = policy

    def defers(self, ttft_min: float) -> bool:
        """Whether the least in-contract hot TTFT slack (a fraction) defers the others."""
        return ttft_min < self.policy.ttft_slack_frac

    def hot_caps(self, safety: float, hot_tbt: list[tuple[float, float]]) -> list[float]:
        """Step seconds each decoding hot stream allows: ``safety`` of its TBT target less
        what it has waited since its last token."""
        return [safety * g - w for g, w in hot_tbt]

    def share(self, decodes: list[Keyed], kept_tbt: list[float],
              cost: CostEstimator) -> list[Keyed]:
        """The decodes that run when in-contract hot streams keep ``kept_tbt`` (non-empty)."""
        return decodes_within(decodes, min(kept_tbt), cost)

    def warm_floor(self, decodes: list[Keyed], safety: float) -> list[float]:
        """Step seconds class ``WARM``'s streams allow: a warm stream's rate floor; a hot
        request served as warm keeps its own contract's pace instead, hot's TBT: its tokens
        are judged by hot's terms, never by warm's floor (docs/slo.md), and the floor's
        shorter steps cost every stream (64 streams from a hot key, half demoted: 37 rows at
        50 ms, requests queued 15 s). Not less what it has waited, as hot's caps are: it
        takes turns under them, and a turn it sat out would leave no step any prompt chunk
        at all."""
        return [safety * q.targets.tbt_p99_s if q.asked_tier is _HOT
                else warm_step_s(q.targets) for k, q in decodes if k.cls is _C_WARM]

    def hot_cap_s(self, hot_caps: list[float], warm: list[float]) -> float | None:
        """The cap on hot's own chunks: hot's caps alone (warm's floor is a mean rate; hot
        need not keep it)."""
        return min(hot_caps, default=None)

    def warm_cap(self, budget: int, hold_tokens: int, cold_need: float) -> int:
        """Tokens warm may take in a step: its share, or what hot's reserve and cold's
        deadline pace leave, whichever is more."""
        spare = budget - hold_tokens - round(cold_need)
        return max(int(self.policy.warm_share * budget), spare)
