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

from inference.errors import EngineOverloaded
from inference.request import Tier
from inference.scheduler.laser.fill import MIN_HOT_CHUNK
from inference.scheduler.laser.keys import SchedClass
from inference.scheduler.laser.triage import HotJob, late_jobs, prefill_work_s
from inference.sequence import Sequence, SequenceStatus

HOT, WARM = Tier.HOT, Tier.WARM
_WARM = (SchedClass.PROMOTED, SchedClass.WARM)  # served in warm's order


class HotTriage:
    """Mixed into ``LaserScheduler`` (which provides the queues, ``state``, ``pause``,
    ``policy``, ``ablations``, ``speeds``, ``cost``, ``rank``, ``key``, ``excess`` and
    ``_retier``)."""

    def _hot_pending(self) -> list[Sequence]:
        """Hot sequences still owed their first token (aged ones keep plain EDF)."""
        return [s for q in (self.running, self.waiting) for s in q
                if s.tier is HOT and s.first_token_time is None
                and s.seq_id not in self.state.aged]

    def _prefill_work(self):
        # the fill gives hot prefill at least MIN_HOT_CHUNK a step even when the TBT cap
        # leaves less (on a slow CPU it can leave a token or none: priced at one token a step,
        # 16 simultaneous chats looked three times deeper than they were and were refused)
        step = min(max(self.state.hot_step_tokens, MIN_HOT_CHUNK),
                   self.config.long_prefill_chunk)
        return prefill_work_s(self.speeds, step, getattr(self.cost, "prefill_attn_s", None))

    def _hot_jobs(self, seqs: list[Sequence]) -> list[HotJob]:
        work = self._prefill_work()
        demote = self.ablations.demotion_enabled
        return [HotJob(s.seq_id, s.arrival_time + s.targets.ttft_p99_s, work(s),
                       demote and s.targets.demotable, bool(self.excess(s))) for s in seqs]

    def _triage(self, now: float, changes: list) -> None:
        """Mark the hot requests to serve late and demote them to warm: those whose contract
        allows it within the triage budget (warm tells the client instead of failing it),
        and, with overload demotion, every other late one and every one past its deadline."""
        st, ab = self.state, self.ablations
        pending = self._hot_pending()
        late = late_jobs(self._hot_jobs(pending), now) if len(pending) > 1 else set()
        if ab.overload_demotion_enabled:
            late |= {s.seq_id for s in pending if now > s.arrival_time + s.targets.ttft_p99_s}
        for seq in pending if late else ():
            if seq.seq_id not in late:
                continue
            if ab.demotion_enabled and seq.targets.demotable and self._may_demote():
                reason = "time to first token out of reach in a hot burst"
                st.triage_demotions += 1
            elif ab.overload_demotion_enabled:
                reason = ("overload: the first token cannot come within the hot target; "
                          "served as warm")
                st.overload_demotions += 1
            else:
                continue
            late.discard(seq.seq_id)
            # final, unlike a pressure demotion (``state.demoted``, restored when the
            # pressure ends): its first token missed the hot target either way, and a
            # restore would send a second notice and book that miss as hot after all
            self._retier(seq.request_id, HOT, WARM, now, changes, reason)
            st.num_demotions += 1
        for seq_id in late ^ st.hot_late:
            self._moved(seq_id)
        st.hot_late = late

    def _refuse_overdue(self, now: float) -> tuple[tuple[str, str], ...]:
        """Refuse demoted sequences (asked hot, served as warm) still owed their first token
        past warm's bound, ``overload_ttft_factor`` x the warm mean-TTFT target: (seq id,
        reason) pairs for the plan. Under sustained hot overload warm prefill is deferred
        step after step (hot comes first), and without this a demoted request waited until
        aging made it hot again (30 s on the CPU engine). One in a paused forward is refused
        too (its blocks are freed when the forward completes)."""
        factor, st = self.policy.overload_ttft_factor, self.state
        overdue = [s for s in self._overdue_watch(now)
                   if s.tier is WARM and now - s.arrival_time > factor * s.targets.warm_mean_ttft_s]
        refused = []
        excess = []
        for seq in overdue:
            if self.excess(seq):
                place = self._place(seq)
                if place is not None:
                    excess.append((place, seq))
            elif seq in self._queue:  # in contract: served next (class 0), not refused
                st.aged.add(seq.seq_id)
                self._moved(seq.seq_id)
        for _, seq in sorted(excess, key=lambda e: e[0]):  # queue order, as a scan would
            limit = factor * seq.targets.warm_mean_ttft_s
            refused.append((seq.seq_id, f"warm backlog is full: served as warm, no first "
                                        f"token within {limit:.2f} s"))
            self._finish(seq, SequenceStatus.FINISHED_ABORTED)
        return tuple(refused)

    def watch_hot(self, seqs: list[Sequence]) -> None:
        """Admitted sequences that asked for hot: ``_refuse_overdue`` looks at them once
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
        st = self.state
        watch, due = st.hot_watch, st.hot_due
        while watch and watch[0][0] <= now + 1e-9 * (1.0 + abs(now) + abs(watch[0][0])):
            _, seq_id, seq = heapq.heappop(watch)
            if seq_id in self.seqs:
                due[seq_id] = seq
        for seq_id, seq in list(due.items()):
            if (seq_id not in self.seqs or seq.first_token_time is not None
                    or (not self.excess(seq) and seq_id in st.aged)):
                del due[seq_id]  # done with: nothing here can act on it again
        return list(due.values())

    def _place(self, seq: Sequence) -> tuple[int, int] | None:
        """Where ``seq`` stands in running, waiting and the paused forward, in that order."""
        if seq in self._queue:
            return 1, self.waiting.index(seq)
        for n, queue in ((0, self.running), (2, self.pause.held)):
            if seq in queue:
                return n, queue.index(seq)
        return None

    def _may_demote(self) -> bool:
        """Triage demotes within ``triage_demotion_budget`` of the hot requests admitted."""
        budget = self.policy.triage_demotion_budget * self.state.hot_admitted
        return self.state.triage_demotions + 1 <= budget

    def _check_hot_triage(self, head: Sequence, now: float) -> None:
        """Refuse a hot request that triage would serve late when the queue in front of it
        is past the bound: with overload demotion, warm's (it would be served as warm), else
        the hot queue's.

        Its own prefill is not counted: overload is about the queue. A prompt whose prefill
        alone exceeds the limit (a long one on a CPU) would otherwise be refused on an idle
        engine, and on every retry, so it could never be served at all. For the same reason a
        request with no work in front of it is never refused, however long it already waited
        (the first request of a process waits for the engine to load: a clean CI run saw it
        refused at "2.05 s" with nothing queued).
        """
        jobs = self._hot_jobs(self._hot_pending() + [head])
        late = late_jobs(jobs, now)
        if head.seq_id not in late or (self.ablations.demotion_enabled
                                       and head.targets.demotable and self._may_demote()):
            return  # on time, or served as warm (demoted at the next step)
        if self.ablations.overload_demotion_enabled:
            self._check_warm_backlog(head, jobs, late, now)
            return
        mine = (head.arrival_time + head.targets.ttft_p99_s, head.seq_id)
        ahead = sum(j.work_s for j in jobs if j.seq_id != head.seq_id
                    and (j.seq_id not in late or (j.deadline, j.seq_id) <= mine))
        self._refuse_past(head, now, ahead, self.policy.overload_ttft_factor
                          * head.targets.ttft_p99_s, "hot queue")

    def _check_warm_backlog(self, head: Sequence, jobs: list[HotJob], late: set[str],
                            now: float) -> None:
        """``head`` will be served as warm: refuse it when the hot work kept on time plus the
        warm prefill queued before it (in warm's order: in-contract first, then arrival;
        the other late hot requests count too: they will be served as warm as well) would
        keep it waiting past ``overload_ttft_factor`` times the warm mean-TTFT target."""
        work = self._prefill_work()
        mine = (self.excess(head), head.arrival_time, head.seq_id)
        by_id = {j.seq_id: j for j in jobs}
        ahead = 0.0
        for q in (self.running, self.waiting):
            for s in q:
                if s.first_token_time is not None or s is head:
                    continue
                job = by_id.get(s.seq_id)
                if job is not None and job.seq_id not in late:
                    ahead += job.work_s  # hot, kept on time
                elif (job is not None or self.rank(s) in _WARM) and (
                        self.excess(s), s.arrival_time, s.seq_id) < mine:
                    ahead += job.work_s if job is not None else work(s)
        self._refuse_past(head, now, ahead, self.policy.overload_ttft_factor
                          * head.targets.warm_mean_ttft_s, "warm backlog")

    def _refuse_past(self, head: Sequence, now: float, ahead: float, limit: float,
                     what: str) -> None:
        """Refuse when the wait so far plus ``ahead`` passes ``limit``. ``ahead`` is priced
        at the machine's own speed: the learned step times over the CPU contention the
        engine measured, so a busy neighbour slows the queue (and demotes) but does not turn
        a burst into refusals (priced in slowed seconds, 32 short chats beside a busy loop
        were refused)."""
        if ahead <= 0:
            return
        wait = now - head.arrival_time + ahead / self.state.contention
        if wait > limit:
            raise EngineOverloaded(
                f"{what} is full: estimated wait before this request's prefill {wait:.2f} s "
                f"exceeds {limit:.2f} s", tier=head.tier, retry_after_s=round(wait - limit, 3))
