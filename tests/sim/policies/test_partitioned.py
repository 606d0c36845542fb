from __future__ import annotations

import pytest

from inference.errors import AdmissionRefused
from inference.request import Tier
from tests.inference.factories import make_request, make_scheduler, step

SHARES = {Tier.HOT: 0.5, Tier.WARM: 0.25, Tier.COLD: 0.25}


def part(**config):
    return make_scheduler("partitioned", options={"shares": SHARES}, **config)


def test_each_tier_gets_its_slice_of_the_budget_and_no_more():
    sched = part(max_num_batched_tokens=32, long_prefill_chunk=32, num_blocks=64)
    sched.add(make_request("c", 60, max_tokens=2, tier=Tier.COLD), 0.0)
    plan = step(sched, 0.0)
    assert plan.num_batched_tokens == 8  # cold's quarter, though hot and warm are idle


def test_a_tier_never_borrows_idle_blocks():
    sched = part(num_blocks=32, max_num_batched_tokens=32, long_prefill_chunk=32)
    assert sched.block_caps == {Tier.HOT: 16, Tier.WARM: 8, Tier.COLD: 8}
    sched.add(make_request("c1", 16, max_tokens=12, tier=Tier.COLD), 0.0)
    sched.add(make_request("c2", 16, max_tokens=12, tier=Tier.COLD, salt="x"), 0.0)
    for t in range(8):
        step(sched, float(t))
    cold_blocks = sum(len(s.block_ids) for s in sched.running)
    assert cold_blocks <= 8 and sched.kv.num_free_blocks >= 24
    assert sched.reserved_idle_blocks() == 32 - cold_blocks
    assert sched.kept_out()  # c2 waits while the shared pool has room


def test_request_larger_than_its_pool_is_refused():
    sched = part(num_blocks=32)
    with pytest.raises(AdmissionRefused, match="pool"):
        sched.add(make_request("c", 40, max_tokens=4, tier=Tier.COLD), 0.0)
