"""The ``laser`` policy: keep each tier's contract instead of one order for all.

Each step ranks sequences into classes — 0 hot (and anything aged past its tier's bound),
1 cold promoted because its deadline slack ran out, 2 warm (and demoted hot), 3 cold by least
slack — then fills the step: every running decode first (one token each, most urgent first),
then prefill work class by class under the token budget, the hot TBT cap and the hot
reserve. A sequence short of KV blocks preempts the least urgent running sequence ranked
below it (cold with the most slack first, then warm), never one above it. The parts live in
their own modules and each can be switched off in ``LaserPolicyConfig``.
"""

from __future__ import annotations

import math

from inference.errors import EngineOverloaded
from inference.kv.block_manager import BlockManager
from inference.request import Tier, TierChange
from inference.scheduler.base import Scheduler
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.cost import CostEstimator, EwmaCostEstimator
from inference.scheduler.laser.admission import check_cold, check_hot
from inference.scheduler.laser.config import LaserPolicyConfig
from inference.scheduler.laser.estimate import EstimateError
from inference.scheduler.laser.fill import MIN_HOT_CHUNK, StepFill
from inference.scheduler.laser.pressure import PressureTracker, pick_demotions
from inference.scheduler.laser.reserve import HotReserve
from inference.scheduler.laser.slack import (
    Speeds,
    cold_need_tokens,
    cold_slack,
    prefill_left,
)
from inference.scheduler.laser.triage import HotJob, late_jobs, prefill_work_s
from inference.scheduler.plan import StepPlan
from inference.sequence import Sequence

HOT, WARM, COLD = Tier.HOT, Tier.WARM, Tier.COLD


class LaserScheduler(Scheduler):
    name = "laser"

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager,
                 policy_config: LaserPolicyConfig | None = None,
                 cost: CostEstimator | None = None) -> None:
        super().__init__(config, block_manager)
        self.policy = p = policy_config or LaserPolicyConfig()
        self.cost: CostEstimator = cost or EwmaCostEstimator()
        self.reserve = HotReserve(p.reserve_window_s, p.reserve_margin, p.reserve_max_frac,
                                  p.reserve_min_tokens)
        self.pressure = PressureTracker(p.pressure_window_s, p.restore_window_s)
        self.est_error = EstimateError(p.error_window_steps)
        self.speeds = Speeds.measure(self.cost, 1, 0, config.long_prefill_chunk,
                                     config.max_num_batched_tokens)
        self.demoted: set[str] = set()  # request ids
        self.promoted: set[str] = set()  # seq ids
        self.aged: set[str] = set()  # seq ids
        self.cold_slack: dict[str, float] = {}
        self.cold_need = 0.0
        self.num_demotions = self.num_promotions = 0
        self._hot_admitted = self._triage_demotions = 0
        self._hot_seen: tuple[float, float] | None = None  # last hot admission: time, TBT
        self._refreshed = -math.inf
        self._new_cold: list[Sequence] = []  # admitted since the last slack refresh
        self._last_tokens = 1
        self._context = 0
        self._other_load = 0.0  # EWMA: fraction of the token budget hot and warm used
        self._hot_refused = False
        self._hot_min_slack = math.inf
        self._keys: dict[str, tuple] = {}  # seq id -> key(); cleared when ranks or slack move
        self.hot_late: set[str] = set()  # hot seq ids triage serves after the on-time ones
        self._hot_step_tokens = config.max_num_batched_tokens  # hot's share of the last step

    # ---- engine hooks ---------------------------------------------------------------------
    def observe_step(self, num_tokens: int, seconds: float) -> None:
        """Feed a measured step time to the cost estimator (the real engine calls this)."""
        self.cost.observe_step(num_tokens, seconds)
        self.est_error.observe(seconds)

    def tbt_safety(self) -> float:
        """Fraction of a TBT target a capped step may fill, given recent estimate errors."""
        p = self.policy
        return self.est_error.safety(p.tbt_safety, p.tbt_safety_max)

    def reserved_idle_blocks(self) -> int:
        """KV blocks held back for hot and not in use right now."""
        if not self.policy.reserve_enabled:
            return 0
        return min(self.reserve.blocks(self.kv.num_blocks), self.kv.num_free_blocks)

    # ---- ranking --------------------------------------------------------------------------
    def rank(self, seq: Sequence) -> int:
        if seq.seq_id in self.aged:
            return 0
        tier = seq.tier
        if tier is HOT:
            return 0
        if tier is WARM:
            return 1 if seq.seq_id in self.promoted else 2
        return 3

    def key(self, seq: Sequence) -> tuple:
        """Sort key, smaller first; cached until aging, slack or a tier change moves it."""
        k = self._keys.get(seq.seq_id)
        if k is None:
            k = self._keys[seq.seq_id] = self._key(seq)
        return k

    def _key(self, seq: Sequence) -> tuple:
        cls = self.rank(seq)
        if cls in (1, 3) and self.policy.cold_slack_enabled:
            return (cls, self.cold_slack.get(seq.seq_id, math.inf), seq.seq_id)
        if cls == 0:  # earliest TTFT deadline first: a short prompt need not wait for a long one
            late = 1 if seq.seq_id in self.hot_late else 0  # triage: late ones after the rest
            return (0, late, seq.arrival_time + seq.targets.ttft_p99_s, seq.seq_id)
        return (cls, seq.arrival_time, seq.seq_id)

    # ---- admission ------------------------------------------------------------------------
    def admit(self, seqs: list[Sequence], now: float) -> None:
        super().admit(seqs, now)
        p, head = self.policy, seqs[0]
        if head.tier is COLD:
            if p.admission_enabled and head.deadline is not None:
                admitted = [s for s in self.seqs.values() if s.asked_tier is COLD]
                check_cold(seqs, admitted, now, self.speeds, share=1.0 - self._other_load,
                           concurrency=self._cold_concurrency(seqs, len(admitted)),
                           safety=p.cold_need_safety)
            self._new_cold.extend(seqs)
        elif head.tier is HOT and p.overload_enabled:
            try:
                if p.triage_enabled:
                    self._check_hot_triage(head, now)
                else:
                    queued = sum(prefill_left(s) for s in self.seqs.values()
                                 if s.first_token_time is None and self.rank(s) == 0)
                    check_hot(head, queued, now, self.speeds, p.overload_ttft_factor)
            except EngineOverloaded:
                self._hot_refused = True
                raise
        if head.tier is HOT:
            self._hot_admitted += 1
            self._hot_seen = (now, head.targets.tbt_p99_s)  # for the pause granularity

    # ---- hot triage -----------------------------------------------------------------------
    def _hot_pending(self) -> list[Sequence]:
        """Hot sequences still owed their first token (aged ones keep plain EDF)."""
        return [s for q in (self.running, self.waiting) for s in q
                if s.tier is HOT and s.first_token_time is None and s.seq_id not in self.aged]

    def _hot_jobs(self, seqs: list[Sequence]) -> list[HotJob]:
        # the fill gives hot prefill at least MIN_HOT_CHUNK a step even when the TBT cap
        # leaves less (on a slow CPU it can leave a token or none: priced at one token a step,
        # 16 simultaneous chats looked three times deeper than they were and were refused)
        step = min(max(self._hot_step_tokens, MIN_HOT_CHUNK), self.config.long_prefill_chunk)
        work = prefill_work_s(self.speeds, step, getattr(self.cost, "prefill_attn_s", None))
        demote = self.policy.demotion_enabled
        return [HotJob(s.seq_id, s.arrival_time + s.targets.ttft_p99_s, work(s),
                       demote and s.targets.demotable) for s in seqs]

    def _triage(self, now: float, changes: list) -> None:
        """Mark the hot requests to serve late; demote those whose contract allows it (they
        would miss their TTFT anyway: warm tells the client instead of failing it)."""
        pending = self._hot_pending()
        late = late_jobs(self._hot_jobs(pending), now) if len(pending) > 1 else set()
        if late and self.policy.demotion_enabled:
            for seq in pending:
                if seq.seq_id in late and seq.targets.demotable and self._may_demote():
                    late.discard(seq.seq_id)
                    self._retier(seq.request_id, HOT, WARM, now, changes,
                                 "time to first token out of reach in a hot burst")
                    self.demoted.add(seq.request_id)
                    self.num_demotions += 1
                    self._triage_demotions += 1
        for seq_id in late ^ self.hot_late:
            self._keys.pop(seq_id, None)
        self.hot_late = late

    def _may_demote(self) -> bool:
        """Triage demotes within ``triage_demotion_budget`` of the hot requests admitted."""
        budget = self.policy.triage_demotion_budget * self._hot_admitted
        return self._triage_demotions + 1 <= budget

    def _check_hot_triage(self, head: Sequence, now: float) -> None:
        """Refuse a hot request that triage would serve late *and* that would wait, behind the
        on-time work and the late work due before it, past the overload factor.

        Its own prefill is not counted: overload is about the queue. A prompt whose prefill
        alone exceeds the limit (a long one on a CPU) would otherwise be refused on an idle
        engine, and on every retry, so it could never be served at all. For the same reason a
        request with no work in front of it is never refused, however long it already waited
        (the first request of a process waits for the engine to load: a clean CI run saw it
        refused at "2.05 s" with nothing queued).
        """
        jobs = self._hot_jobs(self._hot_pending() + [head])
        late = late_jobs(jobs, now)
        if head.seq_id not in late or (self.policy.demotion_enabled
                                       and head.targets.demotable and self._may_demote()):
            return  # on time, or served as warm (demoted at the next step)
        mine = (head.arrival_time + head.targets.ttft_p99_s, head.seq_id)
        ahead = sum(j.work_s for j in jobs if j.seq_id != head.seq_id
                    and (j.seq_id not in late or (j.deadline, j.seq_id) <= mine))
        if ahead <= 0:
            return
        wait = now - head.arrival_time + ahead
        limit = self.policy.overload_ttft_factor * head.targets.ttft_p99_s
        if wait > limit:
            raise EngineOverloaded(
                f"hot queue is full: estimated wait before this request's prefill {wait:.2f} s "
                f"exceeds {limit:.2f} s", tier=head.tier, retry_after_s=round(wait - limit, 3))

    def _cold_concurrency(self, seqs: list[Sequence], num_admitted: int) -> int:
        per_seq = max(1, seqs[0].num_tokens + seqs[0].remaining_output)
        kv_room = self.kv.num_blocks * self.kv.block_size // per_seq
        return max(1, min(self.config.max_num_seqs, num_admitted + len(seqs), kv_room))

    # ---- a step ---------------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        p = self.policy
        cfg = self.config
        self.release_wanted = False
        self.speeds = Speeds.measure(self.cost, self._last_tokens, self._context,
                                     cfg.long_prefill_chunk, cfg.max_num_batched_tokens)
        changes: list[tuple[str, TierChange]] = []
        if now - self._refreshed >= p.cold_refresh_s:
            self._refreshed = now
            if p.aging_enabled:
                self._age(now)
            if p.cold_slack_enabled or p.borrowing_enabled:
                self._refresh_cold(now, changes)
        elif p.cold_slack_enabled:
            self._rank_new_cold(now, changes)
        self._new_cold.clear()
        if p.demotion_enabled:
            self._demotion_step(now, changes)
        if p.triage_enabled:
            self._triage(now, changes)
        fill, preempted = self._fill(now)
        self._after_step(fill)
        plan = self.make_plan([g for g, _ in fill.items.values()], preempted,
                              tier_changes=tuple(changes))
        self._last_tokens = max(1, plan.num_batched_tokens)
        return plan

    def _fill(self, now: float) -> tuple[StepFill, list[str]]:
        """The step's fill. With layer pause, hot work and the rest go in separate steps (the
        rest's steps pause for hot): hot only while a paused forward is held or hot work is
        due, else the rest; the first of those that finds work wins."""
        if not self.pausing:
            modes: tuple[str, ...] = ("all",)
        elif self.held:
            modes = ("hot",)
        elif self._hot_due(now):
            modes = ("hot", "all")
        else:
            modes = ("other", "all")
        preempted: list[str] = []
        for mode in modes:
            fill = StepFill(self, now, mode)
            fill.run()
            preempted += fill.preempted
            if fill.items:
                break
        return fill, preempted

    # ---- layer-level pause ----------------------------------------------------------------
    @property
    def pausing(self) -> bool:
        """The executor can stop between layers and the policy wants it to."""
        return bool(self.layer_pause) and self.policy.layer_pause_enabled

    def may_pause(self, plan: StepPlan) -> bool:
        if not self.pausing or plan.is_empty:
            return False
        return all(self.rank(self.seqs[i.seq_id]) != 0 for i in plan.scheduled
                   if i.seq_id in self.seqs)

    def pause_due_at(self) -> float:
        """When the earliest running hot stream's next token falls due: ``tbt_safety`` of its
        TBT target after its last token, less the estimated hot step."""
        hot = [q for q in self.running if self.rank(q) == 0 and not q.is_prefilling]
        if not (self.pausing and hot):
            return math.inf
        safety = self.tbt_safety()
        step = self.cost.step_time(len(hot), sum(q.num_computed_tokens for q in hot))
        return min((q.last_token_time or -math.inf) + safety * q.targets.tbt_p99_s
                   for q in hot) - step

    def pause_step_cap_s(self, now: float) -> float | None:
        """Longest step a pausable fill may take: ``pause_layer_frac`` of the latest hot TBT
        target per layer, while hot traffic was seen within the reserve window; else None."""
        if not (self.pausing and self._hot_seen):
            return None
        seen, tbt = self._hot_seen
        if now - seen > self.policy.reserve_window_s and not any(
                self.rank(q) == 0 for q in self.running):
            return None
        return self.policy.pause_layer_frac * tbt * self.layer_pause

    def _hot_due(self, now: float) -> bool:
        if any(self.rank(q) == 0 for q in self.waiting):
            return True
        if any(self.rank(q) == 0 and q.is_prefilling for q in self.running):
            return True
        return now >= self.pause_due_at()

    def _after_step(self, fill: StepFill) -> None:
        budget = self.config.max_num_batched_tokens
        self._context = fill.context
        if fill.mode != "other":  # a step without hot work says nothing of hot's slack
            self._hot_min_slack = fill.hot_min_slack
            self._hot_step_tokens = max(1, fill.hot_cap)
        self.est_error.expect(fill.estimate_s() if fill.used else 0.0)
        other = fill.used_by_class[0] + fill.used_by_class[2]
        self._other_load += 0.05 * (min(1.0, other / budget) - self._other_load)
        if self.policy.reserve_enabled:
            self.reserve.observe(fill.now, fill.used_by_class[0], fill.hot_blocks)

    def _age(self, now: float) -> None:
        self._keys.clear()
        p = self.policy
        bound = {WARM: p.aging_warm_s, COLD: p.aging_cold_s}
        for seq in self.waiting:
            b = bound.get(seq.tier)
            if b is not None and seq.first_scheduled_time is None and now - seq.arrival_time > b:
                self.aged.add(seq.seq_id)

    def _refresh_cold(self, now: float, changes: list) -> None:
        sp, p = self.speeds, self.policy
        cold = [s for s in self.seqs.values() if s.asked_tier is COLD]
        self.cold_slack = {s.seq_id: cold_slack(s, now, sp) for s in cold}
        self._keys.clear()
        self.cold_need = p.cold_need_safety * cold_need_tokens(cold, now, sp)
        if not p.cold_slack_enabled:
            return
        for seq in cold:
            self._promote_if_tight(seq, now, changes)

    def _rank_new_cold(self, now: float, changes: list) -> None:
        """Slack (as of the last refresh, like the rest) and promotion for cold requests
        admitted since: unranked until the next refresh, a tight newcomer sorted after every
        promoted job and was the first preempted. Only the newcomers: a whole refresh per
        arrival doubled the step's scheduling time under a stream of batch lines."""
        for seq in self._new_cold:
            if seq.seq_id in self.seqs:
                self.cold_slack[seq.seq_id] = cold_slack(seq, self._refreshed, self.speeds)
                self._keys.pop(seq.seq_id, None)
                self._promote_if_tight(seq, now, changes)

    def _promote_if_tight(self, seq: Sequence, now: float, changes: list) -> None:
        p, slack = self.policy, self.cold_slack[seq.seq_id]
        if slack < p.promote_slack_s and seq.seq_id not in self.promoted:
            self.promoted.add(seq.seq_id)
            seq.tier = WARM
            self.num_promotions += 1
            self._keys.pop(seq.seq_id, None)
            changes.append((seq.seq_id, TierChange(
                COLD, WARM, f"deadline slack {slack:.0f} s below {p.promote_slack_s:.0f} s",
                now)))

    def _demotion_step(self, now: float, changes: list) -> None:
        p = self.policy
        pressured = self._hot_refused or self._hot_min_slack < p.pressure_slack_frac
        self._hot_refused = False
        action = self.pressure.update(now, pressured, bool(self.demoted))
        if action == "demote":
            hot = [s for s in self.running + self.waiting if s.tier is HOT]
            for rid in pick_demotions(hot, p.demote_fraction):
                self._retier(rid, HOT, WARM, now, changes,
                             f"sustained hot pressure: slack under {p.pressure_slack_frac:.0%} "
                             f"of target for {p.pressure_window_s:g} s")
                self.demoted.add(rid)
                self.num_demotions += 1
        elif action == "restore":
            for rid in sorted(self.demoted):
                self._retier(rid, WARM, HOT, now, changes, "hot pressure ended")
            self.demoted.clear()

    def _retier(self, rid: str, old: Tier, new: Tier, now: float, changes: list,
                reason: str) -> None:
        for seq in self.seqs.values():
            if seq.request_id == rid and seq.tier is old:
                seq.tier = new
                self._keys.pop(seq.seq_id, None)
                changes.append((seq.seq_id, TierChange(old, new, reason, now)))

    def _finish(self, seq, status) -> None:
        super()._finish(seq, status)
        self._keys.pop(seq.seq_id, None)
        self.hot_late.discard(seq.seq_id)
        self.promoted.discard(seq.seq_id)
        self.aged.discard(seq.seq_id)
        self.cold_slack.pop(seq.seq_id, None)
        if seq.request_id in self.demoted and not any(
                s.request_id == seq.request_id for s in self.running):
            self.demoted.discard(seq.request_id)
