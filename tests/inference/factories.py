"""Factories for scheduler and cache tests: plain sequences, no tensors behind the blocks."""

from __future__ import annotations

from inference.kv.block_manager import BlockManager
from inference.request import ContractTargets, EngineRequest, SamplingParams, Tier
from inference.scheduler import SchedulerConfig
from inference.sequence import Sequence, sequences_from_request
from sim.policies import make_policy

EOS = 0


def make_scheduler(policy: str = "fcfs", *, num_blocks: int = 64, block_size: int = 4,
                   prefix_caching: bool = True, options: dict | None = None, **config):
    """Any policy, the simulator's baselines too (``sim.policies``); ``options`` go to its
    constructor (``policy_config=``, ``cost=`` for laser)."""
    config.setdefault("max_num_batched_tokens", 32)
    config.setdefault("long_prefill_chunk", min(16, config["max_num_batched_tokens"]))
    config.setdefault("max_model_len", num_blocks * block_size)
    kv = BlockManager(num_blocks, block_size, prefix_caching=prefix_caching)
    return make_policy(policy, SchedulerConfig(**config), kv, **(options or {}))


def make_request(rid: str, prompt_len: int = 8, max_tokens: int = 4, *, tier=Tier.HOT,
                 n: int = 1, arrival: float = 0.0, salt: str = "t", first_token: int = 1,
                 deadline: float | None = None,
                 targets: ContractTargets | None = None) -> list[Sequence]:
    prompt = [first_token + (i % 50) for i in range(prompt_len)]
    req = EngineRequest(rid, SamplingParams(max_tokens=max_tokens, n=n), prompt_token_ids=prompt,
                        tier=tier, tenant_id=salt, arrival_time=arrival, deadline=deadline,
                        targets=targets or ContractTargets())
    return sequences_from_request(req, prompt, frozenset({EOS}))


def make_requests(count: int, **kwargs) -> list[list[Sequence]]:
    return [make_request(f"r{i}", arrival=float(i), **kwargs) for i in range(count)]


def run_to_completion(sched, token: int = 7, max_steps: int = 10_000, now: float = 0.0):
    """Step until idle, sampling ``token`` everywhere; returns (plans, finished seqs)."""
    plans, finished = [], []
    for step in range(max_steps):
        if not sched.has_work():
            return plans, finished
        plan = sched.schedule(now + step)
        sampled = {s.seq_id: token for s in plan.scheduled if s.sample}
        finished += sched.update(plan, sampled, now + step).finished
        plans.append(plan)
    raise AssertionError("scheduler did not drain")


def step(sched, now: float, token: int = 7):
    """One schedule + update at ``now``; returns the plan."""
    plan = sched.schedule(now)
    sched.update(plan, {s.seq_id: token for s in plan.scheduled if s.sample}, now)
    return plan


def run_timed(sched, arrivals, cost, token: int = 7, max_steps: int = 20_000):
    """Replay ``arrivals`` (time, seqs) with each step lasting ``cost.step_time(tokens)``.

    Returns (plans, finished, refused): refusals are the ``AdmissionRefused`` raised by add.
    """
    from inference.errors import AdmissionRefused

    pending = sorted(arrivals, key=lambda a: a[0])
    plans, finished, refused, now, i = [], [], [], 0.0, 0
    for _ in range(max_steps):
        while i < len(pending) and pending[i][0] <= now:
            try:
                sched.add(pending[i][1], now)
            except AdmissionRefused as err:
                refused.append((pending[i][1], err))
            i += 1
        if not sched.has_work():
            if i == len(pending):
                return plans, finished, refused
            now = pending[i][0]
            continue
        plan = sched.schedule(now)
        now += cost.step_time(plan.num_batched_tokens)
        sampled = {s.seq_id: token for s in plan.scheduled if s.sample}
        finished += sched.update(plan, sampled, now).finished
        plans.append(plan)
    raise AssertionError("scheduler did not drain")
