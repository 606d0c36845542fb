"""The ``laser`` policy under layer pause: running hot streams share each step with the rest,
a step without hot work is pausable, held sequences sit out every plan until released."""

from __future__ import annotations

import math

import pytest

from inference.request import ContractTargets, Tier
from inference.scheduler import LinearCost
from tests.inference.factories import make_request, make_scheduler, step
from tests.inference.scheduler.knobs import OFF, Knobs, knobs

COST = LinearCost(0.01, 0.001)
HOT = ContractTargets(ttft_p99_s=1.0, tbt_p99_s=0.5)
PAUSE = knobs(OFF, layer_pause_enabled=True)  # the other parts off


def laser(layer_pause: int = 30, policy: Knobs = PAUSE, num_blocks: int = 128):
    """``layer_pause``: the layers the executor can stop between (0: none)."""
    return make_scheduler("laser", options=policy.options(cost=COST, pause_layers=layer_pause),
                          num_blocks=num_blocks, max_num_batched_tokens=64,
                          long_prefill_chunk=64)


def tiers(sched, plan) -> set[Tier]:
    return {sched.seqs[s.seq_id].tier for s in plan.scheduled}


def hot_decoding(sched):
    """A hot stream past its prefill, last token at t=1.0."""
    sched.add(make_request("h", 8, max_tokens=50, targets=HOT), 0.0)
    step(sched, 1.0)
    assert not sched.seqs["h-0"].is_prefilling
    sched.add(make_request("c", 8, max_tokens=50, tier=Tier.COLD, deadline=1e6), 1.0)


def cold_running(sched, at: float = 0.0):
    """A cold request alone: its step has no hot work."""
    sched.add(make_request("c", 8, max_tokens=50, tier=Tier.COLD, deadline=1e6), at)
    return sched.schedule(at)


def test_running_hot_streams_share_each_step_with_the_rest_which_then_does_not_pause():
    sched = laser()
    hot_decoding(sched)
    plan = sched.schedule(1.01)  # hot's next token is not due yet: it runs with cold anyway
    assert tiers(sched, plan) == {Tier.HOT, Tier.COLD} and plan.pause_until is None


def test_a_step_without_hot_work_may_pause_until_a_running_hot_stream_falls_due():
    sched = laser()
    plan = cold_running(sched)
    assert tiers(sched, plan) == {Tier.COLD} and plan.pause_until == math.inf  # none to wait for
    sched.update(plan, {s.seq_id: 7 for s in plan.scheduled if s.sample}, 0.0)
    # a hot stream that decodes but sits out a step (here: the policy was told it is held)
    sched.add(make_request("h", 8, max_tokens=50, targets=HOT), 1.0)
    step(sched, 1.0)
    hot = sched.seqs["h-0"]
    # due when hot's TBT target (times the safety) is near, less the hot step's estimate and
    # the layer in flight then (at most pause_layer_frac of the target)
    frac = sched.tbt_safety() - sched.policy.pause_layer_frac
    due = hot.last_token_time + frac * 0.5 - COST.step_time(1, 9)
    assert sched.pause_due_at() == pytest.approx(due)


def test_held_sequences_sit_out_every_plan_until_released():
    sched = laser()
    plan = cold_running(sched)
    cold = [s.seq_id for s in plan.scheduled]
    sched.hold(cold)
    assert [s.seq_id for s in sched.held] == cold and sched.has_work()
    assert all(s.seq_id not in cold for s in sched.running)
    assert sched.schedule(0.01).is_empty  # nothing but the held ones
    # while held, only hot work is planned
    sched.add(make_request("h", 8, max_tokens=50, targets=HOT), 0.02)
    assert tiers(sched, sched.schedule(0.02)) == {Tier.HOT}
    sched.abort("h")
    assert sched.schedule(0.03).is_empty
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
    for sched in (laser(layer_pause=0), laser(policy=OFF)):
        hot_decoding(sched)
        plan = sched.schedule(1.01)
        assert tiers(sched, plan) == {Tier.HOT, Tier.COLD} and plan.pause_until is None
        assert sched.pause_due_at() == math.inf


def test_hot_that_needs_the_held_blocks_asks_for_the_release_then_preempts():
    sched = laser(num_blocks=8)  # blocks of 4 tokens
    sched.add(make_request("c", 24, max_tokens=50, tier=Tier.COLD, deadline=1e6), 0.0)
    cold = sched.schedule(0.0)  # the cold prompt takes 6 of the 8 blocks
    sched.hold(s.seq_id for s in cold.scheduled)
    sched.add(make_request("h", 12, max_tokens=4, targets=HOT, first_token=60), 0.01)
    plan = sched.schedule(0.01)
    assert plan.is_empty and plan.finish_paused  # 3 blocks needed, 2 free, none to preempt
    assert [s.seq_id for s in sched.held] == ["c-0"]  # the held one is never preempted
    sched.release()  # the paused forward completed: its token is folded back as usual
    sched.update(cold, {"c-0": 7}, 0.02)
    plan = sched.schedule(0.02)
    assert tiers(sched, plan) == {Tier.HOT} and not plan.finish_paused
    assert plan.preempted == ("c-0",)


def test_pausable_steps_keep_their_layers_short_while_hot_traffic_is_seen():
    # one layer may take 0.1 of the hot TBT target (0.5 s); one layer: a step of 0.05 s, 40
    # tokens at 0.01 + 0.001 per token (without the cap: the budget's 64)
    sched = laser(layer_pause=1)
    sched.add(make_request("h", 8, max_tokens=1, targets=HOT), 0.0)
    step(sched, 0.0)  # a hot turn, answered
    assert not sched.has_work()
    sched.add(make_request("long", 100, max_tokens=2, tier=Tier.COLD, deadline=1e6), 1.0)
    plan = sched.schedule(1.01)
    assert tiers(sched, plan) == {Tier.COLD} and plan.pause_until == math.inf
    assert plan.num_batched_tokens <= 40 and COST.step_time(plan.num_batched_tokens) <= 0.05
    assert sched.pause_step_cap_s(1.01) == pytest.approx(0.1 * 0.5)
    # long after the last hot turn the cap is off
    assert sched.pause_step_cap_s(1.0 + 10 * sched.policy.reserve_window_s) is None


@pytest.mark.parametrize("pause_layers", [30, 0])
def test_a_shared_step_after_a_wait_keeps_to_what_is_left_of_the_hot_gap(pause_layers):
    """Where forwards pause, a step can come long after a hot stream's last token (a paused
    forward resumed in between): the rows beside the hot decode are held to what is left of
    its gap, not to a whole one. Whole steps (no pause) follow each other: no wait counted."""
    sched = laser(layer_pause=pause_layers, policy=knobs(PAUSE, tbt_share_enabled=True))
    sched.add(make_request("h", 8, max_tokens=50, targets=HOT), 0.0)
    step(sched, 0.0)
    for i in range(3):
        sched.add(make_request(f"c{i}", 8, max_tokens=50, tier=Tier.COLD, deadline=1e6), 0.0)
    step(sched, 0.0)  # the cold prompts, beside the hot decode
    hot = sched.seqs["h-0"]
    assert all(not s.is_prefilling for s in sched.running)
    # 0.8 x 0.5 s of gap, 0.3885 s of it waited: 0.0115 s left, which the hot decode alone
    # (0.01 + 0.001 s) fits and no cold row more (four rows: 0.014 s, within a whole gap)
    plan = sched.schedule(hot.last_token_time + 0.3885)
    rows = [sched.seqs[s.seq_id].tier for s in plan.scheduled]
    assert rows == ([Tier.HOT] if pause_layers else [Tier.HOT] + [Tier.COLD] * 3)


def test_a_lone_prompt_advances_when_even_a_small_step_passes_the_pause_cap():
    # the pause cap (0.1 of hot's 0.5 s TBT target a layer, 2 layers: 0.1 s) below the
    # machine's fixed step cost (0.2 s, a slow CPU): the step must not come out empty
    slow = LinearCost(0.2, 0.001)
    sched = make_scheduler("laser", options=PAUSE.options(cost=slow, pause_layers=2),
                           num_blocks=128, max_num_batched_tokens=64, long_prefill_chunk=64)
    sched.add(make_request("h", 8, max_tokens=1, targets=HOT), 0.0)
    step(sched, 0.0)  # hot seen (the cap holds for the reserve window), and done
    assert "h-0" not in sched.seqs
    plan = cold_running(sched, at=1.0)
    assert tiers(sched, plan) == {Tier.COLD} and plan.num_batched_tokens > 0
