"""Laser's replica router on hand-made loads: the contract per tier, the cache, stale stats."""

from __future__ import annotations

from inference.fleet.router import (
    LaserRouter,
    ReplicaLoad,
    RouterConfig,
    RouteRequest,
    leading_hits,
    rendezvous,
)
from inference.request import Tier

HOT, WARM, COLD = Tier.HOT, Tier.WARM, Tier.COLD


def loads(n=3, at=0.0, **over):
    """``n`` idle replicas; ``over`` maps a field to a per-replica list."""
    return [ReplicaLoad(at, **{k: v[i] for k, v in over.items()}) for i in range(n)]


def hot(prompt=1600, hashes=(1, 2, 3), budget=0.5):
    return RouteRequest(HOT, prompt, hashes, budget)


def test_leading_hits_stop_at_the_first_block_not_held():
    assert leading_hits([1, 2, 3, 4], {1, 2, 4}) == 2
    assert leading_hits([1, 2], set()) == 0


def test_a_conversation_stays_with_its_kv_while_the_contract_holds_there():
    ls = loads(3, hot=[5, 0, 0])
    assert LaserRouter().choose(hot(), ls, [0, 0, 90], now=0.1) == 2
    assert LaserRouter().choose(hot(), ls, [90, 0, 0], now=0.1) == 0  # busier, still holds


def test_hot_leaves_its_kv_when_that_replica_is_hot_saturated():
    ls = loads(3, hot=[64, 3, 1], hot_capacity=[64, 64, 64])
    assert LaserRouter().choose(hot(), ls, [90, 0, 0], now=0.1) == 2


def test_hot_leaves_its_kv_when_the_queued_hot_prefill_misses_its_ttft():
    ls = loads(2, hot_prefill_tokens=[20_000, 0], prefill_tps=[10_000.0, 10_000.0])
    assert LaserRouter().choose(hot(budget=0.5), ls, [50, 0], now=0.1) == 1


def test_cold_fills_where_hot_is_light():
    ls = loads(3, hot=[50, 40, 2], prefill_tokens=[0, 0, 30_000], hot_capacity=[64] * 3)
    assert LaserRouter().choose(RouteRequest(COLD, 3000), ls, [0, 0, 0], now=0.1) == 2


def test_warm_goes_to_the_earliest_first_token():
    ls = loads(3, prefill_tokens=[9000, 100, 5000])
    assert LaserRouter().choose(RouteRequest(WARM, 500), ls, [0, 0, 0], now=0.1) == 1


def test_a_burst_between_publications_spreads():
    router, ls = LaserRouter(), loads(4, hot_capacity=[3] * 4)
    picks = [router.choose(hot(hashes=()), ls, [0] * 4, now=0.1) for _ in range(12)]
    assert sorted(picks.count(i) for i in range(4)) == [3, 3, 3, 3]


def test_stale_stats_fall_back_to_a_hash_of_the_first_block():
    router = LaserRouter(RouterConfig(stale_s=1.0))
    stale = loads(5, at=0.0, hot=[0, 99, 99, 99, 99])
    picks = {router.choose(hot(hashes=(77, 1)), stale, [0] * 5, now=5.0) for _ in range(3)}
    assert picks == {rendezvous(77, 5)}
    short = [router.choose(hot(prompt=5, hashes=()), stale, [0] * 5, now=5.0) for _ in range(5)]
    assert sorted(short) == [0, 1, 2, 3, 4]  # no block to hash: round robin


def test_rendezvous_moves_only_the_keys_of_a_removed_replica():
    before = [rendezvous(k, 8) for k in range(200)]
    after = [rendezvous(k, 7) for k in range(200)]
    assert all(b == a for a, b in zip(before, after) if a != 7)
