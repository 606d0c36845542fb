"""Layer-level decode batching (the Laser paper's second mechanism), in the simulator only.

A step carries every running stream's decode row. When the whole forward would run past the
strictest TBT cap of the hot streams decoding in it, the relaxed rows (decodes of warm,
demoted and cold sequences: any tier but hot) run only a group of the model's layers this
step: the whole depth, a half, a quarter or an eighth, the largest group whose step fits the
cap (an eighth when none does: relaxed rows still advance). A relaxed row's progress is
carried across steps, and it emits its token only in the step where it passes the last
layer; until then the scheduler does not see it advance (the sequence stays where it was and
is planned again). Hot rows and prefill chunks always run the whole depth.

Pricing, per layer: ``CostModel`` is per layer times the layer count, so layer ``j`` of the
step costs ``linear_s(tokens_j) / L`` for the tokens that run it, and a decode row's
attention reads its context's K/V once per layer it runs (``decode_attn_s`` scaled by the
layers run over ``L``). Prefill attention and the step overhead are as in ``plan_time``.

The cap is the hot rows' TBT target (``tbt_p99_s``) times the scheduler's ``tbt_safety()``
where the policy has one (``laser``), the whole target otherwise; the plan itself is the
scheduler's, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from inference.request import Tier
from inference.scheduler import LaserScheduler, Scheduler
from inference.scheduler.plan import ScheduledSeq, StepPlan
from sim.cost_model import STEP_OVERHEAD_S, CostModel

GROUPS = (1, 2, 4, 8)  # a relaxed row runs the remaining depth, then 1/2, 1/4, 1/8 of it


@dataclass(frozen=True, slots=True)
class Batched:
    """A step as run: ``plan`` less the relaxed rows still between layers, its ``seconds``,
    ``cap_s`` (None: no hot decode in it) and ``split`` (some relaxed row ran partial)."""

    plan: StepPlan
    seconds: float
    cap_s: float | None
    split: bool


class LayerBatcher:
    """Decides each step's layer group for relaxed decodes and carries their progress."""

    def __init__(self, cost: CostModel, layers: int) -> None:
        self.cost, self.layers = cost, layers
        self.progress: dict[str, tuple[int, int]] = {}  # seq id -> (token position, layers)
        self.split_steps = 0  # steps where relaxed rows ran part of the depth
        self.hot_steps = 0  # steps with a hot decode (a TBT cap)
        self.hot_over_cap = 0  # of those, steps that still ran past the cap

    def run(self, plan: StepPlan, sched: Scheduler) -> Batched:
        """Price ``plan`` with layer groups for its relaxed decodes; see the module doc."""
        for seq_id in plan.preempted:  # its activations are gone with its K/V
            self.progress.pop(seq_id, None)
        for seq_id, _ in plan.refused:
            self.progress.pop(seq_id, None)
        full, relaxed, hot_tbt = self._rows(plan, sched)
        cap = None
        if hot_tbt and plan.pause_until is None:  # a pausable forward runs whole (loop.py)
            safety = sched.tbt_safety() if isinstance(sched, LaserScheduler) else 1.0
            cap = safety * min(hot_tbt)
        group, seconds = self.layers, self._price(full, relaxed, self.layers)
        if cap is not None and relaxed and seconds > cap:
            for g in GROUPS[1:]:
                group = max(1, self.layers // g)
                seconds = self._price(full, relaxed, group)
                if seconds <= cap:
                    break
        return self._fold(plan, relaxed, group, seconds, cap)

    def _rows(self, plan: StepPlan, sched: Scheduler):
        """(whole-depth rows, [(relaxed row, layers it has done)], hot decodes' TBT targets)."""
        full, relaxed, hot_tbt = [], [], []
        for x in plan.scheduled:
            seq = sched.seqs[x.seq_id]
            if x.num_tokens != 1 or not x.sample:
                self.progress.pop(x.seq_id, None)
                full.append(x)
            elif seq.tier is Tier.HOT:
                full.append(x)
                hot_tbt.append(seq.targets.tbt_p99_s)
            else:
                relaxed.append((x, self._done(x)))
        return full, relaxed, hot_tbt

    def _done(self, x: ScheduledSeq) -> int:
        pos, done = self.progress.get(x.seq_id, (x.start, 0))
        return done if pos == x.start else 0

    def _price(self, full, relaxed, group: int) -> float:
        """Seconds for ``full`` rows at the whole depth and ``relaxed`` (row, layers done)
        running up to ``group`` more layers each."""
        cost, n = self.cost, self.layers
        if group >= n and not any(done for _, done in relaxed):  # one depth for every row
            return cost.plan_time([(x.start, x.num_tokens) for x in full]
                                  + [(x.start, 1) for x, _ in relaxed])
        base = sum(x.num_tokens for x in full)
        edges = [0] * (n + 1)  # +1 where a relaxed row's layers begin, -1 past their end
        attn = 0.0
        for x, done in relaxed:
            run = min(group, n - done)
            edges[done] += 1
            edges[done + run] -= 1
            attn += cost.decode_attn_s(x.start + 1) * run / n
        linear, rows = 0.0, 0
        for j in range(n):
            rows += edges[j]
            linear += cost.linear_s(base + rows)
        prefill = sum(cost.prefill_attn_s(x.start, x.num_tokens) for x in full
                      if x.num_tokens > 1)
        decode = cost.decode_attn_s(sum(x.start + 1 for x in full if x.num_tokens == 1))
        return STEP_OVERHEAD_S + linear / n + prefill + decode + attn

    def _fold(self, plan: StepPlan, relaxed, group: int, seconds: float,
              cap: float | None) -> Batched:
        """Carry the partial rows' progress; the plan as completed this step."""
        pending = set()
        for x, done in relaxed:
            done = min(self.layers, done + group)
            if done < self.layers:
                self.progress[x.seq_id] = (x.start, done)
                pending.add(x.seq_id)
            else:
                self.progress.pop(x.seq_id, None)
        if cap is not None:
            self.hot_steps += 1
            self.hot_over_cap += seconds > cap
        if pending:
            self.split_steps += 1
            kept = tuple(x for x in plan.scheduled if x.seq_id not in pending)
            plan = replace(plan, scheduled=kept,
                           num_batched_tokens=sum(x.num_tokens for x in kept))
        return Batched(plan, seconds, cap, bool(pending))
