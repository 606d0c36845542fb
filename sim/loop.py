"""The discrete-event loop: arrivals from a trace, one scheduler step at a time.

Each step: admit what has arrived, ask the real scheduler for a plan, price the plan with the
cost model, move the clock to the step's end, and fold the "generated" tokens back through
``Scheduler.update`` at that instant. The KV cache is the real ``BlockManager`` sized from
the GPU's memory; nothing but time is simulated.

With ``SimConfig.layer_pause`` the loop is also the engine's layer-pause executor
(docs/engine.md, "Layer pause"): a plan with ``pause_until`` runs layer by layer (its priced
time split evenly over the decoder layers, the cost model being per layer times the layer
count) and stops at the first layer boundary after a hot arrival or ``pause_until``; its
sequences are held, the hot steps run, and after each of them the paused forward advances
(at least one layer, unless a hot request arrived during that step) until it completes or
hot work arrives or falls due again, or to completion when a plan says ``finish_paused``.
Each resumption costs ``resume_s`` (see ``_Paused``).

With ``SimConfig.layer_decode_batching`` every plan is priced by ``layer_batching``: relaxed
decodes run part of the depth when the whole step would pass the hot TBT cap, and only the
rows that passed the last layer are folded back.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from inference.errors import AdmissionRefused
from inference.kv.block_manager import BlockManager
from inference.request import Tier
from inference.scheduler import Scheduler, layer_pausing
from inference.scheduler.plan import StepPlan
from inference.sequence import SequenceStatus
from sim.ablations import laser_options
from sim.accounting import Accounting
from sim.config import SimConfig
from sim.cost_model import MEM_EFF, STEP_OVERHEAD_S, CostModel, cost_model_for
from sim.layer_batching import LayerBatcher
from sim.policies import make_policy
from sim.profiles import GPUS, MODELS, kv_capacity_tokens
from sim.traces import TraceRequest
from sim.workload import Workload

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
    pauses: int = 0  # forwards stopped between layers (SimConfig.layer_pause)
    batcher: LayerBatcher | None = None  # SimConfig.layer_decode_batching's counters
    scheduler_s: float = 0.0  # CPU seconds (time.process_time) inside the policy's schedule()
    schedule_calls: int = 0  # its calls: steps, plus empty plans and split forwards' hot steps


def build_scheduler(cfg: SimConfig, cost: CostModel, prefix_caching: bool,
                    num_blocks: int | None = None) -> Scheduler:
    if num_blocks is None:
        tokens = kv_capacity_tokens(MODELS[cfg.model], GPUS[cfg.gpu])
        num_blocks = tokens // cfg.block_size
    kv = BlockManager(num_blocks, cfg.block_size, prefix_caching=prefix_caching)
    layers = MODELS[cfg.model].num_layers if cfg.layer_pause else 0
    options = ({"cost": cost, "policy_config": cfg.laser,
                **laser_options(cfg.ablations, layers)} if cfg.policy == "laser" else {})
    return make_policy(cfg.policy, cfg.scheduler_config(), kv, **options)


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
                     time.perf_counter() - t0, run.pauses, run.batcher, run.scheduler_s,
                     run.schedule_calls)


@dataclass(slots=True)
class _Paused:
    """A forward stopped between layers: ``done`` of ``layers`` run, ``layer_s`` each.

    Resuming costs ``resume_s``: the launch and scheduling gap of a step
    (``STEP_OVERHEAD_S``) plus writing the batch's hidden states (tokens x hidden x 2 bytes)
    out and reading them back at the achieved bandwidth (an upper bound: in the engine they
    stay where they are); the paused forward's activations
    are all that must survive, its K/V is already in the paged cache. For a 2,048-token step
    of Llama-3-8B that is 16 MiB, 23 us on an A100: the gap dominates.
    """

    plan: StepPlan
    layers: int
    done: int
    layer_s: float
    resume_s: float
    spent: float = 0.0  # seconds it has run so far, resumptions included


class _Run:
    def __init__(self, trace, cfg: SimConfig, cost: CostModel, sched: Scheduler,
                 on_step: Callable[[Scheduler], None] | None) -> None:
        self.trace, self.cfg, self.cost, self.s = trace, cfg, cost, sched
        self.pauser = layer_pausing(sched)  # the executor's side of the layer pause
        self.on_step = on_step
        self.work = Workload(cfg.contracts, cost, cfg.long_prefill_chunk, cfg.block_size)
        self.acc = Accounting()
        self.max_len = MODELS[cfg.model].max_context
        self.now, self.steps, self.next = 0.0, 0, 0
        self.scheduler_s, self.schedule_calls = 0.0, 0  # the policy's own cost (RunResult)
        self.paused: _Paused | None = None
        self.pauses = 0  # forwards stopped between layers
        self.hot_index = [i for i, r in enumerate(trace) if r.tier is Tier.HOT]
        self.batcher = (LayerBatcher(cost, MODELS[cfg.model].num_layers)
                        if cfg.layer_decode_batching else None)

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
        t0 = time.process_time()
        plan = s.schedule(self.now)
        self.scheduler_s += time.process_time() - t0
        self.schedule_calls += 1
        for seq_id, change in plan.tier_changes:
            if change.from_tier is Tier.HOT:
                acc.demoted(seq_id, change.at)
            elif change.from_tier is Tier.COLD:
                acc.promotions += 1
        for seq_id, reason in plan.refused:  # demoted, then past warm's bound
            acc.refused_live(seq_id, self.now, reason)
        paused = self.paused
        if plan.is_empty:  # the policy holds everything back: wait for time or an arrival
            if paused is None:
                nxt = self.trace[self.next].arrival_s if self.next < len(self.trace) else math.inf
                self.now = min(self.now + self.cfg.idle_tick_s, nxt)
                return
        else:
            if self.batcher is None:
                dt = self.cost.plan_time([(x.start, x.num_tokens) for x in plan.scheduled])
            else:  # a pausable plan has no hot row: it runs whole, as priced here
                batched = self.batcher.run(plan, s)
                plan, dt = (batched.plan if plan.pause_until is None else plan), batched.seconds
            if plan.pause_until is not None and paused is None:
                self._run_pausable(plan, dt)
                return
            self.now += dt
            self._complete(plan, dt)
        if paused is not None:
            arrived = self._next_hot() <= self.now  # during this step: it runs next step
            if plan.finish_paused:  # hot work waits for the blocks the forward holds
                least, due = paused.layers, math.inf
            else:
                least, due = (0 if arrived else 1), self.pauser.pause_due_at()
            if self._advance(paused, due, least):
                self.paused = None

    def _next_hot(self) -> float:
        """Arrival time of the first hot request not offered to the scheduler yet."""
        i = bisect.bisect_left(self.hot_index, self.next)
        return self.trace[self.hot_index[i]].arrival_s if i < len(self.hot_index) else math.inf

    def _run_pausable(self, plan: StepPlan, dt: float) -> None:
        """Run a pausable plan layer by layer; stopped at a boundary, its sequences are held."""
        m = MODELS[self.cfg.model]
        hidden = plan.num_batched_tokens * m.hidden * m.dtype_bytes
        resume_s = STEP_OVERHEAD_S + 2 * hidden / (GPUS[self.cfg.gpu].bandwidth * MEM_EFF)
        p = _Paused(plan, m.num_layers, 0, (dt - STEP_OVERHEAD_S) / m.num_layers, resume_s)
        self.now += STEP_OVERHEAD_S
        p.spent = STEP_OVERHEAD_S
        due = math.inf if plan.pause_until is None else plan.pause_until  # set: pausable
        if not self._advance(p, due, min_layers=1):
            self.pauser.hold(x.seq_id for x in plan.scheduled)
            self.paused = p
            self.pauses += 1

    def _advance(self, p: _Paused, due: float, min_layers: int) -> bool:
        """Run layers of ``p`` from ``now``, at least ``min_layers``, stopping at the first
        boundary where a hot request has arrived or ``due`` has passed; True (and the
        forward sampled) when it completed."""
        hot, ran = self._next_hot(), 0
        while p.done < p.layers:
            if ran >= min_layers and (hot <= self.now or self.now >= due):
                return False
            step = p.layer_s + (p.resume_s if ran == 0 and p.done else 0.0)
            p.done += 1
            ran += 1
            p.spent += step
            self.now += step
        split = p is self.paused  # its time split around hot steps: no sample for the model
        if split:
            self.pauser.release()
        self._complete(p.plan, p.spent, whole=not split)
        return True

    def _complete(self, plan: StepPlan, dt: float, whole: bool = True) -> None:
        """The plan's forward ended at ``now`` after ``dt`` seconds of running: its tokens,
        and (run ``whole``, not split around hot steps) the step time for the policy's
        estimator."""
        s, acc = self.s, self.acc
        self.steps += 1
        # a sequence the policy dropped while a paused forward held it samples nothing
        sampled = {x.seq_id: SAMPLED_TOKEN for x in plan.scheduled if x.sample
                   and (q := s.seqs.get(x.seq_id)) is not None
                   and q.status == SequenceStatus.RUNNING}
        finished = s.update(plan, sampled, self.now).finished
        if whole:
            s.observe_step(plan.num_batched_tokens, dt, plan.num_prompt_tokens)
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
