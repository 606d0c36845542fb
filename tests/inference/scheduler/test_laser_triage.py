"""Hot triage (Moore-Hodgson over TTFT deadlines), the overload rule built on it, and the step
limits that keep on-time first tokens on time."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.errors import EngineOverloaded
from inference.request import ContractTargets, Tier
from inference.scheduler import LaserPolicyConfig, LinearCost
from inference.scheduler.laser.estimate import EstimateError
from inference.scheduler.laser.fill import MIN_HOT_CHUNK
from inference.scheduler.laser.triage import HotJob, late_jobs
from tests.inference.factories import make_request, make_scheduler, run_timed, step
from tests.inference.scheduler.knobs import OFF, Knobs, knobs

TRIAGE = knobs(OFF, triage_enabled=True)
COST = LinearCost(0.01, 0.001)  # 10 ms a step plus 1 ms a token


def laser(policy: Knobs, cost=COST, **config):
    config.setdefault("num_blocks", 256)
    return make_scheduler("laser", options=policy.options(cost=cost), **config)


def hot(rid: str, prompt: int, ttft: float, max_tokens: int = 1, **kw):
    return make_request(rid, prompt, max_tokens=max_tokens, salt=rid,
                        targets=ContractTargets(ttft_p99_s=ttft, **kw))


# ---- the rule on its own -------------------------------------------------------------------
job_specs = st.lists(st.tuples(st.floats(0.01, 1.0), st.floats(0.0, 3.0)), max_size=7)


def _jobs(spec):
    return [HotJob(f"j{i}", deadline, work) for i, (work, deadline) in enumerate(spec)]


def _on_time_in_edf(jobs, now=0.0):
    finish, ok = now, True
    for j in sorted(jobs, key=lambda j: (j.deadline, j.seq_id)):
        finish += j.work_s
        ok = ok and finish <= j.deadline + 1e-9
    return ok


@settings(max_examples=200, deadline=None)
@given(job_specs)
def test_kept_jobs_all_meet_their_deadlines_in_edf_order(spec):
    jobs = _jobs(spec)
    late = late_jobs(jobs, 0.0)
    assert _on_time_in_edf([j for j in jobs if j.seq_id not in late])


@settings(max_examples=150, deadline=None)
@given(job_specs)
def test_no_other_choice_keeps_more_jobs_on_time(spec):
    jobs = _jobs(spec)
    best = max((len(kept) for r in range(len(jobs) + 1)
                for kept in itertools.combinations(jobs, r) if _on_time_in_edf(kept)),
               default=0)
    assert len(jobs) - len(late_jobs(jobs, 0.0)) == best


@settings(max_examples=50, deadline=None)
@given(job_specs, st.randoms())
def test_triage_does_not_depend_on_input_order(spec, rnd):
    jobs = _jobs(spec)
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    assert late_jobs(jobs, 0.0) == late_jobs(shuffled, 0.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 1.0), st.floats(-1.0, 3.0), st.booleans()),
                max_size=8))
def test_with_demotable_jobs_the_kept_ones_still_meet_their_deadlines(spec):
    jobs = [HotJob(f"j{i}", d, w, demotable) for i, (w, d, demotable) in enumerate(spec)]
    late = late_jobs(jobs, 0.0)
    kept = [j for j in jobs if j.seq_id not in late]
    assert _on_time_in_edf(kept)
    assert all(j.seq_id in late for j in jobs if j.deadline < 0)  # due before now


def test_a_demotable_job_is_given_up_before_a_longer_one():
    jobs = [HotJob("long", 1.0, 0.6), HotJob("short", 1.0, 0.5, demotable=True)]
    assert late_jobs(jobs, 0.0) == {"short"}
    assert late_jobs([replace(j, demotable=False) for j in jobs], 0.0) == {"long"}


@pytest.mark.parametrize("budget", [0.5, 0.0])
def test_triage_demotes_a_demotable_late_request_within_its_budget(budget):
    policy = knobs(TRIAGE, demotion_enabled=True, triage_demotion_budget=budget)
    sched = laser(policy, max_num_batched_tokens=16, long_prefill_chunk=16)
    sched.add(hot("a", 32, 0.07), 0.0)
    sched.add(hot("b", 40, 0.12, demotable=True), 0.0)
    sched.add(hot("c", 16, 0.13), 0.0)
    plan = step(sched, 0.0)
    changes = [(seq_id, c.to_tier) for seq_id, c in plan.tier_changes]
    if budget:  # 0.5 x 3 admitted: one demotion allowed
        assert changes == [("b-0", Tier.WARM)] and sched.seqs["b-0"].tier is Tier.WARM
        assert sched.hot_late == set() and sched.num_demotions == 1
    else:
        assert changes == [] and sched.hot_late == {"b-0"}


def test_a_burst_gives_up_the_long_prompt_not_everyone_behind_it():
    # 16-token steps of 26 ms: A needs 2 (52 ms), B 2.5, C 1. Plain EDF serves B second
    # (C fills B's last half step) and both B and C miss; triage serves B last: only B misses.
    def first_tokens(policy):
        sched = laser(policy, max_num_batched_tokens=16, long_prefill_chunk=16)
        arrivals = [(0.0, hot("a", 32, 0.07)), (0.0, hot("b", 40, 0.12)),
                    (0.0, hot("c", 16, 0.13))]
        _, finished, _ = run_timed(sched, arrivals, COST)
        return {s.seq_id[0]: round(s.first_token_time, 3) for s in finished}

    assert first_tokens(OFF) == {"a": 0.052, "b": 0.13, "c": 0.148}
    assert first_tokens(TRIAGE) == {"a": 0.052, "c": 0.078, "b": 0.148}


# ---- overload refusal under triage ---------------------------------------------------------
def test_overload_admits_a_short_prompt_that_edf_serves_first():
    # The old rule priced the queued 200-token prompt in front of the new one: 0.225 s against
    # a 0.1 s target, refused. In deadline order the short one goes first and makes it.
    for policy, refused in ((knobs(OFF, overload_enabled=True, overload_ttft_factor=1.0),
                             True),
                            (knobs(TRIAGE, overload_enabled=True, overload_ttft_factor=1.0),
                             False)):
        sched = laser(policy, max_num_batched_tokens=64, long_prefill_chunk=64)
        sched.add(hot("long", 200, 1.0), 0.0)
        if refused:
            with pytest.raises(EngineOverloaded):
                sched.add(hot("short", 16, 0.1), 0.0)
        else:
            sched.add(hot("short", 16, 0.1), 0.0)


def test_overload_refuses_only_what_triage_serves_late_past_the_factor():
    # 100 tokens in 64-token steps: 0.1 + 100/64 x 0.01 s of work against 0.005 s, so late,
    # and as a late request it first waits for the on-time one: 8 tokens and 8/64 of a step's
    # fixed cost, 0.00925 s.
    for factor, refused in ((1.0, True), (2.0, False)):
        sched = laser(knobs(TRIAGE, overload_enabled=True, overload_ttft_factor=factor),
                      max_num_batched_tokens=64, long_prefill_chunk=64)
        sched.add(hot("a", 8, 1.0), 0.0)
        if refused:
            with pytest.raises(EngineOverloaded) as err:
                sched.add(hot("x", 100, 0.005), 0.0)
            assert err.value.retry_after_s == pytest.approx(0.00925 - 0.005, abs=1e-3)
        else:
            sched.add(hot("x", 100, 0.005), 0.0)
            assert sched.hot_late == set()  # computed at the next step
            step(sched, 0.0)
            assert sched.hot_late == {"x-0"}


def test_overload_prices_hot_prefill_at_the_chunk_the_fill_really_gives():
    # A slow machine: a step's fixed 90 ms nearly fills the 95 ms TBT cap of a running hot
    # stream, so the cap leaves hot prefill ~5 tokens a step, but the fill still gives it 32
    # (MIN_HOT_CHUNK). Priced at the cap, each 40-token prompt looked like 40 steps (3.6 s)
    # and the second of a burst was refused against 10 x 0.2 s; at 32-token steps eight
    # queue 7 x (40 ms + 1.3 x 90 ms) = 1.1 s deep: all admitted; forty are not.
    policy = knobs(TRIAGE, overload_enabled=True, overload_ttft_factor=10.0,
                     chunking_enabled=True)
    for burst, refusals in ((8, False), (40, True)):
        sched = laser(policy, cost=LinearCost(0.09, 0.001), max_num_batched_tokens=512,
                      long_prefill_chunk=512)
        sched.add(hot("s", 8, 0.2, max_tokens=100, tbt_p99_s=0.1), 0.0)
        for t in range(3):
            step(sched, 0.1 * t)
        assert sched.state.hot_step_tokens < MIN_HOT_CHUNK
        refused = 0
        for i in range(burst):
            try:
                sched.add(hot(f"b{i}", 40, 0.2, tbt_p99_s=0.1), 0.3)
            except EngineOverloaded:
                refused += 1
        assert bool(refused) == refusals, refused


@pytest.mark.parametrize("ahead", [0, 1])
def test_overload_never_refuses_a_request_for_its_own_length(ahead):
    # 1,000 tokens: 1.17 s of prefill against a 50 ms target at factor 1. Refusing it would
    # refuse every retry too (the engine measured a lone 256-token prompt on one CPU core at
    # 0.23 s, past the design's 200 ms), so only the wait in front of it may refuse it.
    sched = laser(knobs(TRIAGE, overload_enabled=True, overload_ttft_factor=1.0),
                  max_num_batched_tokens=64, long_prefill_chunk=64)
    if ahead:
        sched.add(hot("a", 8, 1.0), 0.0)  # 0.018 s of on-time work in front
    sched.add(hot("x", 1000, 0.05), 0.0)  # admitted: no EngineOverloaded
    assert "x-0" in {s.seq_id for s in step(sched, 0.0).scheduled}
    assert sched.hot_late == ({"x-0"} if ahead else set())  # triage needs two to rank


def test_overload_never_refuses_a_request_with_nothing_in_front():
    # the first request of a process waits for the engine to load before admission: 5 s
    # past a 0.2 s target at factor 10, but nothing is queued, so refusing it helps nobody
    policy = knobs(TRIAGE, overload_enabled=True, overload_ttft_factor=10.0)
    sched = laser(policy)
    sched.add(hot("first", 8, 0.2), 5.0)  # arrived at 0.0, admitted at 5.0
    assert "first-0" in {s.seq_id for s in step(sched, 5.0).scheduled}
    # the same wait with a request still owed its prefill in front: refused as before
    sched = laser(policy)
    sched.add(hot("a", 8, 0.2), 5.0)
    with pytest.raises(EngineOverloaded):
        sched.add(hot("b", 8, 0.2), 5.0)


# ---- step limits ---------------------------------------------------------------------------
@pytest.mark.parametrize(("ttft", "cold_chunk"), [(0.0505, 30), (0.015, 54)])
def test_no_chunk_makes_an_on_time_first_token_late(ttft, cold_chunk):
    # The hot prompt alone: 10 + 10 ms. Due at 50.5 ms, 30 ms are left for cold's chunk; a
    # hot request already late (15 ms) holds nothing back.
    sched = laser(OFF, max_num_batched_tokens=64, long_prefill_chunk=64)
    sched.add(make_request("c", 100, max_tokens=2, tier=Tier.COLD, deadline=1e6, salt="c"),
              0.0)
    sched.add(hot("h", 10, ttft), 0.0)
    chunks = {s.seq_id: s.num_tokens for s in step(sched, 0.0).scheduled}
    assert chunks == {"h-0": 10, "c-0": cold_chunk}


def test_only_one_hot_prompt_gets_the_minimum_chunk_past_the_tbt_cap():
    # A hot decode with a 12.5 ms TBT target leaves no room (0.8 x 12.5 = 10 ms = the base).
    sched = laser(knobs(OFF, chunking_enabled=True), max_num_batched_tokens=128,
                  long_prefill_chunk=128)
    sched.add(hot("d", 4, 1.0, max_tokens=50, tbt_p99_s=0.0125), 0.0)
    step(sched, 0.0)
    for rid in ("p", "q", "r"):
        sched.add(hot(rid, 40, 10.0), 0.0)
    prefill = [s for s in step(sched, 0.0).scheduled if s.num_tokens > 1]
    assert [(s.seq_id, s.num_tokens) for s in prefill] == [("p-0", 32)]


@pytest.mark.parametrize(("over", "chunk"), [(True, 127), (False, 79)])
def test_hot_prefill_is_not_held_to_the_warm_floor(over, chunk):
    # The warm floor's step (1 / 20 s = 50 ms) fits 80 tokens at 10 ms + 0.5 ms each.
    policy = knobs(OFF, warm_floor_enabled=True, hot_over_warm_floor=over)
    sched = laser(policy, cost=LinearCost(0.01, 0.0005), max_num_batched_tokens=128,
                  long_prefill_chunk=128)
    sched.add(make_request("w", 4, max_tokens=50, tier=Tier.WARM, salt="w"), 0.0)
    step(sched, 0.0)
    sched.add(hot("h", 200, 10.0), 0.0)
    chunks = {s.seq_id: s.num_tokens for s in step(sched, 0.0).scheduled}
    assert chunks == {"w-0": 1, "h-0": chunk}


# ---- TBT safety from measured estimate errors ----------------------------------------------
def test_safety_follows_the_worst_recent_estimate_error():
    err = EstimateError(window=3)
    assert err.safety(0.8, 0.95) == 0.8  # nothing measured yet
    for _ in range(3):
        err.expect(0.1)
        err.observe(0.1)
    assert err.safety(0.8, 0.95) == pytest.approx(0.95)
    err.expect(0.1)
    err.observe(0.11)  # 10 % over
    assert err.safety(0.8, 0.95) == pytest.approx(0.95 / 1.1)
    err.expect(0.1)
    err.observe(0.2)
    assert err.safety(0.8, 0.95) == 0.8  # never below the configured floor
    for _ in range(4):
        err.expect(0.1)
        err.observe(0.1)
    assert err.safety(0.8, 0.95) == pytest.approx(0.95)  # the bad steps left the window
    err.observe(0.5)  # a measurement without a plan estimate is ignored
    assert err.safety(0.8, 0.95) == pytest.approx(0.95)


def test_the_policy_widens_its_tbt_cap_when_steps_match_estimates():
    sched = laser(knobs(OFF, chunking_enabled=True), max_num_batched_tokens=128,
                  long_prefill_chunk=128)
    assert sched.tbt_safety() == 0.8
    sched.add(hot("d", 4, 1.0, max_tokens=50), 0.0)
    plan = sched.schedule(0.0)
    sched.observe_step(plan.num_batched_tokens, COST.step_time(plan.num_batched_tokens))
    assert sched.tbt_safety() == pytest.approx(0.95)


def test_the_tbt_margin_takes_the_time_around_the_forward_from_plan_to_tokens():
    # a forward as estimated, but planning and sampling around it took another 6 %: a
    # stream waited 1.06 estimates between tokens, so the cap leaves room for that
    sched = laser(knobs(OFF, chunking_enabled=True), max_num_batched_tokens=128,
                  long_prefill_chunk=128)
    sched.add(hot("d", 4, 1.0, max_tokens=50), 0.0)
    plan = sched.schedule(0.0)
    forward = COST.step_time(plan.num_batched_tokens)
    sched.observe_step(plan.num_batched_tokens, forward, token_s=1.06 * forward)
    assert sched.tbt_safety() == pytest.approx(0.95 / 1.06)


def test_config_rejects_a_ceiling_under_the_floor():
    with pytest.raises(ValueError, match="tbt_safety_max"):
        LaserPolicyConfig(tbt_safety=0.9, tbt_safety_max=0.85)
    with pytest.raises(ValueError, match="error_window_steps"):
        LaserPolicyConfig(error_window_steps=0)
