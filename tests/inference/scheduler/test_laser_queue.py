"""``WaitingIndex``, the laser policy's waiting queue kept in key order across steps: it
holds exactly the waiting sequences in the order a sort would give, and its least hot slack
is ``min_hot_slack_frac``'s, bit for bit."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from inference.request import ContractTargets, Tier
from inference.scheduler.laser.hot import HotTriage
from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.scheduler.laser.queue import WaitingIndex
from inference.scheduler.laser.slack import Speeds, min_hot_slack_frac
from inference.sequence import SequenceStatus
from sim import SimConfig, simulate
from sim.profiles import traces_dir
from sim.scenarios import multi_turn
from sim.summary import TIMING, summarize
from sim.traces import TraceRequest
from tests.inference.factories import make_request
from tests.sim.test_speedups import overload_trace, roofline


def hot_key(seq) -> SortKey:
    """The policy's key of an on-time hot request: its TTFT deadline."""
    return SortKey(SchedClass.HOT, int(not seq.in_contract), 0,
                   seq.arrival_time + seq.targets.ttft_p99_s, seq.seq_id)


def random_hot(rng: random.Random, n: int) -> list:
    seqs = []
    for i in range(n):
        target = rng.choice((0.2, 0.5, 2.0, rng.uniform(0.1, 30), math.inf))
        targets = ContractTargets(ttft_p99_s=target)
        seq = make_request(f"r{i}", prompt_len=rng.randint(1, 4000),
                           arrival=rng.uniform(0, 100), targets=targets)[0]
        seq.in_contract = rng.random() < 0.7
        if rng.random() < 0.1:
            seq.first_token_time = seq.arrival_time + 0.1  # a preempted stream
            seq.output_token_ids.extend([5] * rng.randint(1, 20))
        seqs.append(seq)
    return seqs


@pytest.mark.parametrize("seed", range(5))
def test_min_hot_slack_is_min_hot_slack_frac_bit_for_bit(seed):
    rng = random.Random(seed)
    seqs = random_hot(rng, 400)
    index = WaitingIndex.of(seqs, hot_key)
    for now in (50.0, 100.5, 300.0):
        sp = Speeds(0.01, rng.choice((0.0, 3.3e-5, 2e-3)), 0.013)
        for excess in (0, 1):
            part = [q for q in seqs if int(not q.in_contract) == excess]
            assert index.min_hot_slack(excess, now, sp) == min_hot_slack_frac(part, now, sp)
    # leaving and moving keep it exact: the longest prompts and the most urgent go first
    seqs.sort(key=lambda q: (-q.num_tokens, q.arrival_time))
    for seq in seqs[:150]:
        index.leave(seq)
    for seq in seqs[150:200]:
        index.moved(seq.seq_id)
    index.sync(hot_key)
    rest = seqs[150:]
    index.check(rest)
    sp = Speeds(0.01, 3.3e-5, 0.013)
    for excess in (0, 1):
        part = [q for q in rest if int(not q.in_contract) == excess]
        assert index.min_hot_slack(excess, 120.0, sp) == min_hot_slack_frac(part, 120.0, sp)


def test_an_empty_index_has_no_slack():
    assert WaitingIndex().min_hot_slack(0, 1.0, Speeds(0.01, 1e-4, 0.01)) == float("inf")
    assert not WaitingIndex().has_in_contract_hot()


def test_classes_are_in_key_order_after_entering_leaving_and_moving():
    rng = random.Random(3)
    seqs = [make_request(f"s{i}", arrival=rng.uniform(0, 10), tier=Tier.WARM)[0]
            for i in range(60)]
    rank = {q.seq_id: rng.randrange(4) for q in seqs}

    def key(q):  # class HOT keys as the policy's
        if not rank[q.seq_id]:
            return hot_key(q)
        return SortKey(SchedClass(rank[q.seq_id]), 0, 0, q.arrival_time, q.seq_id)

    index = WaitingIndex()
    for q in seqs[:40]:
        index.enter(q)
    index.sync(key)  # one by one
    for q in seqs[40:]:
        index.enter(q)
    for q in seqs[:10]:
        index.leave(q)
    for q in seqs[10:20]:
        rank[q.seq_id] = 3 - rank[q.seq_id]
        index.moved(q.seq_id)
    index.sync(key)  # in bulk
    index.check(seqs[10:])
    assert [q for c in index.classes for _, q in c] == sorted(seqs[10:], key=key)
    index.moved()
    rank.update({q.seq_id: 0 for q in seqs})
    index.sync(key)
    assert [q for _, q in index.classes[0]] == sorted(seqs[10:], key=key)


def check_every_step(sched) -> None:
    sched._queue.check(sched.waiting)


def test_the_policy_keeps_it_equal_to_its_waiting_queue_in_an_overload():
    run = simulate(overload_trace(), SimConfig(policy="laser"), cost=roofline(),
                   on_step=check_every_step)
    assert run.schedule_calls


@pytest.mark.skipif(not traces_dir().is_dir(), reason="shared traces absent")
def test_the_policy_keeps_it_equal_to_its_waiting_queue_multi_turn():
    run = simulate(multi_turn(1.5, 120.0, 0), SimConfig(policy="laser"),
                   on_step=check_every_step)
    assert run.schedule_calls


def scan_refuse_overdue(self, now: float):
    """``HotTriage.refuse_overdue`` as a scan of every queue each step (before the watch
    heap)."""
    factor, hooks = self.policy.overload_ttft_factor, self.hooks
    running, waiting, held = hooks.lists()
    overdue = [s for q in (running, waiting, held) for s in q
               if s.asked_tier is Tier.HOT and s.tier is Tier.WARM and s.first_token_time is None
               and now - s.arrival_time > factor * s.targets.warm_mean_ttft_s]
    refused = []
    for seq in overdue:
        if not self.contract.excess(seq):
            if seq.seq_id not in self.state.aged and seq in waiting:
                self.state.aged.add(seq.seq_id)
                hooks.moved(seq.seq_id)
            continue
        limit = factor * seq.targets.warm_mean_ttft_s
        refused.append((seq.seq_id, f"warm backlog is full: served as warm, no first "
                                    f"token within {limit:.2f} s"))
        hooks.finish(seq, SequenceStatus.FINISHED_ABORTED)
    return tuple(refused)


def test_watching_overdue_hot_refuses_as_a_scan_of_every_queue(monkeypatch):
    rng = random.Random(4)
    trace = [replace(r, in_contract=rng.random() < 0.6) for r in overload_trace(400, seed=3)]

    def report():
        out = summarize(simulate(trace, SimConfig(policy="laser"), cost=roofline()))
        for key in TIMING:
            out.pop(key)
        return out

    watched = report()
    with monkeypatch.context() as m:
        m.setattr(HotTriage, "refuse_overdue", scan_refuse_overdue)
        scanned = report()
    assert watched == scanned
    assert watched["hot"]["refused"] > 0  # the rule acted


def check_cached_keys(sched) -> None:
    """Every cached sort key is the key the sequence has now: no mark changes without
    moving the keys that read it (so a refresh need not move every key)."""
    for seq_id, key in sched._keys.items():
        seq = sched.seqs.get(seq_id)
        if seq is not None:
            assert key == sched._key(seq), seq_id


def mixed_trace(seed: int = 5) -> list[TraceRequest]:
    """Hot, warm and cold (with deadlines, some tight) past capacity for a minute: warm
    ages, cold is promoted, hot is demoted."""
    rng = random.Random(seed)
    out = []
    for i in range(1500):
        tier = rng.choice((Tier.HOT, Tier.WARM, Tier.COLD))
        deadline = rng.choice((20.0, 60.0, 600.0)) if tier is Tier.COLD else None
        out.append(TraceRequest(i * 0.04, tier, rng.randint(200, 3000), rng.randint(2, 60),
                                deadline_s=deadline, job=f"j{i % 7}" if deadline else None,
                                in_contract=rng.random() < 0.8))
    return out


def test_cached_keys_stay_fresh_every_step():
    aged: set[str] = set()

    def on_step(sched):
        check_cached_keys(sched)
        sched._queue.check(sched.waiting)
        aged.update(sched.state.aged)

    run = simulate(mixed_trace(), SimConfig(policy="laser"), cost=roofline(), on_step=on_step)
    assert run.scheduler.num_promotions and run.scheduler.num_demotions and aged


def test_nothing_is_kept_for_finished_sequences():
    run = simulate(mixed_trace(), SimConfig(policy="laser"), cost=roofline())
    sched = run.scheduler
    assert not sched.seqs and not sched.by_request and not sched.state.hot_due
    assert not len(sched._queue) and not sched.state.hot_watch
