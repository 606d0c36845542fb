"""Warm borrowing, cold slack and promotion, admission, overload and aging of ``laser``."""

from __future__ import annotations

import pytest

from inference.errors import AdmissionRefused, EngineOverloaded
from inference.request import ContractTargets, Tier
from inference.scheduler import LinearCost
from inference.scheduler.laser.keys import SchedClass
from tests.inference.factories import make_request, make_scheduler, step
from tests.inference.scheduler.knobs import OFF, Knobs, knobs


def laser(policy: Knobs = OFF, cost=None, **config):
    cost = cost or LinearCost(1.0, 0.0)
    return make_scheduler("laser", options=policy.options(cost=cost), **config)


def tokens_of(plan, prefix):
    return sum(s.num_tokens for s in plan.scheduled if s.seq_id.startswith(prefix))


@pytest.mark.parametrize("deadline, warm_tokens", [(1e6, 32), (30.0, 29), (5.0, 9)])
def test_warm_borrows_what_cold_does_not_need_and_gives_it_back(deadline, warm_tokens):
    # Cold needs 59 prompt tokens before its 2 decode steps: spread over 28 one-second steps
    # that is 2.1 per step (x1.5 safety = 3), over 3 steps 29.5; warm keeps its 30 % floor (9).
    policy = knobs(OFF, borrowing_enabled=True, warm_share=0.3, cold_refresh_s=0.0)
    sched = laser(policy, max_num_batched_tokens=32, long_prefill_chunk=32)
    sched.add(make_request("c", 60, max_tokens=2, tier=Tier.COLD, deadline=deadline), 0.0)
    sched.add(make_request("w", 64, max_tokens=2, tier=Tier.WARM, salt="w"), 0.0)
    plan = step(sched, 0.0)
    assert tokens_of(plan, "w") == warm_tokens


def test_without_borrowing_warm_keeps_its_static_share():
    sched = laser(knobs(OFF, warm_share=0.3), max_num_batched_tokens=32,
                  long_prefill_chunk=32)
    sched.add(make_request("w", 64, max_tokens=2, tier=Tier.WARM), 0.0)
    assert tokens_of(step(sched, 0.0), "w") == 9


def test_cold_runs_least_slack_first():
    policy = knobs(OFF, cold_slack_enabled=True, promote_slack_s=0.0, cold_refresh_s=0.0)
    sched = laser(policy, max_num_batched_tokens=16, long_prefill_chunk=16)
    # Same deadline; the longer job has less slack. Arrival order would pick "short" first.
    sched.add(make_request("short", 8, max_tokens=2, tier=Tier.COLD, deadline=500.0), 0.0)
    sched.add(make_request("long", 8, max_tokens=200, tier=Tier.COLD, deadline=500.0,
                           arrival=1.0, salt="l"), 0.0)
    assert [s.seq_id for s in step(sched, 1.0).scheduled][0] == "long-0"


def test_cold_promoted_when_slack_runs_out_and_outranks_warm():
    policy = knobs(OFF, cold_slack_enabled=True, promote_slack_s=10.0, cold_refresh_s=0.0)
    sched = laser(policy, max_num_batched_tokens=8, long_prefill_chunk=8, max_num_seqs=1)
    sched.add(make_request("w", 8, max_tokens=50, tier=Tier.WARM, salt="w"), 0.0)
    sched.add(make_request("c", 8, max_tokens=20, tier=Tier.COLD, deadline=40.0), 0.0)
    changes = []
    for t in range(15):
        changes += step(sched, float(t)).tier_changes
    (sid, change), = changes
    assert sid == "c-0" and (change.from_tier, change.to_tier) == (Tier.COLD, Tier.WARM)
    assert "slack" in change.reason and sched.num_promotions == 1
    assert sched.seqs["c-0"].status.name == "RUNNING"  # it took warm's only slot


def test_admission_refuses_cold_that_cannot_meet_its_deadline():
    sched = laser(knobs(OFF, admission_enabled=True))
    with pytest.raises(AdmissionRefused, match="deadline") as err:
        sched.add(make_request("c", 8, max_tokens=50, tier=Tier.COLD, deadline=20.0), 0.0)
    assert err.value.retry_after_s is None and not isinstance(err.value, EngineOverloaded)
    sched.add(make_request("ok", 8, max_tokens=10, tier=Tier.COLD, deadline=30.0), 0.0)


def _idle_cpu_like():
    # a CPU engine's shape: 5 ms a step, 2 ms a token, a step budget of 2,048 tokens (4.1 s)
    return laser(knobs(OFF, admission_enabled=True), cost=LinearCost(0.005, 0.002),
                 max_num_batched_tokens=2048, long_prefill_chunk=2048, num_blocks=128)


def test_admission_bounds_a_cold_job_by_the_work_queued_not_only_by_full_steps():
    # 200 tokens priced at a full step each: 820 s. Its own work with nothing else queued:
    # 207 tokens at 2 ms and 200 steps at 5 ms, 1.4 s. (Priced by full steps alone, a
    # 256-token request was refused the 300 s minimum deadline on an idle engine.)
    sched = _idle_cpu_like()
    sched.add(make_request("c", 8, max_tokens=200, tier=Tier.COLD, deadline=300.0), 0.0)
    with pytest.raises(AdmissionRefused, match="cannot meet"):
        sched.add(make_request("d", 8, max_tokens=200, tier=Tier.COLD, deadline=2.0,
                               salt="d"), 0.0)  # 1.4 s of its own and c's 207 tokens


def test_a_newcomers_tokens_must_not_push_an_admitted_job_past_its_bound():
    # a: 0.71 s of its own work for a 2 s deadline. b (due in 300 s) fits itself, but its 207
    # tokens, each a token and a step (7 ms), would add 1.45 s to a's bound.
    sched = _idle_cpu_like()
    sched.add(make_request("a", 8, max_tokens=100, tier=Tier.COLD, deadline=2.0), 0.0)
    with pytest.raises(AdmissionRefused, match="push admitted"):
        sched.add(make_request("b", 8, max_tokens=200, tier=Tier.COLD, deadline=300.0,
                               salt="b"), 0.0)
    sched.add(make_request("e", 8, max_tokens=20, tier=Tier.COLD, deadline=300.0,
                           salt="e"), 0.0)  # 27 tokens: a's bound 0.9 s


def test_admission_plans_for_the_profiles_expected_output_not_max_tokens():
    """The request's profile is what the scheduler plans from: a job expected to stop after
    10 of its 50 allowed tokens meets a deadline the 50-token worst case would not."""
    from dataclasses import replace

    sched = laser(knobs(OFF, admission_enabled=True))
    [seq] = make_request("c", 8, max_tokens=50, tier=Tier.COLD, deadline=20.0)
    seq.profile = replace(seq.profile, expected_output_tokens=10)
    assert (seq.remaining_output, seq.expected_output_left) == (50, 10)
    sched.add([seq], 0.0)


def test_admission_protects_admitted_cold_with_later_deadlines():
    sched = laser(knobs(OFF, admission_enabled=True), cost=LinearCost(1.0, 0.1),
                  max_num_seqs=1, max_num_batched_tokens=8, long_prefill_chunk=8)
    sched.add(make_request("a", 8, max_tokens=10, tier=Tier.COLD, deadline=26.0), 0.0)
    with pytest.raises(AdmissionRefused, match="push admitted"):
        sched.add(make_request("b", 8, max_tokens=10, tier=Tier.COLD, deadline=25.0,
                               salt="b"), 0.0)


def test_overloaded_hot_is_refused_fast_with_retry_after():
    sched = laser(knobs(OFF, overload_enabled=True, overload_ttft_factor=1.0),
                  cost=LinearCost(0.01, 0.01))
    hot = ContractTargets(ttft_p99_s=0.5)
    sched.add(make_request("a", 30, targets=hot), 0.0)  # an empty queue always admits
    with pytest.raises(EngineOverloaded) as err:
        sched.add(make_request("b", 30, targets=hot, salt="b"), 0.0)
    assert err.value.retry_after_s == pytest.approx(0.59 + 0.01 - 0.5)


def test_aging_serves_starved_cold_as_hot():
    def run(aging: bool):
        policy = knobs(OFF, aging_enabled=aging, aging_cold_s=5.0, cold_refresh_s=0.0)
        sched = laser(policy, max_num_batched_tokens=8, long_prefill_chunk=8)
        sched.add(make_request("c", 4, max_tokens=2, tier=Tier.COLD, deadline=1e6), 0.0)
        for t in range(20):  # a warm prompt every step fills the budget
            sched.add(make_request(f"w{t}", 8, max_tokens=1, salt=f"w{t}", arrival=t,
                                   tier=Tier.WARM), t)
            step(sched, float(t))
        return sched
    assert "c-0" in run(False).seqs  # strict priority starves it
    aged = run(True)
    assert "c-0" not in aged.seqs  # finished


def test_aged_work_runs_after_hot_on_time():
    policy = knobs(OFF, aging_enabled=True, aging_warm_s=5.0, cold_refresh_s=0.0)
    sched = laser(policy, max_num_batched_tokens=8, long_prefill_chunk=8)
    sched.add(make_request("w", 8, max_tokens=2, tier=Tier.WARM), 0.0)
    sched.add(make_request("h", 8, max_tokens=2, salt="h", arrival=10.0), 10.0)
    plan = step(sched, 10.0)  # w aged (10 s > 5 s): both class HOT, one step's budget
    assert sched.rank(sched.seqs["w-0"]) is SchedClass.HOT
    assert tokens_of(plan, "h") == 8 and tokens_of(plan, "w") == 0
