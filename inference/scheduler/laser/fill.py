"""Filling one step of the ``laser`` policy: who runs, how many tokens, who is preempted.

The fill reads a ``FillView`` (queues, sort keys, estimates and the policy's numbers, built
by the policy for the step) and changes none of the policy's state: it returns a
``FillResult`` whose decisions (sequences started, sequences preempted, "finish the paused
forward") the policy applies. Its one side effect is on the KV block manager, through the
view's ``try_schedule``/``release_unscheduled``/``free_blocks``: whether a chunk fits depends
on the blocks the chunks before it took and the victims before it freed.
"""

from __future__ import annotations

import math
from bisect import bisect_left

from inference.request import Tier
from inference.scheduler.cost import largest_fitting, max_tokens_within
from inference.scheduler.laser.fillview import Chunk, FillMode, FillResult, FillView
from inference.scheduler.laser.keys import CLASSES, SchedClass, SortKey
from inference.scheduler.laser.preempt import Preemption
from inference.scheduler.laser.queue import WaitingIndex
from inference.scheduler.laser.share import protected
from inference.scheduler.laser.slack import (
    hot_slack_frac,
    min_hot_slack_frac,
)
from inference.scheduler.laser.tally import StepTally
from inference.sequence import Sequence

MIN_HOT_CHUNK = 32  # hot prefill always advances, even when the TBT cap is spent (one chunk:
# a floor for every waiting hot prompt would add up past the cap in a burst)
HOT = Tier.HOT
C_HOT, C_PROMOTED, C_WARM, C_COLD = CLASSES
Keyed = tuple[SortKey, Sequence]


class StepFill(StepTally):
    """One step's fill in a ``FillMode`` (see ``LaserScheduler._fill``): its tallies are
    ``StepTally``'s; ``pre``, the step's ``Preemption``, hands its victims back to them."""

    def __init__(self, view: FillView, mode: FillMode = FillMode.ALL) -> None:
        super().__init__(view.cost, view.kv.block_size)
        self.v = view
        self.keyed = sorted((view.key(q), q) for q in view.running)
        self.pre = Preemption([q for _, q in self.keyed], view.key, view.kv, view.lent,
                              self._give_back)  # least urgent at the end
        self.n_running = len(view.running)
        self._spent: set[SchedClass] = set()  # classes whose allowance is used up
        self.now, self.mode = view.now, mode
        self.rules = view.rules
        self.budget = view.config.max_num_batched_tokens
        self.started: list[Sequence] = []
        self.finish_paused = False
        self.hot_min_slack = math.inf
        self.context = 0
        self._admit_closed = False
        self.cap_s: float | None = None  # step time the TBT / warm-floor caps allow
        self.hot_cap_s: float | None = None  # the same for hot's own chunks
        self.finish_by: float | None = None  # earliest on-time first-token deadline taken
        self.hot_floor = MIN_HOT_CHUNK  # until the step holds a hot prefill chunk

    # ---- the step -------------------------------------------------------------------------
    def run(self) -> FillResult:
        self._run()
        return FillResult(
            self.mode, tuple(g for g, _ in self.items.values()), tuple(self.started),
            tuple(self.pre.preempted), self.finish_paused, self.pre.still_lent(self.v.running),
            tuple(self.used_by_class),
            self.hot_blocks, self.hot_min_slack, self.hot_cap, self.context,
            self.estimate_s() if self.used else 0.0)

    def _run(self) -> None:
        v = self.v
        keyed = self.keyed
        queue = v.queue if v.queue is not None else WaitingIndex.of(v.waiting, v.key)
        classes: tuple[SchedClass, ...] = CLASSES
        if self.mode is FillMode.HOT:  # class HOT only
            keyed = [(k, q) for k, q in keyed if k.cls is C_HOT]
            classes = (C_HOT,)
        self.context = sum(q.num_computed_tokens for _, q in keyed)
        decodes = [(k, q) for k, q in keyed if not q.is_prefilling]
        prefills = [(k, q) for k, q in keyed if q.is_prefilling]
        decodes = self._limits(decodes, prefills, queue if C_HOT in classes else None)
        for k, q in decodes:
            self._run_one(k, q, 1)
        plain = queue.plain
        for group, waiting in self._by_class(prefills, queue, classes):
            if not self._walk(group, waiting, plain):
                return

    def _walk(self, prefills: list[Keyed], waiting: list[Keyed], plain: bool = False) -> bool:
        """Prefill chunks for one class's running prefills and waiting sequences (each a
        list of (key, sequence) in key order), merged in key order; False once the step's
        budget is used up.

        ``idle`` holds the (excess, start) of waiting sequences that got nothing since the
        fill last changed: another waiting one with the same pair gets nothing either
        (``_prefill`` reads nothing else of a waiting sequence before it acts), so a long
        queue behind a spent allowance is passed over without asking again. When ``plain``
        (no waiting sequence has computed tokens, so each one's pair is (excess, 0)) and no
        running prefill is left, the walk ends as soon as every pair still to come is idle,
        and skips to the excess ones when only the in-contract pair is: the rest would all be
        passed over (the excess part of the key only grows, up to the last one's)."""
        idle: set[tuple[int, int]] = set()
        r, nr, i, nw = 0, len(prefills), 0, len(waiting)
        last = waiting[-1][0].excess if waiting else 0  # the largest excess still to come
        while r < nr or i < nw:
            if r < nr and (i >= nw or prefills[r][0] < waiting[i][0]):
                (k, q), is_waiting = prefills[r], False
                r += 1
            else:
                (k, q), is_waiting = waiting[i], True
                i += 1
            if self.used >= self.budget:
                return False
            if k.cls in self._spent:  # the class's allowance ran out earlier this step
                break
            if is_waiting:
                mark = (k.excess, q.num_computed_tokens)
                if mark in idle:
                    if plain and r >= nr:
                        if k.excess or (1, 0) in idle or not last:
                            return True
                        i = bisect_left(waiting, ((k.cls, 1),), i)  # on to the excess
                    continue
                if self._prefill(k, q, True):
                    idle.clear()
                else:
                    idle.add(mark)
            elif q.seq_id not in self.pre.gone and self._prefill(k, q, False):
                idle.clear()
        return True

    def _by_class(self, prefills: list[Keyed], queue: WaitingIndex,
                  classes: tuple[SchedClass, ...]):
        """Each class's running prefills (sorted here) and waiting sequences (kept sorted by
        the queue), one class at a time; a class whose allowance is already spent is
        skipped (long cold queues)."""
        groups: list[list[Keyed]] = [[], [], [], []]
        for k, q in prefills:
            groups[k.cls].append((k, q))
        seats = self.v.config.max_num_seqs
        for cls in classes:
            group, waiting = groups[cls], queue.classes[cls]
            if not (group or waiting) or cls in self._spent or self._allowance(cls) <= 0:
                continue
            if cls > C_PROMOTED and not group and (self._admit_closed
                                                  or self.n_running >= seats):
                continue  # only waiting requests that could not be admitted
            group.sort()  # keys end with the sequence id: unique, so tuples sort on them alone
            yield group, waiting

    def _limits(self, decodes: list[Keyed], prefills: list[Keyed],
                queue: WaitingIndex | None) -> list[Keyed]:
        """The step's caps: TBT cap (hot TBT, warm floor), TTFT deferral, reserve, warm cap.

        Returns the decodes to run: while an in-contract hot request's TTFT slack is short,
        cold decodes (which have slack, or they would be promoted) sit the step out, so that
        their context does not eat the time the TBT cap leaves for hot prefill. While any
        in-contract hot prompt waits or prefills, every tenant's excess work (decodes and
        prefill, any class) sits the step out: it would lengthen the steps that bring the
        in-contract first tokens. (Excess hot prompts' own slack defers nothing.)
        """
        rules, v, sp = self.rules, self.v, self.v.speeds
        # where forwards pause, a step may come some time after the streams' last tokens (a
        # paused forward resumed in between): the gap is that wait plus this step, so the cap
        # is what is left of it (whole steps follow each other: the wait is 0 there)
        def wait(q: Sequence) -> float:
            return (self.now - q.last_token_time
                    if v.pausing and q.last_token_time is not None else 0.0)

        hot_tbt = [(q.targets.tbt_p99_s, wait(q)) for k, q in decodes if k.cls is C_HOT]
        for k, q in decodes:
            if k.cls is C_HOT:
                self.hot_min_slack = min(self.hot_min_slack, hot_slack_frac(q, self.now, sp))
        prompts = [w for w in prefills if w[0].cls is C_HOT]  # and the queue's class HOT
        # an in-contract hot prompt waits or prefills
        self.contract_first = any(not k.excess for k, _ in prompts) or bool(
            queue and queue.has_in_contract_hot())
        ttft_min = min_hot_slack_frac((q for k, q in prompts if not k.excess), self.now, sp)
        excess_min = min_hot_slack_frac((q for k, q in prompts if k.excess), self.now, sp)
        if queue is not None:
            ttft_min = min(ttft_min, queue.min_hot_slack(0, self.now, sp))
            excess_min = min(excess_min, queue.min_hot_slack(1, self.now, sp))
        self.hot_min_slack = min(self.hot_min_slack, ttft_min, excess_min)
        self.defer = rules.defers(ttft_min)
        if self.defer:
            paused = [q for k, q in decodes if k.cls is C_COLD]
            self.context -= sum(q.num_computed_tokens for q in paused)
            decodes = [(k, q) for k, q in decodes if k.cls is not C_COLD]
        if self.contract_first:
            paused = [q for k, q in decodes if k.excess]
            self.context -= sum(q.num_computed_tokens for q in paused)
            decodes = [(k, q) for k, q in decodes if not k.excess]
        safety = v.tbt_safety
        hot_caps = rules.hot_caps(safety, hot_tbt)
        kept_tbt = [safety * q.targets.tbt_p99_s - wait(q) for k, q in decodes
                    if protected(k, q)]
        if kept_tbt:  # the others take turns under hot's TBT cap
            kept = rules.share(decodes, kept_tbt, v.cost)
            self.context -= sum(q.num_computed_tokens for _, q in decodes) - sum(
                q.num_computed_tokens for _, q in kept)
            decodes = kept
        warm = rules.warm_floor(decodes, safety)  # class WARM's pace (FillRules)
        self.hot_cap_s = rules.hot_cap_s(hot_caps, warm)
        # a step that may pause (none of hot's streams decodes in it): short enough layers
        # that a hot arrival soon gets its turn
        pause = [v.pause_cap_s] if v.pause_cap_s is not None and not hot_tbt else []
        self.cap_s = min(hot_caps + warm + pause, default=None)
        self.hot_cap = self._tokens_within(self.hot_cap_s, len(decodes))
        self.cap = (self.hot_cap if self.cap_s == self.hot_cap_s
                    else self._tokens_within(self.cap_s, len(decodes)))
        if not decodes:  # only the pause cap binds: a step it leaves empty would idle the
            # machine until hot's window lapsed (a slow CPU's fixed step cost above it)
            self.cap = max(self.cap, MIN_HOT_CHUNK)
        self.hold_tokens, self.hold_blocks = v.hold_tokens, v.hold_blocks
        self.warm_cap = rules.warm_cap(self.budget, self.hold_tokens, v.cold_need)
        return decodes

    def _tokens_within(self, seconds: float | None, rows: int) -> int:
        """Most tokens a step of ``rows`` decodes and prompt chunks after them may hold and
        take ``seconds``; at least the decodes."""
        if seconds is None:
            return self.budget
        return max(rows, max_tokens_within(self.v.cost, seconds, self.context, self.budget,
                                           rows))

    def _allowance(self, cls: SchedClass) -> int:
        left = self.budget - self.used
        if cls is C_HOT:
            return min(left, max(self.hot_cap - self.used, self.hot_floor))
        if self.defer:
            return 0
        n = min(left - max(0, self.hold_tokens - self.used_by_class[C_HOT]),
                self.cap - self.used)
        if cls is C_WARM:
            n = min(n, self.warm_cap - self.used_by_class[C_WARM])
        return n

    def _prefill(self, key: SortKey, seq: Sequence, is_waiting: bool) -> bool:
        """Give ``seq`` a prefill chunk if the step has room; False when the fill is left
        as it was (nothing for it), True when something may have changed."""
        cls = key.cls
        v = self.v
        if key.excess and self.contract_first:
            return False  # excess waits while in-contract hot prompts are served (_limits)
        if is_waiting and cls > C_PROMOTED and (self._admit_closed
                                       or self.n_running >= v.config.max_num_seqs):
            return False  # cheap exit: _admit would refuse it (matters with a long queue)
        n = self._allowance(cls)
        if n <= 0:
            self._spent.add(cls)  # allowances only shrink as the step fills (until a preemption)
            return True
        n = self._fit_attention(seq, n, hot=cls is C_HOT)
        if n <= 0:
            return False
        if is_waiting:
            # a cold/warm prompt admitted into the hot block reserve borrows it: hot short of
            # blocks preempts it first (``Preemption.below``). Kept out instead, the reserve's
            # blocks idled while nobody was denied them
            borrows = (cls is not C_HOT and self.hold_blocks
                       and v.kv.num_free_blocks - v.kv.blocks_needed(seq, n) < self.hold_blocks)
            if self._admit(key, seq, n) and borrows:
                self.pre.lend(seq.seq_id)
        else:
            self._run_one(key, seq, n)
        return True

    def _fit_attention(self, seq: Sequence, n: int, hot: bool) -> int:
        """Largest prefill chunk up to ``n`` whose step, with its chunks' attention (quadratic
        in the chunk, linear in cached context; estimators that price it expose
        ``prefill_attn_s``), still fits the time cap and ends before the TTFT deadline of any
        hot request this step already gives its first token (no chunk makes an on-time first
        token late). The step's first hot chunk keeps at least ``MIN_HOT_CHUNK``, and so
        does the first chunk of a step still empty; others may get 0."""
        limit = self.hot_cap_s if hot else self.cap_s
        if self.finish_by is not None:
            by = self.finish_by - self.now
            limit = by if limit is None else min(limit, by)
        if limit is None:
            return n
        floor = min(n, self.hot_floor if hot else 0 if self.used else MIN_HOT_CHUNK)
        if self._step_s(seq, n) <= limit:
            return n
        if floor and self._step_s(seq, floor) > limit:
            return floor
        # floor fits (or is 0), n does not; the step time grows with the chunk. _step_s
        # inlined, the same sums in the same order: this runs a dozen times per prefill
        step_time, used, ctx, attn_s = self.v.cost.step_time, self.used, self.context, self.attn_s
        attn, start, prompt = self._attn, seq.num_computed_tokens, self.prompt

        def fits(m: int) -> bool:
            if m > 1:
                t = step_time(used + m, ctx, prompt + m) + attn_s
                if attn is not None:
                    t += attn(start, m)
            else:
                t = step_time(used + m, ctx, prompt) + attn_s
            return t <= limit
        return largest_fitting(floor, n, fits)

    def estimate_s(self) -> float:
        """Estimated seconds of the step as filled so far."""
        return self.v.cost.step_time(self.used, self.context, self.prompt) + self.attn_s

    def _step_s(self, seq: Sequence, n: int) -> float:
        """Estimated seconds of this step with ``n`` more prompt tokens of ``seq`` (one token
        is a decode row's work: the last of a prompt)."""
        chunk = n if n > 1 else 0
        t = self.v.cost.step_time(self.used + n, self.context, self.prompt + chunk) + self.attn_s
        if self._attn is not None and chunk:
            t += self._attn(seq.num_computed_tokens, n)
        return t

    def _admit(self, key: SortKey, seq: Sequence, n: int) -> bool:
        """Start a waiting sequence with a chunk of ``n``; False if it could not start."""
        v, cls = self.v, key.cls
        if self._admit_closed and cls > C_PROMOTED:
            return False
        while self.n_running >= v.config.max_num_seqs:
            if cls > C_PROMOTED or not self.pre.below(key):
                return False
        got = v.try_schedule(seq, n)
        while got is None and cls <= C_PROMOTED and self.pre.below(key):
            got = v.try_schedule(seq, n)
        if got is None:
            self.finish_paused |= cls is C_HOT and v.has_held
            v.release_unscheduled(seq)
            self._admit_closed = True
            return False
        self.started.append(seq)
        self.n_running += 1
        self._take(seq, got, cls)
        return True

    def _run_one(self, key: SortKey, seq: Sequence, n: int) -> None:
        v = self.v
        if seq.seq_id in self.pre.gone:
            return
        got = v.try_schedule(seq, n)
        while got is None and self.pre.below(key):
            got = v.try_schedule(seq, n)
        if got is None:
            if key.cls is C_HOT and v.has_held:  # the paused forward's blocks: wait for it
                self.finish_paused = True
                return
            self.pre.preempt(seq)
            return
        self._take(seq, got, key.cls)

    # ---- bookkeeping ----------------------------------------------------------------------
    def _take(self, seq: Sequence, got: Chunk, cls: SchedClass) -> None:
        self._add(seq, got, cls)
        if cls is C_HOT and got[0].num_tokens > 1:
            self.hot_floor = 0
        if got[0].sample and seq.first_token_time is None and seq.tier is HOT:
            deadline = seq.arrival_time + seq.targets.ttft_p99_s
            end = self.now + self.estimate_s()
            if end <= deadline and (self.finish_by is None or deadline < self.finish_by):
                self.finish_by = deadline  # later chunks must not make this one late

    def _give_back(self, seq: Sequence) -> None:
        """A victim of ``pre`` (its blocks not freed yet): its chunk leaves the tallies, its
        seat frees up, and every class may ask again."""
        self._drop(seq)
        self.n_running -= 1
        self._spent.clear()
