"""In-contract traffic first, and overload that demotes before it refuses (issue 23)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.errors import EngineOverloaded
from inference.request import ContractTargets, EngineRequest, SamplingParams, Tier
from inference.scheduler import LinearCost
from inference.scheduler.laser.pressure import pick_demotions
from inference.scheduler.laser.triage import HotJob, late_jobs
from inference.sequence import sequences_from_request
from tests.inference.factories import make_request, make_scheduler, step
from tests.inference.scheduler.knobs import ALL, OFF, Knobs, knobs

COST = LinearCost(0.01, 0.001)  # 10 ms a step plus 1 ms a token
TRIAGE = knobs(OFF, triage_enabled=True, overload_enabled=True, chunking_enabled=True)
RULES = knobs(TRIAGE, contract_first_enabled=True, overload_demotion_enabled=True)


def laser(policy: Knobs = RULES, **config):
    config.setdefault("num_blocks", 256)
    return make_scheduler("laser", options=policy.options(cost=COST), **config)


def hot(rid: str, prompt: int, ttft: float, *, excess: bool = False, max_tokens: int = 1,
        arrival: float = 0.0, warm_ttft: float = 2.0, **kw):
    seqs = make_request(rid, prompt, max_tokens=max_tokens, salt=rid, arrival=arrival,
                        targets=ContractTargets(ttft_p99_s=ttft, warm_mean_ttft_s=warm_ttft,
                                                **kw))
    for s in seqs:
        s.in_contract = not excess
    return seqs


def test_the_engine_request_is_in_contract_unless_marked_and_its_sequences_say_so():
    prompt = [1, 2, 3]
    req = EngineRequest("r", SamplingParams(max_tokens=2, n=2), prompt_token_ids=prompt)
    assert req.in_contract is True
    excess = replace(req, in_contract=False)
    assert [s.in_contract for s in sequences_from_request(excess, prompt)] == [False, False]


@pytest.mark.parametrize("rule, first", [(True, "b-0"), (False, "a-0")])
def test_in_contract_work_of_any_tenant_runs_before_an_earlier_due_excess(rule, first):
    policy = knobs(RULES, contract_first_enabled=rule)
    sched = laser(policy, max_num_batched_tokens=16, long_prefill_chunk=16)
    sched.add(hot("a", 12, 0.5, excess=True), 0.0)  # due first, but above its contract
    sched.add(hot("b", 12, 1.0), 0.0)
    plan = step(sched, 0.0)
    assert plan.scheduled[0].seq_id == first


def test_late_jobs_gives_up_excess_before_in_contract_work():
    jobs = [HotJob("in", 1.0, 0.6), HotJob("ex", 1.0, 0.5, excess=True)]
    assert late_jobs(jobs, 0.0) == {"ex"}
    # without the mark, Moore-Hodgson gives up the longest
    assert late_jobs([replace(j, excess=False) for j in jobs], 0.0) == {"in"}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 1.0), st.floats(0.0, 3.0), st.booleans()),
                max_size=8))
def test_excess_never_makes_in_contract_work_late(spec):
    jobs = [HotJob(f"j{i}", d, w, excess=e) for i, (w, d, e) in enumerate(spec)]
    alone = late_jobs([j for j in jobs if not j.excess], 0.0)
    assert late_jobs(jobs, 0.0) - {j.seq_id for j in jobs if j.excess} == alone


def test_pressure_demotes_excess_first_whatever_the_contract():
    seqs = [hot("a", 4, 1.0, demotable=True)[0], hot("b", 4, 1.0, excess=True)[0],
            hot("c", 4, 1.0)[0]]
    assert pick_demotions(seqs, 0.3) == ["b"]
    assert pick_demotions(seqs, 0.3, excess=lambda s: 0) == ["a"]  # contract-blind


def test_overload_serves_a_late_hot_request_as_warm_with_a_notice():
    # two 100-token prompts due at 0.12 s: only one prefill (0.11 s) fits; nothing demotable
    sched = laser(max_num_batched_tokens=128, long_prefill_chunk=128)
    sched.add(hot("a", 100, 0.12, max_tokens=3), 0.0)
    sched.add(hot("b", 100, 0.12, max_tokens=3), 0.0)
    plan = step(sched, 0.0)
    [(sid, change)] = plan.tier_changes  # one of the two (the same work: the smaller id)
    assert (sid, change.from_tier, change.to_tier) == ("a-0", Tier.HOT, Tier.WARM)
    assert "overload" in change.reason and sched.num_demotions == 1
    assert sched.seqs["a-0"].asked_tier is Tier.HOT and sched.seqs["b-0"].tier is Tier.HOT


def test_a_late_request_served_as_warm_stays_warm_when_the_pressure_ends():
    """An overload demotion is final: the calm that restores pressure demotions (after
    ``restore_window_s``) does not bring it back to hot, which would send its client a second
    notice and book its late first token as a hot miss (a live burst test saw both)."""
    policy = knobs(RULES, demotion_enabled=True, restore_window_s=1.0)
    sched = laser(policy, max_num_batched_tokens=128, long_prefill_chunk=128)
    sched.add(hot("a", 100, 0.12, max_tokens=400), 0.0)
    sched.add(hot("b", 100, 0.12, max_tokens=3), 0.0)
    changes = [c for t in range(300) for c in step(sched, 0.02 * t).tier_changes]
    assert [(sid, c.to_tier) for sid, c in changes] == [("a-0", Tier.WARM)]
    assert sched.seqs["a-0"].tier is Tier.WARM and not sched.seqs["a-0"].is_finished


def test_without_overload_demotion_the_late_one_stays_hot():
    sched = laser(knobs(RULES, overload_demotion_enabled=False), max_num_batched_tokens=128,
                  long_prefill_chunk=128)
    sched.add(hot("a", 100, 0.12, max_tokens=3), 0.0)
    sched.add(hot("b", 100, 0.12, max_tokens=3), 0.0)
    assert step(sched, 0.0).tier_changes == () and sched.hot_late == {"a-0"}


def test_a_hot_request_past_its_deadline_is_demoted_even_alone():
    sched = laser(max_num_batched_tokens=16, long_prefill_chunk=16)
    sched.add(hot("a", 64, 0.05, max_tokens=3), 0.0)
    changes = []
    for t in range(4):
        changes += step(sched, 0.03 * t).tier_changes
    assert [sid for sid, _ in changes] == ["a-0"] and changes[0][1].at > 0.05


def test_simultaneous_chats_are_demoted_not_refused_while_warm_keeps_its_bound():
    # 32 chats at once, each 40 tokens (~0.05 s of prefill), hot target 0.3 s: most cannot
    # start in time, but warm's backlog stays under 2 x 2 s: every one is admitted
    sched = laser(max_num_batched_tokens=64, long_prefill_chunk=64, max_num_seqs=64)
    for i in range(32):
        sched.add(hot(f"c{i}", 40, 0.3, max_tokens=4), 0.0)
    changes = step(sched, 0.0).tier_changes
    assert changes and all(c.to_tier is Tier.WARM for _, c in changes)


def test_refuses_only_when_warm_backlog_is_past_its_bound():
    sched = laser(max_num_batched_tokens=64, long_prefill_chunk=64, max_num_seqs=256)
    for i in range(12):  # 12 x ~0.23 s of prefill queued ahead, all admitted (bound 20 s)
        sched.add(hot(f"c{i}", 200, 0.3, max_tokens=4, warm_ttft=10.0), 0.0)
    with pytest.raises(EngineOverloaded, match="warm backlog"):  # bound 2 x 1 s
        sched.add(hot("late", 300, 0.3, warm_ttft=1.0), 0.0)  # longest: the one given up
    sched.add(hot("ok", 200, 0.3, warm_ttft=10.0), 0.0)  # served as warm instead


@pytest.mark.parametrize("contention, refused", [(1.0, True), (1.2, True), (4.0, False)])
def test_the_backlog_is_priced_at_the_machines_own_speed(contention, refused):
    # issue 41: a busy neighbour slows every step the cost model learns from; the engine
    # reports how much (``observe_contention``) and the refusal discounts it
    sched = laser(max_num_batched_tokens=64, long_prefill_chunk=64, max_num_seqs=256)
    for i in range(12):
        sched.add(hot(f"c{i}", 200, 0.3, max_tokens=4, warm_ttft=10.0), 0.0)
    sched.observe_contention(contention)
    late = hot("late", 300, 0.3, warm_ttft=1.0)
    if refused:
        with pytest.raises(EngineOverloaded, match="warm backlog"):
            sched.add(late, 0.0)
    else:
        sched.add(late, 0.0)
        assert "late-0" in sched.seqs


def test_excess_is_refused_before_in_contract_work():
    sched = laser(max_num_batched_tokens=64, long_prefill_chunk=64, max_num_seqs=256)
    for i in range(12):  # queued as warm: excess, so only excess newcomers queue behind them
        sched.add(hot(f"x{i}", 200, 0.3, excess=True, warm_ttft=10.0), 0.0)
    step(sched, 0.0)
    assert sum(sched.seqs[f"x{i}-0"].tier is Tier.WARM for i in range(12)) == 11
    with pytest.raises(EngineOverloaded):
        sched.add(hot("more", 300, 0.3, excess=True, warm_ttft=1.0, arrival=0.01), 0.01)
    sched.add(hot("mine", 300, 0.3, warm_ttft=1.0, arrival=0.01), 0.01)


def test_all_rules_on_by_default():
    assert ALL.ablations.contract_first_enabled and ALL.ablations.overload_demotion_enabled
