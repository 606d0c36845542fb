"""Each part of the ``laser`` policy on its own: the others switched off where they'd blur it."""

from __future__ import annotations

from inference.request import ContractTargets, Tier
from inference.scheduler import LaserPolicyConfig, LinearCost
from inference.scheduler.laser.pressure import PressureTracker, pick_demotions
from inference.scheduler.laser.reserve import HotReserve, SlidingPeak
from inference.sequence import SequenceStatus
from tests.inference.factories import make_request, make_scheduler, step
from tests.inference.scheduler.knobs import OFF, Knobs, knobs

COST = LinearCost(0.01, 0.001)


def laser(policy: Knobs = OFF, cost=COST, **config):
    return make_scheduler("laser", options=policy.options(cost=cost), **config)


def ids(plan):
    return [s.seq_id for s in plan.scheduled]


def test_sliding_peak_forgets_old_values():
    peak = SlidingPeak(10.0)
    for t, v in [(0, 5), (1, 3), (2, 4)]:
        peak.observe(t, v)
    assert peak.value == 5
    peak.observe(11, 1)
    assert peak.value == 4


def test_reserve_follows_hot_demand_and_is_capped():
    r = HotReserve(window=10, margin=0.5, max_frac=0.5)
    assert r.tokens(100) == 0 and r.blocks(100) == 0
    for t in range(200):
        r.observe(t, hot_tokens=20, hot_blocks=30 if t < 195 else 10)
    assert r.tokens(100) == 30  # mean 20 plus half
    assert r.blocks(100) == 35  # back to peak 30 (+50 %) from the 10 it holds now
    assert r.blocks(40) == 20  # capped at half the pool


def test_reserve_lends_blocks_and_hot_takes_them_back_from_borrowers_first():
    policy = knobs(OFF, reserve_enabled=True, reserve_margin=0.0, reserve_max_frac=0.5)
    sched = laser(policy, num_blocks=24, max_num_batched_tokens=64, long_prefill_chunk=64)
    sched.add(make_request("h", 24, max_tokens=2), 0.0)  # 7 blocks of 4 at its peak
    for t in range(3):
        step(sched, float(t))
    assert not sched.running and sched.reserve.blocks(24) == 7
    # c1 leaves 13 blocks free: admitted with room to spare. c2 (older, so by key order the
    # more urgent of the two) would leave 2 of hot's 7: admitted all the same, as a borrower
    cold = {"tier": Tier.COLD, "deadline": 1e6, "max_tokens": 4}
    sched.add(make_request("c1", 40, arrival=3.0, salt="c1", **cold), 3.0)
    step(sched, 3.0)
    sched.add(make_request("c2", 40, arrival=0.5, salt="c2", **cold), 4.0)
    assert "c2-0" in ids(step(sched, 4.0))
    assert sched.reserve.lent == {"c2-0"}
    assert sched.reserved_idle_blocks() == 0 and not sched.kept_out()  # nothing idles
    sched.add(make_request("h3", 24, max_tokens=2, salt="h3"), 5.0)
    plan = step(sched, 5.0)
    assert "h3-0" in ids(plan)
    assert plan.preempted == ("c2-0",)  # the borrower, though key order would pick c1
    assert "c1-0" in ids(plan) and not sched.reserve.lent
    # without the reserve hot preempts by key order: the newest cold arrival
    sched = laser(OFF, num_blocks=24, max_num_batched_tokens=64, long_prefill_chunk=64)
    sched.add(make_request("c1", 40, arrival=3.0, salt="c1", **cold), 3.0)
    step(sched, 3.0)
    sched.add(make_request("c2", 40, arrival=0.5, salt="c2", **cold), 4.0)
    step(sched, 4.0)
    sched.add(make_request("h3", 24, max_tokens=2, salt="h3"), 5.0)
    assert step(sched, 5.0).preempted == ("c1-0",)


def test_hot_preempts_cold_first_then_warm():
    sched = laser(num_blocks=9, max_num_batched_tokens=64, long_prefill_chunk=64)
    sched.add(make_request("w", 8, max_tokens=20, tier=Tier.WARM, arrival=0.0), 0.0)
    sched.add(make_request("c", 8, max_tokens=20, tier=Tier.COLD, arrival=1.0,
                           deadline=1e6), 0.0)
    step(sched, 0.0)
    assert {s.seq_id for s in sched.running} == {"w-0", "c-0"}
    sched.add(make_request("h", 16, max_tokens=2, arrival=2.0, salt="h"), 2.0)
    plan = step(sched, 2.0)
    assert plan.preempted == ("c-0",)
    assert "h-0" in ids(plan) and "w-0" in ids(plan)
    sched.add(make_request("h2", 16, max_tokens=2, arrival=3.0, salt="h2"), 3.0)
    plan = step(sched, 3.0)
    assert plan.preempted == ("w-0",)


def test_long_prefill_chunk_shrinks_under_hot_tbt():
    hot = ContractTargets(tbt_p99_s=0.03)
    for chunking, expect in ((False, 31), (True, 14 - 1)):
        sched = laser(knobs(OFF, chunking_enabled=chunking), max_num_batched_tokens=32,
                      long_prefill_chunk=32)
        sched.add(make_request("h", 4, max_tokens=50, targets=hot), 0.0)
        step(sched, 0.0)  # hot prefilled, now decoding
        sched.add(make_request("c", 100, max_tokens=2, tier=Tier.COLD, deadline=1e6), 1.0)
        plan = step(sched, 1.0)
        chunk = next(s for s in plan.scheduled if s.seq_id == "c-0")
        assert chunk.num_tokens == expect  # 0.8 * 30 ms fits 14 tokens at 1 ms + 10 ms


def test_a_demoted_hot_stream_paces_the_step_by_hots_tbt_not_warms_floor():
    # A hot request served as warm is judged by hot's terms, never by warm's floor: its
    # decodes hold a step to 0.8 * its 100 ms TBT (70 tokens at 1 ms + 10 ms), where a warm
    # stream of the same contract holds it to one token's share of 20 tok/s (40 tokens).
    targets = ContractTargets(warm_rate_tps=20.0, tbt_p99_s=0.1)
    for asked, expect in ((Tier.WARM, 40 - 1), (Tier.HOT, 70 - 1)):
        sched = laser(knobs(OFF, warm_floor_enabled=True), max_num_batched_tokens=128,
                      long_prefill_chunk=128)
        sched.add(make_request("w", 4, max_tokens=50, tier=Tier.WARM, targets=targets), 0.0)
        sched.seqs["w-0"].asked_tier = asked
        step(sched, 0.0)  # prefilled, now decoding
        sched.add(make_request("c", 200, max_tokens=2, tier=Tier.COLD, deadline=1e6), 1.0)
        plan = step(sched, 1.0)
        chunk = next(s for s in plan.scheduled if s.seq_id == "c-0")
        assert chunk.num_tokens == expect, asked


def test_prefill_chunk_shrinks_to_keep_the_warm_rate_floor():
    # 25 tok/s with a 20 % band: a token every 50 ms; 0.8 * 50 ms fits 30 tokens at 1 ms + 10 ms.
    warm = ContractTargets(warm_rate_tps=25.0, warm_band=0.2)
    for floor, expect in ((False, 31), (True, 30 - 1)):
        sched = laser(knobs(OFF, warm_floor_enabled=floor), max_num_batched_tokens=32,
                      long_prefill_chunk=32)
        sched.add(make_request("w", 4, max_tokens=50, tier=Tier.WARM, targets=warm), 0.0)
        step(sched, 0.0)  # warm prefilled, now decoding
        sched.add(make_request("c", 100, max_tokens=2, tier=Tier.COLD, deadline=1e6), 1.0)
        plan = step(sched, 1.0)
        chunk = next(s for s in plan.scheduled if s.seq_id == "c-0")
        assert chunk.num_tokens == expect


def test_cold_decodes_sit_out_while_hot_ttft_slack_is_short():
    for ttft, cold_runs in ((0.09, False), (0.5, True)):
        sched = laser(knobs(OFF, chunking_enabled=True), max_num_batched_tokens=32,
                      long_prefill_chunk=16)
        sched.add(make_request("c", 4, max_tokens=20, tier=Tier.COLD, deadline=1e6), 0.0)
        step(sched, 0.0)  # cold prefilled, now decoding
        sched.add(make_request("h", 64, max_tokens=2, targets=ContractTargets(ttft_p99_s=ttft),
                               salt="h", arrival=1.0), 1.0)
        plan = step(sched, 1.0)
        assert ("c-0" in ids(plan)) is cold_runs and "h-0" in ids(plan)
        assert sched.seqs["c-0"].status is SequenceStatus.RUNNING  # paused, not preempted


class AttentionCost(LinearCost):
    """1 ms a token plus 0.1 ms per token of cached context a prefill chunk attends to."""

    def prefill_attn_s(self, start: int, num_tokens: int) -> float:
        return 1e-4 * num_tokens * start


def test_prefill_chunk_shrinks_when_its_attention_would_break_the_tbt_cap():
    # 0.8 x 50 ms = 40 ms: 30 tokens (29 beside the hot decode) without attention; with it,
    # a chunk after 28 cached tokens costs 3.8 ms a token (7 fit the 29 ms left), and after
    # 35 cached ones 4.5 ms a token: the largest chunk that fits is 6.
    hot = ContractTargets(tbt_p99_s=0.05)
    for cost, cached, expect in ((COST, 57, 29), (AttentionCost(0.01, 0.001), 35, 6)):
        sched = laser(knobs(OFF, chunking_enabled=True), cost=cost, num_blocks=128,
                      max_num_batched_tokens=32, long_prefill_chunk=32)
        sched.add(make_request("h", 4, max_tokens=50, targets=hot), 0.0)
        sched.add(make_request("c", 100, max_tokens=2, tier=Tier.COLD, deadline=1e6,
                               salt="c"), 0.0)
        step(sched, 0.0)
        step(sched, 1.0)  # c now has cached context: its next chunk attends to it
        start = sched.seqs["c-0"].num_computed_tokens
        chunk = next(s for s in step(sched, 2.0).scheduled if s.seq_id == "c-0")
        assert start == cached and chunk.num_tokens == expect


def test_hot_prefill_goes_by_ttft_deadline_not_arrival():
    sched = laser(max_num_batched_tokens=16, long_prefill_chunk=16)
    sched.add(make_request("long", 16, max_tokens=2, arrival=0.0, salt="a",
                           targets=ContractTargets(ttft_p99_s=2.0)), 0.1)
    sched.add(make_request("short", 16, max_tokens=2, arrival=0.1, salt="b",
                           targets=ContractTargets(ttft_p99_s=0.5)), 0.1)
    assert ids(step(sched, 0.1)) == ["short-0"]


def test_non_hot_prefill_waits_while_hot_ttft_slack_is_small():
    # 63 prompt tokens at 1 ms leave 16 ms of a 90 ms TTFT target: 18 %, under the 25 % bar.
    for ttft, expect in ((0.09, ["h-0"]), (0.5, ["h-0", "c-0"])):
        sched = laser(knobs(OFF, chunking_enabled=True), max_num_batched_tokens=32,
                      long_prefill_chunk=16)
        sched.add(make_request("c", 40, max_tokens=2, tier=Tier.COLD, deadline=1e6), 0.0)
        sched.add(make_request("h", 64, max_tokens=2, targets=ContractTargets(ttft_p99_s=ttft),
                               salt="h"), 0.0)
        assert ids(step(sched, 0.0)) == expect


def test_pressure_tracker_needs_a_sustained_window():
    tr = PressureTracker(window=2.0, restore=3.0)
    assert tr.update(0.0, True, False) is None
    assert tr.update(1.0, False, False) is None  # the stretch broke
    assert tr.update(1.5, True, False) is None
    assert tr.update(3.5, True, False) == "demote"
    assert tr.update(4.0, False, True) is None
    assert tr.update(7.0, False, True) == "restore"


def test_pick_demotions_lowest_weight_first_and_only_demotable():
    def hot(rid, weight, demotable=True):
        return make_request(rid, targets=ContractTargets(priority_weight=weight,
                                                         demotable=demotable))[0]
    seqs = [hot("a", 3.0), hot("b", 1.0), hot("c", 0.5, demotable=False), hot("d", 2.0)]
    assert pick_demotions(seqs, 0.5) == ["b", "d"]
    assert pick_demotions([seqs[2]], 1.0) == []


def test_sustained_pressure_demotes_then_restores_with_reasons():
    policy = knobs(OFF, demotion_enabled=True, pressure_window_s=2.0, restore_window_s=3.0,
                     demote_fraction=0.5)
    # A 10 ms TBT target cannot hold with 20 ms steps: hot is under pressure at once.
    tight = ContractTargets(tbt_p99_s=0.01, demotable=True, priority_weight=1.0)
    heavy = ContractTargets(tbt_p99_s=0.01, demotable=True, priority_weight=5.0)
    sched = laser(policy, cost=LinearCost(0.02, 0.0))
    sched.add(make_request("light", 4, max_tokens=100, targets=tight), 0.0)
    sched.add(make_request("heavy", 4, max_tokens=100, targets=heavy), 0.0)
    changes = []
    for t in range(5):
        changes += step(sched, float(t)).tier_changes
    assert [(sid, c.from_tier, c.to_tier) for sid, c in changes] == [
        ("light-0", Tier.HOT, Tier.WARM)]
    assert "pressure" in changes[0][1].reason
    assert sched.seqs["light-0"].asked_tier is Tier.HOT
    sched.seqs["heavy-0"].targets = ContractTargets(tbt_p99_s=1.0)  # pressure ends
    later = []
    for t in range(5, 12):
        later += step(sched, float(t)).tier_changes
    assert [(sid, c.to_tier, c.reason) for sid, c in later] == [
        ("light-0", Tier.HOT, "hot pressure ended")]


def test_running_prefills_may_go_into_the_hot_block_reserve():
    # Hot held up to 20 blocks a moment ago, so 25 stay free for it; cold prompts of 40 tokens
    # (10 blocks) come in 8-token chunks, up to 8 chunks a step. New ones stop at the reserve,
    # but the ones already running must go on into it: held back as well, they held blocks
    # and waited for each other, and the engine spun through empty steps until some hot
    # request came by.
    from inference.scheduler import LinearCost
    from tests.inference.factories import run_timed

    sched = make_scheduler("laser", num_blocks=64, block_size=4, max_num_batched_tokens=64,
                           long_prefill_chunk=8,
                           options={"policy_config": LaserPolicyConfig(),
                                    "cost": LinearCost(0.01, 0.001)})
    sched.reserve.observe(0.0, 0, 20)
    sched.reserve.observe(0.0, 0, 0)
    assert sched.reserve.blocks(64) == 25
    arrivals = [(0.0, make_request(f"c{i}", 40, max_tokens=2, tier=Tier.COLD, deadline=1e6,
                                   salt=f"c{i}")) for i in range(8)]
    plans, finished, refused = run_timed(sched, arrivals, LinearCost(0.01, 0.001),
                                         max_steps=500)
    assert not refused and len(finished) == 8
    assert all(p.num_batched_tokens > 0 for p in plans)
