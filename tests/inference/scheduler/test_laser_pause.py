"""The ``laser`` policy under layer pause: hot work and the rest in separate steps, the rest's
steps pausable, held sequences out of every plan until released."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from inference.request import ContractTargets, Tier
from inference.scheduler import LaserPolicyConfig, LinearCost
from tests.inference.factories import make_request, make_scheduler, step

COST = LinearCost(0.01, 0.001)
HOT = ContractTargets(ttft_p99_s=1.0, tbt_p99_s=0.5)
PAUSE = replace(LaserPolicyConfig.none(), layer_pause_enabled=True)  # the other parts off


def laser(layer_pause: bool = True, policy: LaserPolicyConfig | None = None):
    sched = make_scheduler("laser", options={"policy_config": policy or PAUSE,
                                             "cost": COST},
                           num_blocks=128, max_num_batched_tokens=64, long_prefill_chunk=64)
    sched.layer_pause = layer_pause
    return sched


def tiers(sched, plan) -> set[Tier]:
    return {sched.seqs[s.seq_id].tier for s in plan.scheduled}


def hot_decoding(sched):
    """A hot stream past its prefill, last token at t=1.0."""
    sched.add(make_request("h", 8, max_tokens=50, targets=HOT), 0.0)
    step(sched, 1.0)
    assert not sched.seqs["h-0"].is_prefilling
    sched.add(make_request("c", 8, max_tokens=50, tier=Tier.COLD, deadline=1e6), 1.0)


def test_hot_and_the_rest_run_in_separate_steps_and_only_the_rest_may_pause():
    sched = laser()
    hot_decoding(sched)
    plan = sched.schedule(1.01)  # hot's next token is not due yet: the cold step runs alone
    assert tiers(sched, plan) == {Tier.COLD} and sched.may_pause(plan)
    # due when hot's TBT target (times the safety) is near, less the hot step's estimate
    hot = sched.seqs["h-0"]
    due = hot.last_token_time + sched.tbt_safety() * 0.5 - COST.step_time(1, 9)
    assert sched.pause_due_at() == pytest.approx(due)
    sched.update(plan, {s.seq_id: 7 for s in plan.scheduled if s.sample}, 1.01)
    plan = sched.schedule(due + 0.001)  # now hot is due: its decode runs alone, not pausable
    assert tiers(sched, plan) == {Tier.HOT} and not sched.may_pause(plan)


def test_held_sequences_sit_out_every_plan_until_released():
    sched = laser()
    hot_decoding(sched)
    plan = sched.schedule(1.01)
    cold = [s.seq_id for s in plan.scheduled]
    sched.hold(cold)
    assert [s.seq_id for s in sched.held] == cold and sched.has_work()
    assert all(s.seq_id not in cold for s in sched.running)
    # while held, only hot work is planned, due or not; no hot work: an empty plan
    assert tiers(sched, sched.schedule(1.02)) == {Tier.HOT}
    sched.abort("h")
    assert sched.schedule(1.03).is_empty
    sched.release()
    assert sched.held == [] and [s.seq_id for s in sched.running] == cold


def test_a_held_sequence_that_finishes_keeps_its_blocks_until_release():
    sched = laser()
    sched.add(make_request("c", 9, max_tokens=5, tier=Tier.COLD, deadline=1e6), 0.0)
    plan = sched.schedule(0.0)
    sched.hold(s.seq_id for s in plan.scheduled)
    used = sched.kv.num_blocks - sched.kv.num_free_blocks
    assert used == 3
    sched.abort("c")
    assert sched.held == [] and not sched.has_work()
    assert sched.kv.num_blocks - sched.kv.num_free_blocks == used  # a forward may still write
    sched.release()
    assert sched.kv.num_free_blocks == sched.kv.num_blocks


def test_without_layer_pause_hot_and_cold_share_a_step():
    # the executor cannot pause, or the policy's switch is off
    for sched in (laser(layer_pause=False), laser(policy=LaserPolicyConfig.none())):
        hot_decoding(sched)
        plan = sched.schedule(1.01)
        assert tiers(sched, plan) == {Tier.HOT, Tier.COLD} and not sched.may_pause(plan)
        assert sched.pause_due_at() == math.inf
