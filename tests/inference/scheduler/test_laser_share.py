"""Hot TBT when the batch is shared (issue 23): the other streams' decode rows take turns so
that the step stays under the strictest in-contract hot TBT cap."""

from __future__ import annotations

import pytest

from inference.request import Tier
from inference.scheduler import LinearCost
from sim.ablations import LaserAblations, laser_options
from tests.inference.factories import make_request, make_scheduler, step

COST = LinearCost(0.01, per_token=0.01)  # a row costs as much as the step's fixed part
CAP_S = 0.8 * 0.1  # tbt_safety x the default hot TBT target: 7 rows


def shared(share: bool, warm: int = 20, excess_hot: int = 0):
    sched = make_scheduler("laser", num_blocks=512, max_num_batched_tokens=64,
                           long_prefill_chunk=64, max_num_seqs=64,
                           options={"cost": COST, **laser_options(
                               LaserAblations(tbt_share_enabled=share), 0)})
    sched.add(make_request("hot", 4, max_tokens=200), 0.0)
    for i in range(warm):
        sched.add(make_request(f"w{i}", 4, max_tokens=200, tier=Tier.WARM, salt=f"w{i}"), 0.0)
    for i in range(excess_hot):
        seqs = make_request(f"x{i}", 4, max_tokens=200, salt=f"x{i}")
        seqs[0].in_contract = False
        sched.add(seqs, 0.0)
    now = 0.0
    while any(s.is_prefilling for s in sched.seqs.values()):  # everyone prefilled
        step(sched, now)
        now += 1.0
    return sched, now


@pytest.mark.parametrize("excess_hot", [0, 6])
def test_other_decodes_take_turns_under_the_hot_tbt_cap(excess_hot):
    sched, now = shared(True, warm=14, excess_hot=excess_hot)
    others = {s.seq_id for s in sched.seqs.values() if s.request_id != "hot"}
    last = dict.fromkeys(others, -1)
    for k in range(12):
        plan = step(sched, now + k)
        ids = {x.seq_id for x in plan.scheduled}
        assert "hot-0" in ids  # the in-contract hot stream decodes every step
        assert COST.step_time(plan.num_batched_tokens) <= CAP_S + 1e-9
        assert len(ids & others) == 6  # the cap is used, by the others in turn
        for i in ids & others:
            last[i] = k
        # least recently served first: nobody waits more than a round and a step
        assert all(k - seen <= -(-len(others) // 6) + 1 for seen in last.values())


def test_without_the_share_every_decode_runs_past_the_cap():
    sched, now = shared(False)
    plan = step(sched, now)
    assert len(plan.scheduled) == 21
    assert COST.step_time(plan.num_batched_tokens) > CAP_S


def test_no_cap_without_an_in_contract_hot_stream():
    sched, now = shared(True)
    sched.abort("hot")
    plan = step(sched, now)
    assert len(plan.scheduled) == 20
