"""The ``laser`` policy: keep each tier's contract instead of one order for all.

Each step ranks sequences into classes — 0 hot (and, after its on-time work, anything aged
past its tier's bound), 1 cold promoted because its deadline slack ran out, 2 warm (and demoted
hot, shortest prompt first), 3 cold by least slack — then fills the step: every running
decode first (one token each, most urgent first), then prefill work class by class under the
token budget, the hot TBT cap and the hot reserve. A sequence short of KV blocks preempts
the least urgent running sequence ranked below it (cold with the most slack first, then
warm), never one above it; hot first takes back the block reserve from the cold and warm
prompts that borrowed it. Each part is a class of its own (``LaserParts`` names them:
contract, demotion, aging, cold pacing, warm's order, the fill's caps, the hot reserve, hot
triage; the layer pause is ``LayerPause``), built here from the thresholds it needs. The
policy's memory between steps is one ``LaserState``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from inference.errors import EngineOverloaded
from inference.kv.block_manager import BlockManager
from inference.request import Tier, TierChange
from inference.scheduler.base import Scheduler
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.cost import CostEstimator, EwmaCostEstimator
from inference.scheduler.laser.assembly import LaserParts
from inference.scheduler.laser.config import LaserPolicyConfig
from inference.scheduler.laser.estimate import EstimateError
from inference.scheduler.laser.fill import StepFill
from inference.scheduler.laser.fillview import FillMode, FillResult, FillView
from inference.scheduler.laser.hot import Lists, TriageHooks
from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.scheduler.laser.pause import LayerPause
from inference.scheduler.laser.pressure import pick_demotions
from inference.scheduler.laser.queue import WaitingIndex
from inference.scheduler.laser.slack import Speeds, cold_need_tokens, cold_slack, tokens_left
from inference.scheduler.laser.state import LaserState
from inference.scheduler.plan import StepPlan
from inference.sequence import Sequence

HOT, WARM, COLD = Tier.HOT, Tier.WARM, Tier.COLD
_PACED = (SchedClass.PROMOTED, SchedClass.COLD)  # ordered by cold deadline slack
# (an enum member read off its class is slow: the ranks as module constants)
C_HOT, C_PROMOTED, C_WARM, C_COLD = SchedClass


class LaserScheduler(Scheduler):
    name = "laser"

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager,
                 policy_config: LaserPolicyConfig | None = None,
                 cost: CostEstimator | None = None, pause_layers: int = 0,
                 parts: LaserParts | None = None) -> None:
        """``pause_layers``: the decoder layers the executor can stop a forward between
        (the engine's layer pause; 0, as in the simulator, never pauses); ``parts``: the
        class of each part (default: the policy the engine serves)."""
        super().__init__(config, block_manager)
        self.policy = p = policy_config or LaserPolicyConfig()
        parts = parts or LaserParts()
        self.cost: CostEstimator = cost or EwmaCostEstimator()
        self.reserve = parts.reserve(p.reserve_window_s, p.reserve_margin, p.reserve_max_frac,
                                     p.reserve_min_tokens)
        self.est_error = EstimateError(p.error_window_steps)
        self.speeds = Speeds.measure(self.cost, 1, 0, config.long_prefill_chunk,
                                     config.max_num_batched_tokens)
        self.state = LaserState(hot_step_tokens=config.max_num_batched_tokens)
        self.admission = parts.admission(p)
        self.contract = parts.contract()
        self.demotion = parts.demotion(p)
        self.aging = parts.aging(p)
        self.cold = parts.cold(p)
        self.warm = parts.warm()
        self.rules = parts.fill(p)
        self.pause = LayerPause(pause_layers, p, self.cost)
        self._keys: dict[str, SortKey] = {}  # seq id -> key(); see ``_moved``
        self._queue = WaitingIndex()  # ``waiting`` by class in key order, under ``_keys``
        self.triage = parts.triage(p, config, self.state, self.cost, self.demotion,
                                   self.contract, TriageHooks(
                                       self._lists, self._speeds, self._queue, self.seqs,
                                       self.rank, self._moved, self._retier, self._finish))

    @property
    def num_demotions(self) -> int:
        return self.state.num_demotions

    @property
    def num_promotions(self) -> int:
        return self.state.num_promotions

    @property
    def hot_late(self) -> set[str]:
        return self.state.hot_late

    @property
    def held(self) -> list[Sequence]:
        return self.pause.held

    def _moved(self, seq_id: str | None = None) -> None:
        """A sequence's sort key changed (rank, slack, triage): drop its cached key; every
        key when ``seq_id`` is None."""
        if seq_id is None:
            self._keys.clear()
        else:
            self._keys.pop(seq_id, None)
        self._queue.moved(seq_id)

    # ---- the waiting queue: ``_queue`` follows every change to ``waiting`` ----------------
    def add(self, seqs: list[Sequence], now: float) -> None:
        super().add(seqs, now)
        for seq in seqs:
            if seq.parent_id is None:
                self._queue.enter(seq)
        self.triage.watch(seqs)

    def requeue_preempted(self, seq: Sequence) -> None:
        super().requeue_preempted(seq)
        self._queue.enter(seq)

    def start_running(self, seq: Sequence, now: float) -> None:
        super().start_running(seq, now)
        self._queue.leave(seq)

    # ---- engine hooks ---------------------------------------------------------------------
    def observe_step(self, num_tokens: int, seconds: float, prompt_tokens: int = 0,
                     token_s: float | None = None) -> None:
        """Feed a measured step time to the cost estimator (the real engine calls this). The
        cost model learns the forward; the TBT cap's safety margin follows the step from plan
        to tokens against the forward's estimate, so that the planning and sampling around a
        capped forward come out of the margin, not out of the target."""
        self.cost.observe_step(num_tokens, seconds, prompt_tokens)
        self.est_error.observe(seconds if token_s is None else token_s)

    def observe_contention(self, factor: float) -> None:
        self.state.contention = max(1.0, factor)

    def tbt_safety(self) -> float:
        """Fraction of a TBT target a capped step may fill, given recent estimate errors."""
        p = self.policy
        return self.est_error.safety(p.tbt_safety, p.tbt_safety_max)

    # ---- the layer pause's hooks (``LayerPausing``) ---------------------------------------
    @property
    def pausing(self) -> bool:
        return self.pause.pausing

    def pause_due_at(self) -> float:
        return self.pause.due_at(self.running, self.rank, self.tbt_safety)

    def pause_step_cap_s(self, now: float) -> float | None:
        return self.pause.step_cap_s(now, self.state.hot_seen, self.running, self.rank)

    def hold(self, seq_ids: Iterable[str]) -> None:
        self.running = self.pause.hold(seq_ids, self.running)

    def release(self) -> None:
        self.running = self.pause.release(self.running, self.kv)

    def has_work(self) -> bool:
        return super().has_work() or bool(self.pause.held)

    def in_flight(self) -> list[Sequence]:
        return self.pause.held + self.running

    def _free_blocks(self, seq: Sequence) -> None:
        if not self.pause.keeps_blocks(seq):
            super()._free_blocks(seq)

    # ---- ranking --------------------------------------------------------------------------
    def rank(self, seq: Sequence) -> SchedClass:
        if seq.seq_id in self.state.aged:
            return C_HOT
        tier = seq.tier
        if tier is HOT:
            return C_HOT
        if tier is WARM:
            return C_PROMOTED if seq.seq_id in self.state.promoted else C_WARM
        return C_COLD

    def key(self, seq: Sequence) -> SortKey:
        """Sort key, smaller first; cached until aging, slack or a tier change moves it."""
        k = self._keys.get(seq.seq_id)
        if k is None:
            k = self._keys[seq.seq_id] = self._key(seq)
        return k

    def _key(self, seq: Sequence) -> SortKey:
        cls = self.rank(seq)
        excess = self.excess(seq)  # every tenant's in-contract work first within a class
        if cls in _PACED:
            return SortKey(cls, excess, 0, self.cold.when(seq, self.state.cold_slack),
                           seq.seq_id)
        if cls is C_HOT:  # earliest TTFT deadline first: a short prompt need not
            # wait for a long one; triage's late ones and aged warm and cold work last
            late = 1 if seq.seq_id in self.state.hot_late or seq.tier is not HOT else 0
            return SortKey(cls, excess, late, seq.arrival_time + seq.targets.ttft_p99_s,
                           seq.seq_id)
        return SortKey(cls, excess, 0, self.warm.when(seq), seq.seq_id)

    def excess(self, seq: Sequence) -> int:
        """1 for traffic above its tenant's contract, else 0 (``Contract``)."""
        return self.contract.excess(seq)

    def _lists(self) -> Lists:
        """The queues triage reads (``TriageHooks``): running, waiting, a paused forward's."""
        return self.running, self.waiting, self.pause.held

    def _speeds(self) -> Speeds:
        return self.speeds

    # ---- admission ------------------------------------------------------------------------
    def admit(self, seqs: list[Sequence], now: float) -> None:
        super().admit(seqs, now)
        st, head = self.state, seqs[0]
        if head.tier is COLD:
            if head.deadline is not None:
                admitted = [s for s in self.seqs.values() if s.asked_tier is COLD]
                self.admission.check(
                    seqs, admitted, now, self.speeds, share=1.0 - st.other_load,
                    concurrency=self._cold_concurrency(seqs, len(admitted)),
                    live_tokens=sum(map(tokens_left, self.seqs.values())))
            st.new_cold.extend(seqs)
        elif head.tier is HOT:
            try:
                self.triage.check(head, now)
            except EngineOverloaded:
                st.hot_refused = True
                raise
        if head.tier is HOT:
            st.hot_admitted += 1
            st.hot_seen = (now, head.targets.tbt_p99_s)  # for the pause granularity

    def _cold_concurrency(self, seqs: list[Sequence], num_admitted: int) -> int:
        per_seq = max(1, seqs[0].num_tokens + seqs[0].remaining_output)
        kv_room = self.kv.num_blocks * self.kv.block_size // per_seq
        return max(1, min(self.config.max_num_seqs, num_admitted + len(seqs), kv_room))

    # ---- a step ---------------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        st = self.state
        cfg = self.config
        self.speeds = Speeds.measure(self.cost, st.last_tokens, st.context,
                                     cfg.long_prefill_chunk, cfg.max_num_batched_tokens)
        changes: list[tuple[str, TierChange]] = []
        if now - st.refreshed >= self.policy.cold_refresh_s:
            st.refreshed = now
            self._age(now)
            self._refresh_cold(now, changes)
        else:
            self._rank_new_cold(now, changes)
        st.new_cold.clear()
        self._demotion_step(now, changes)
        self.triage.triage(now, changes)
        refused = self.triage.refuse_overdue(now)
        fill, preempted, finish = self._fill(now)
        self._after_step(fill, now)
        plan = self.make_plan(fill.items, preempted, tier_changes=tuple(changes),
                              finish_paused=finish, refused=refused)
        st.last_tokens = max(1, plan.num_batched_tokens)
        if self.pause.may_pause(plan, self.seqs, self.rank):
            plan = replace(plan, pause_until=self.pause_due_at())
        return plan

    def _fill(self, now: float) -> tuple[FillResult, list[str], bool]:
        """The step's fill, its preemptions and whether class-0 work waits for the paused
        forward's blocks. Hot work and the rest share a step (one pass over the weights for
        both, under hot's TBT cap); while a paused forward is held, only hot work runs."""
        mode = FillMode.HOT if self.pause.held else FillMode.ALL
        fill = StepFill(self._view(now, mode), mode).run()
        self._apply(fill, now)
        return fill, [q.seq_id for q in fill.preempted], fill.finish_paused

    def _view(self, now: float, mode: FillMode) -> FillView:
        budget = self.config.max_num_batched_tokens
        return FillView(
            now=now, running=self.running, waiting=self.waiting, key=self.key,
            queue=self._queue.sync(self.key),
            config=self.config, rules=self.rules, cost=self.cost,
            speeds=self.speeds, tbt_safety=self.tbt_safety(),
            pause_cap_s=self.pause_step_cap_s(now) if mode is FillMode.ALL else None,
            hold_tokens=self.reserve.tokens(budget),
            hold_blocks=self.reserve.blocks(self.kv.num_blocks),
            lent=self.reserve.lent,
            cold_need=self.state.cold_need, has_held=bool(self.pause.held), kv=self.kv,
            try_schedule=self.try_schedule, release_unscheduled=self.release_unscheduled,
            pausing=self.pausing)

    def _apply(self, fill: FillResult, now: float) -> None:
        """The fill's decisions: its victims wait again (their blocks are already free), the
        waiting sequences it started run."""
        for seq in fill.preempted:
            self.requeue_preempted(seq)
        for seq in fill.started:
            self.start_running(seq, now)

    def _after_step(self, fill: FillResult, now: float) -> None:
        st, budget = self.state, self.config.max_num_batched_tokens
        st.context = fill.context
        st.hot_min_slack = fill.hot_min_slack
        st.hot_step_tokens = max(1, fill.hot_cap)
        self.est_error.expect(fill.estimate_s)
        used = fill.used_by_class
        other = used[SchedClass.HOT] + used[SchedClass.WARM]
        st.other_load += 0.05 * (min(1.0, other / budget) - st.other_load)
        self.reserve.observe(now, used[SchedClass.HOT], fill.hot_blocks)
        self.reserve.lent = fill.lent

    # ---- cold slack, aging, promotion, demotion -------------------------------------------
    def _age(self, now: float) -> None:
        """Waiting warm and cold sequences past their tier's bound rank as hot from now on.
        Only their keys move (each key reads only marks whose every change moves it)."""
        aged, bound = self.state.aged, self.aging.bound
        older = []
        for seq in self._queue.unranked(SchedClass.HOT):  # hot (no bound) or aged already
            b = bound(seq.tier)
            if (b is not None and seq.first_scheduled_time is None
                    and now - seq.arrival_time > b and seq.seq_id not in aged):
                older.append(seq)
        for seq in older:
            aged.add(seq.seq_id)
            self._moved(seq.seq_id)

    def _refresh_cold(self, now: float, changes: list) -> None:
        sp, p, st = self.speeds, self.policy, self.state
        cold = [s for s in self.seqs.values() if s.asked_tier is COLD]
        st.cold_slack = {s.seq_id: cold_slack(s, now, sp) for s in cold}
        for seq in cold:  # only cold (and promoted) keys read the slack
            self._moved(seq.seq_id)
        st.cold_need = p.cold_need_safety * cold_need_tokens(cold, now, sp)
        for seq in cold:
            self._promote_if_tight(seq, now, changes)

    def _rank_new_cold(self, now: float, changes: list) -> None:
        """Slack (as of the last refresh, like the rest) and promotion for cold requests
        admitted since: unranked until the next refresh, a tight newcomer sorted after every
        promoted job and was the first preempted. Only the newcomers: a whole refresh per
        arrival doubled the step's scheduling time under a stream of batch lines."""
        st = self.state
        for seq in st.new_cold:
            if seq.seq_id in self.seqs:
                st.cold_slack[seq.seq_id] = cold_slack(seq, st.refreshed, self.speeds)
                self._moved(seq.seq_id)
                self._promote_if_tight(seq, now, changes)

    def _promote_if_tight(self, seq: Sequence, now: float, changes: list) -> None:
        p, st = self.policy, self.state
        slack = st.cold_slack[seq.seq_id]
        if self.cold.promotes(slack) and seq.seq_id not in st.promoted:
            st.promoted.add(seq.seq_id)
            seq.tier = WARM
            st.num_promotions += 1
            self._moved(seq.seq_id)
            changes.append((seq.seq_id, TierChange(
                COLD, WARM, f"deadline slack {slack:.0f} s below {p.promote_slack_s:.0f} s",
                now)))

    def _demotion_step(self, now: float, changes: list) -> None:
        p, st = self.policy, self.state
        pressured = st.hot_refused or st.hot_min_slack < p.pressure_slack_frac
        st.hot_refused = False
        action = self.demotion.action(now, pressured, bool(st.demoted))
        if action == "demote":
            hot = [s for s in self.running + self.waiting if s.tier is HOT]
            for rid in pick_demotions(hot, p.demote_fraction, excess=self.contract.excess):
                self._retier(rid, HOT, WARM, now, changes,
                             f"sustained hot pressure: slack under {p.pressure_slack_frac:.0%} "
                             f"of target for {p.pressure_window_s:g} s")
                st.demoted.add(rid)
                st.num_demotions += 1
        elif action == "restore":
            for rid in sorted(st.demoted):
                self._retier(rid, WARM, HOT, now, changes, "hot pressure ended")
            st.demoted.clear()

    def _retier(self, rid: str, old: Tier, new: Tier, now: float, changes: list,
                reason: str) -> None:
        for seq in self.by_request.get(rid, ()):  # in ``seqs`` order, as a scan of it
            if seq.tier is old and seq.seq_id in self.seqs:
                seq.tier = new
                self._moved(seq.seq_id)
                changes.append((seq.seq_id, TierChange(old, new, reason, now)))

    def _finish(self, seq, status) -> None:
        super()._finish(seq, status)
        self._queue.leave(seq)
        self._moved(seq.seq_id)
        st = self.state
        st.forget(seq)
        if seq.request_id in st.demoted and not any(
                s.request_id == seq.request_id for s in self.running):
            st.demoted.discard(seq.request_id)
