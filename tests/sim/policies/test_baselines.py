"""The simulator's baselines: ``priority`` and ``edf`` (the FCFS loop in another order), and
every policy's budgets and block accounting on random request sets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.errors import AdmissionRefused
from inference.request import ContractTargets, Tier
from tests.inference.factories import make_request, make_scheduler, run_to_completion, step


def test_priority_runs_hot_before_earlier_cold():
    sched = make_scheduler("priority", max_num_batched_tokens=8, long_prefill_chunk=8)
    sched.add(make_request("cold", 8, tier=Tier.COLD, arrival=0.0), 0.0)
    sched.add(make_request("hot", 8, tier=Tier.HOT, arrival=1.0), 1.0)
    plan = sched.schedule(1.0)
    assert [s.seq_id for s in plan.scheduled] == ["hot-0"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.integers(1, 6), st.integers(1, 3),
                          st.sampled_from(list(Tier))), min_size=1, max_size=12),
       st.sampled_from(["fcfs", "priority", "edf", "partitioned", "laser"]))
def test_budgets_respected_and_blocks_conserved(reqs, policy):
    sched = make_scheduler(policy, num_blocks=24, block_size=4, max_num_batched_tokens=16,
                           max_num_seqs=5, long_prefill_chunk=8, max_model_len=40)
    total = 0
    for i, (plen, mt, n, tier) in enumerate(reqs):
        try:
            sched.add(make_request(f"r{i}", plen, max_tokens=mt, n=n, tier=tier,
                                   arrival=float(i)), 0.0)
        except AdmissionRefused:
            assert policy == "partitioned"  # a request larger than its tier's pool
            continue
        total += n
    plans, finished = run_to_completion(sched)
    for p in plans:
        assert p.num_batched_tokens <= 16
        assert len({s.seq_id for s in p.scheduled}) == len(p.scheduled)
    # laser refuses demoted requests past warm's bound (the plan says which)
    assert len(finished) + sum(len(p.refused) for p in plans) == total
    assert sched.kv.num_free_blocks == sched.kv.num_blocks


def test_edf_runs_the_earliest_deadline_first():
    sched = make_scheduler("edf", max_num_batched_tokens=8, long_prefill_chunk=8)
    sched.add(make_request("late", 8, tier=Tier.COLD, deadline=100.0, salt="a"), 0.0)
    sched.add(make_request("soon", 8, targets=ContractTargets(ttft_p99_s=0.5), salt="b"), 0.0)
    sched.add(make_request("warm", 8, tier=Tier.WARM, salt="c",
                           targets=ContractTargets(warm_mean_ttft_s=2.0)), 0.0)
    order = []
    for t in range(3):
        order += [s.seq_id for s in step(sched, float(t)).scheduled if s.start == 0]
    assert order == ["soon-0", "warm-0", "late-0"]
