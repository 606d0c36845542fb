"""Hot triage and overload, the ``laser`` policy's part (``triage.py`` holds the rule itself).

Every step, Moore-Hodgson over the waiting hot prompts' TTFT deadlines marks the ones that
cannot all be on time ("late"); in-contract work of every tenant is planned before any
tenant's excess, so excess is given up first. Overload demotes before it refuses: a late hot
request, or one whose TTFT deadline has passed, is served as warm with the tier-change notice
(whatever its contract says of demotion: on a contract not marked demotable the demotion
counts against hot, docs/slo.md). Admission refuses a hot request only when it would be late
*and* warm's backlog in front of it is past warm's own bound (``overload_ttft_factor`` times
the warm mean-TTFT target). So no hot request waits past its TTFT target plus one step
without being served, demoted or refused (docs/simulator.md, "Overload and bounded waits").
A demoted request then waits at most warm's bound: one still without its first token past
``overload_ttft_factor`` times its warm mean-TTFT target is refused (``StepPlan.refused``; the
engine ends it with ``abort``, the gateway answers 503 with ``Retry-After``). Warm serves
in-contract work before excess, so excess reaches the bound, and is refused, first.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seqs
from dataclasses import dataclass

from inference.errors import EngineOverloaded
from inference.request import Tier
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.cost import CostEstimator
from inference.scheduler.laser.config import LaserPolicyConfig
from inference.scheduler.laser.fill import MIN_HOT_CHUNK
from inference.scheduler.laser.keys import SchedClass
from inference.scheduler.laser.parts import Contract, Demotion
from inference.scheduler.laser.queue import WaitingIndex
from inference.scheduler.laser.slack import Speeds
from inference.scheduler.laser.state import LaserState
from inference.scheduler.laser.triage import HotJob, late_jobs, prefill_work_s
from inference.sequence import Sequence, SequenceStatus

HOT, WARM = Tier.HOT, Tier.WARM
_WARM = (SchedClass.PROMOTED, SchedClass.WARM)  # served in warm's order
Changes = list


Lists = tuple[Seqs[Sequence], Seqs[Sequence], Seqs[Sequence]]


@dataclass(frozen=True, slots=True)
class TriageHooks:
    """What triage reads of the policy and the actions it may take, handed over once:
    ``lists`` returns the queues as they are now (running, waiting, and ``held``: a paused
    forward's sequences), ``speeds`` the step's estimates; ``queue`` is the waiting index,
    ``seqs`` every live sequence by id; ``rank`` a sequence's class, ``moved`` drops a
    sequence's cached key, ``retier`` moves a request's sequences to another tier, ``finish``
    ends one."""

    lists: Callable[[], Lists]
    speeds: Callable[[], Speeds]
    queue: WaitingIndex
    seqs: dict[str, Sequence]
    rank: Callable[[Sequence], SchedClass]
    moved: Callable[[str], None]
    retier: Callable[[str, Tier, Tier, float, Changes, str], None]
    finish: Callable[[Sequence, SequenceStatus], None]


class HotTriage:
    """The policy's hot triage and overload (see the module docstring). Its memory is the
    policy's ``LaserState``; ``demotion`` says which late requests it may serve as warm,
    ``contract`` which traffic is excess; ``hooks`` what it reads of the policy and does."""

    def __init__(self, policy: LaserPolicyConfig, config: SchedulerConfig, state: LaserState,
                 cost: CostEstimator, demotion: Demotion, contract: Contract,
                 hooks: TriageHooks) -> None:
        self.policy, self.config, self.state, self.cost = policy, config, state, cost
        self.demotion, self.contract, self.hooks = demotion, contract, hooks

    def _hot_pending(self) -> list[Sequence]:
        """Hot sequences still owed their first token (aged ones keep plain EDF)."""
        running, waiting, _ = self.hooks.lists()
        return [s for q in (running, waiting) for s in q
                if s.tier is HOT and s.first_token_time is None
                and s.seq_id not in self.state.aged]

    def _prefill_work(self) -> Callable[[Sequence], float]:
        # the fill gives hot prefill at least MIN_HOT_CHUNK a step even when the TBT cap
        # leaves less (on a slow CPU it can leave a token or none: priced at one token a step,
        # 16 simultaneous chats looked three times deeper than they were and were refused)
        step = min(max(self.state.hot_step_tokens, MIN_HOT_CHUNK),
                   self.config.long_prefill_chunk)
        return prefill_work_s(self.hooks.speeds(), step, getattr(self.cost, "prefill_attn_s", None))

    def _hot_jobs(self, seqs: list[Sequence]) -> list[HotJob]:
        work = self._prefill_work()
        demotable, excess = self.demotion.demotable, self.contract.excess
        return [HotJob(s.seq_id, s.arrival_time + s.targets.ttft_p99_s, work(s),
                       demotable(s), bool(excess(s))) for s in seqs]

    def triage(self, now: float, changes: Changes) -> None:
        """Mark the hot requests to serve late and demote them to warm: those whose contract
        allows it within the triage budget (warm tells the client instead of failing it),
        and, with overload demotion, every other late one and every one past its deadline."""
        st = self.state
        pending = self._hot_pending()
        late = late_jobs(self._hot_jobs(pending), now) if len(pending) > 1 else set()
        late |= self._past_deadline(pending, now)
        for seq in pending if late else ():
            if seq.seq_id not in late:
                continue
            if self.demotion.demotable(seq) and self._may_demote():
                reason = "time to first token out of reach in a hot burst"
                st.triage_demotions += 1
            else:
                overload = self._overload_reason()
                if overload is None:
                    continue
                reason = overload
                st.overload_demotions += 1
            late.discard(seq.seq_id)
            # final, unlike a pressure demotion (``state.demoted``, restored when the
            # pressure ends): its first token missed the hot target either way, and a
            # restore would send a second notice and book that miss as hot after all
            self.hooks.retier(seq.request_id, HOT, WARM, now, changes, reason)
            st.num_demotions += 1
        for seq_id in late ^ st.hot_late:
            self.hooks.moved(seq_id)
        st.hot_late = late

    # ---- overload demotion: a late hot request is served as warm, whatever its contract ---
    def _past_deadline(self, pending: list[Sequence], now: float) -> set[str]:
        """Pending hot requests whose TTFT deadline has passed (served late)."""
        return {s.seq_id for s in pending if now > s.arrival_time + s.targets.ttft_p99_s}

    def _overload_reason(self) -> str | None:
        """Why a late request that is not demotable is served as warm (None: it is not)."""
        return "overload: the first token cannot come within the hot target; served as warm"

    def refuse_overdue(self, now: float) -> tuple[tuple[str, str], ...]:
        """Refuse demoted sequences (asked hot, served as warm) still owed their first token
        past warm's bound, ``overload_ttft_factor`` x the warm mean-TTFT target: (seq id,
        reason) pairs for the plan. Under sustained hot overload warm prefill is deferred
        step after step (hot comes first), and without this a demoted request waited until
        aging made it hot again (30 s on the CPU engine). One in a paused forward is refused
        too (its blocks are freed when the forward completes)."""
        factor, st, hooks = self.policy.overload_ttft_factor, self.state, self.hooks
        overdue = [s for s in self._overdue_watch(now)
                   if s.tier is WARM and now - s.arrival_time > factor * s.targets.warm_mean_ttft_s]
        refused = []
        excess = []
        for seq in overdue:
            if self.contract.excess(seq):
                place = self._place(seq)
                if place is not None:
                    excess.append((place, seq))
            elif seq in hooks.queue:  # in contract: served next (class HOT), not refused
                st.aged.add(seq.seq_id)
                hooks.moved(seq.seq_id)
        for _, seq in sorted(excess, key=lambda e: e[0]):  # queue order, as a scan would
            limit = factor * seq.targets.warm_mean_ttft_s
            refused.append((seq.seq_id, f"warm backlog is full: served as warm, no first "
                                        f"token within {limit:.2f} s"))
            hooks.finish(seq, SequenceStatus.FINISHED_ABORTED)
        return tuple(refused)

    def watch(self, seqs: Iterable[Sequence]) -> None:
        """Admitted sequences that asked for hot: ``refuse_overdue`` looks at them once
        warm's bound may have passed (a heap by that time, instead of a scan of every queue
        each step)."""
        factor = self.policy.overload_ttft_factor
        for seq in seqs:
            if seq.asked_tier is HOT:
                due = seq.arrival_time + factor * seq.targets.warm_mean_ttft_s
                heapq.heappush(self.state.hot_watch, (due, seq.seq_id, seq))

    def _overdue_watch(self, now: float) -> list[Sequence]:
        """The watched sequences whose bound may have passed (the heap's time less a margin
        far above the rounding of ``now - arrival``) and that may still be refused or aged:
        not finished, no first token, not in contract and aged already."""
        st, seqs = self.state, self.hooks.seqs
        watch, due = st.hot_watch, st.hot_due
        while watch and watch[0][0] <= now + 1e-9 * (1.0 + abs(now) + abs(watch[0][0])):
            _, seq_id, seq = heapq.heappop(watch)
            if seq_id in seqs:
                due[seq_id] = seq
        for seq_id, seq in list(due.items()):
            if (seq_id not in seqs or seq.first_token_time is not None
                    or (not self.contract.excess(seq) and seq_id in st.aged)):
                del due[seq_id]  # done with: nothing here can act on it again
        return list(due.values())

    def _place(self, seq: Sequence) -> tuple[int, int] | None:
        """Where ``seq`` stands in running, waiting and the paused forward, in that order."""
        running, waiting, held = self.hooks.lists()
        if seq in self.hooks.queue:
            return 1, waiting.index(seq)
        for n, queue in ((0, running), (2, held)):
            if seq in queue:
                return n, queue.index(seq)
        return None

    def _may_demote(self) -> bool:
        """Triage demotes within ``triage_demotion_budget`` of the hot requests admitted."""
        budget = self.policy.triage_demotion_budget * self.state.hot_admitted
        return self.state.triage_demotions + 1 <= budget

    # ---- admission ------------------------------------------------------------------------
    def check(self, head: Sequence, now: float) -> None:
        """Refuse a hot request that triage would serve late when the queue in front of it
        is past the bound (``_check_late``).

        Its own prefill is not counted: overload is about the queue. A prompt whose prefill
        alone exceeds the limit (a long one on a CPU) would otherwise be refused on an idle
        engine, and on every retry, so it could never be served at all. For the same reason a
        request with no work in front of it is never refused, however long it already waited
        (the first request of a process waits for the engine to load: a clean CI run saw it
        refused at "2.05 s" with nothing queued).
        """
        jobs = self._hot_jobs(self._hot_pending() + [head])
        late = late_jobs(jobs, now)
        if head.seq_id not in late or (self.demotion.demotable(head) and self._may_demote()):
            return  # on time, or served as warm (demoted at the next step)
        self._check_late(head, jobs, late, now)

    def _check_late(self, head: Sequence, jobs: list[HotJob], late: set[str],
                    now: float) -> None:
        """``head`` will be served as warm: refuse it when the hot work kept on time plus the
        warm prefill queued before it (in warm's order: in-contract first, then arrival;
        the other late hot requests count too: they will be served as warm as well) would
        keep it waiting past ``overload_ttft_factor`` times the warm mean-TTFT target."""
        work, rank = self._prefill_work(), self.hooks.rank
        running, waiting, _ = self.hooks.lists()
        excess = self.contract.excess
        mine = (excess(head), head.arrival_time, head.seq_id)
        by_id = {j.seq_id: j for j in jobs}
        ahead = 0.0
        for q in (running, waiting):
            for s in q:
                if s.first_token_time is not None or s is head:
                    continue
                job = by_id.get(s.seq_id)
                if job is not None and job.seq_id not in late:
                    ahead += job.work_s  # hot, kept on time
                elif (job is not None or rank(s) in _WARM) and (
                        excess(s), s.arrival_time, s.seq_id) < mine:
                    ahead += job.work_s if job is not None else work(s)
        refuse_past(head, now, ahead, self.policy.overload_ttft_factor
                    * head.targets.warm_mean_ttft_s, "warm backlog", self.state.contention)


def refuse_past(head: Sequence, now: float, ahead: float, limit: float, what: str,
                contention: float) -> None:
    """Raise ``EngineOverloaded`` when the wait so far plus ``ahead`` seconds of queued work
    would keep ``head`` waiting past ``limit`` (nothing ahead: never). ``ahead`` is priced at
    the machine's own speed: the learned step times over the CPU ``contention`` the engine
    measured, so a busy neighbour slows the queue (and demotes) but does not turn a burst
    into refusals (priced in slowed seconds, 32 short chats beside a busy loop were
    refused)."""
    if ahead <= 0:
        return
    wait = now - head.arrival_time + ahead / contention
    if wait > limit:
        raise EngineOverloaded(
            f"{what} is full: estimated wait before this request's prefill {wait:.2f} s "
            f"exceeds {limit:.2f} s", tier=head.tier, retry_after_s=round(wait - limit, 3))
