"""The discrete-event loop: arrivals from a trace, one scheduler step at a time.

Each step: admit what has arrived, ask the real scheduler for a plan, price the plan with the
cost model, move the clock to the step's end, and fold the "generated" tokens back through
``Scheduler.update`` at that instant. The KV cache is the real ``BlockManager`` sized from
the GPU's memory; nothing but time is simulated.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from inference.errors import AdmissionRefused
from inference.kv.block_manager import BlockManager
from inference.request import Tier
from inference.scheduler import Scheduler, make_scheduler
from inference.sim.accounting import Accounting
from inference.sim.config import SimConfig
from inference.sim.cost_model import CostModel, cost_model_for
from inference.sim.profiles import GPUS, MODELS, kv_capacity_tokens
from inference.sim.traces import TraceRequest
from inference.sim.workload import Workload

SAMPLED_TOKEN = 1  # any id outside the EOS set: a request runs to its trace's output length


@dataclass(slots=True)
class RunResult:
    config: SimConfig
    accounting: Accounting
    scheduler: Scheduler
    num_blocks: int
    sim_end_s: float  # simulated seconds until the last step ended
    steps: int
    wall_s: float  # real seconds the run took


def build_scheduler(cfg: SimConfig, cost: CostModel, prefix_caching: bool,
                    num_blocks: int | None = None) -> Scheduler:
    if num_blocks is None:
        tokens = kv_capacity_tokens(MODELS[cfg.model], GPUS[cfg.gpu])
        num_blocks = tokens // cfg.block_size
    kv = BlockManager(num_blocks, cfg.block_size, prefix_caching=prefix_caching)
    options = ({"cost": cost, "policy_config": cfg.laser, "ablations": cfg.ablations}
               if cfg.policy == "laser" else {})
    return make_scheduler(cfg.policy, cfg.scheduler_config(), kv, **options)


def simulate(trace: list[TraceRequest], cfg: SimConfig, *, cost: CostModel | None = None,
             num_blocks: int | None = None,
             on_step: Callable[[Scheduler], None] | None = None) -> RunResult:
    """Replay ``trace`` (sorted by arrival) through ``cfg.policy``; see ``summary.summarize``.

    ``cost`` replaces the calibrated model (anything with ``plan_time`` and ``step_time``),
    ``num_blocks`` the KV capacity derived from the GPU's memory; ``on_step`` sees the
    scheduler after every step (tests check invariants with it).
    """
    t0 = time.perf_counter()
    cost = cost or cost_model_for(cfg.gpu, cfg.model)
    prefix = any(r.prefix_blocks for r in trace)
    sched = build_scheduler(cfg, cost, prefix, num_blocks)
    run = _Run(trace, cfg, cost, sched, on_step)
    run.loop()
    return RunResult(cfg, run.acc, sched, sched.kv.num_blocks, run.now, run.steps,
                     time.perf_counter() - t0)


class _Run:
    def __init__(self, trace, cfg: SimConfig, cost: CostModel, sched: Scheduler,
                 on_step: Callable[[Scheduler], None] | None) -> None:
        self.trace, self.cfg, self.cost, self.s = trace, cfg, cost, sched
        self.on_step = on_step
        self.work = Workload(cfg.contracts, cost, cfg.long_prefill_chunk, cfg.block_size)
        self.acc = Accounting()
        self.max_len = MODELS[cfg.model].max_context
        self.now, self.steps, self.next = 0.0, 0, 0

    def loop(self) -> None:
        trace, s, n = self.trace, self.s, len(self.trace)
        end = (trace[-1].arrival_s if trace else 0.0) + self.cfg.drain_s
        while True:
            while self.next < n and trace[self.next].arrival_s <= self.now:
                self._arrive(self.next, trace[self.next])
                self.next += 1
            if not s.has_work():
                if self.next == n:
                    break
                self.now = trace[self.next].arrival_s
                continue
            if self.now > end:
                break
            self._step()
        for seq_id in list(self.acc.live):
            self.acc.finished(s.seqs[seq_id], None)

    def _arrive(self, index: int, req: TraceRequest) -> None:
        if req.prompt_tokens + req.output_tokens > self.max_len:
            self.acc.too_long[req.tier] += 1
            return
        seq = self.work.sequence(index, req)
        job = req.job if req.tier is Tier.COLD else None
        try:
            self.s.add([seq], self.now)
        except AdmissionRefused as err:
            self.acc.refused(seq, job, err.reason)
            return
        self.acc.admitted(seq, job)

    def _step(self) -> None:
        s, acc = self.s, self.acc
        plan = s.schedule(self.now)
        for seq_id, change in plan.tier_changes:
            if change.from_tier is Tier.HOT:
                acc.demoted(seq_id, change.at)
            elif change.from_tier is Tier.COLD:
                acc.promotions += 1
        for seq_id, reason in plan.refused:  # demoted, then past warm's bound
            acc.refused_live(seq_id, self.now, reason)
        if plan.is_empty:  # the policy holds everything back: wait for time or an arrival
            nxt = self.trace[self.next].arrival_s if self.next < len(self.trace) else math.inf
            self.now = min(self.now + self.cfg.idle_tick_s, nxt)
            return
        dt = self.cost.plan_time([(x.start, x.num_tokens) for x in plan.scheduled])
        self.now += dt
        self.steps += 1
        sampled = {x.seq_id: SAMPLED_TOKEN for x in plan.scheduled if x.sample}
        finished = s.update(plan, sampled, self.now).finished
        s.observe_step(plan.num_batched_tokens, dt)
        for seq_id in sampled:
            acc.token(seq_id, self.now)
        for seq in finished:
            acc.finished(seq, self.now)
        acc.kv_sample(dt, self._unused_slots(), s.kept_out())
        if self.on_step is not None:
            self.on_step(s)

    def _unused_slots(self) -> int:
        """Allocated slots not holding a token, plus free slots the policy keeps idle."""
        kv, s = self.s.kv, self.s
        allocated = (kv.num_blocks - kv.num_free_blocks) * kv.block_size
        holding = sum(q.num_computed_tokens for q in s.running)
        return max(0, allocated - holding) + s.reserved_idle_blocks() * kv.block_size
