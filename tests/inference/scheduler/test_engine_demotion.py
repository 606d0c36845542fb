"""An overload demotion by the engine's scheduler reaches the caller as the existing
tier-change delta (the gateway turns it into ``tier_changed`` / ``service_tier``)."""

from __future__ import annotations

from dataclasses import replace

from inference.request import ContractTargets, Tier
from tests.inference.engine.helpers import make_engine, request


def test_a_hot_request_past_its_target_is_served_as_warm_with_a_notice():
    engine = make_engine(policy="laser", layer_pause=False)
    # a 1 ms TTFT target nobody keeps, on a contract that is not demotable: the requests the
    # first step cannot finish are served as warm, each with one notice, and still complete
    targets = ContractTargets(ttft_p99_s=0.001, demotable=False)
    for i in range(6):
        engine.add_request(replace(request(f"r{i}", [5 + i] * 30, max_tokens=4),
                                   targets=targets))
    changes, finished = {}, set()
    for _ in range(200):
        for d in engine.step():
            if d.tier_change is not None:
                assert d.request_id not in changes  # one notice per request
                changes[d.request_id] = (d.tier_change, d.tier)
            if d.finish_reason is not None:
                finished.add(d.request_id)
        if not engine.has_unfinished():
            break
    assert finished == {f"r{i}" for i in range(6)}
    assert changes, "no request was demoted"
    for change, tier in changes.values():
        assert (change.from_tier, change.to_tier, tier) == (Tier.HOT, Tier.WARM, Tier.WARM)
        assert "overload" in change.reason


def test_an_excess_request_is_marked_on_its_sequences():
    engine = make_engine(policy="laser")
    engine.add_request(replace(request("x", [5] * 8, max_tokens=2), in_contract=False))
    assert [s.in_contract for s in engine.scheduler.seqs.values()] == [False]
