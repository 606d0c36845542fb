"""Cluster runs: N replicas of the one-replica loop behind each router, on tiny traces."""

from __future__ import annotations

import pytest

from inference.request import Tier
from sim import SimConfig
from sim.cluster import ClusterConfig, simulate_cluster, summarize_cluster
from sim.cluster_routers import ROUTERS
from sim.cluster_traces import cluster_trace, shared_prefix
from sim.traces import TraceRequest
from tests.sim.test_simulator import FlatCost

HOT = Tier.HOT
CFG = SimConfig(drain_s=60.0)


def run(trace, router, replicas=2):
    res = simulate_cluster(trace, ClusterConfig(replicas, router, replica=CFG), cost=FlatCost())
    return res, summarize_cluster(res)


def conversation(turns=3, gap_s=5.0, tokens=160):
    """One chat: each turn's prompt repeats the last one's blocks and adds its own."""
    out = []
    for k in range(turns):
        blocks = tuple(range((k + 1) * tokens // 16))
        out.append(TraceRequest(k * gap_s, HOT, (k + 1) * tokens, 8, prefix_blocks=blocks,
                                tenant="t"))
    return out


@pytest.mark.parametrize("router", ROUTERS)
def test_every_request_is_accounted_once_whatever_the_router(router):
    trace = cluster_trace("SP", 0.05, 3, 15.0)
    res, s = run(trace, router, replicas=3)
    assert len(res.accounting.records) == len(trace) == s["requests"]
    assert not res.accounting.live


def test_round_robin_spreads_evenly_and_loses_the_conversation():
    res, s = run(conversation(4), "round-robin")
    assert [len(r.trace) for r in res.replicas] == [2, 2]
    # each turn lands where the last one is not: only the turn before that is cached there
    assert s["prefix_hit_rate"] < run(conversation(4), "laser")[1]["prefix_hit_rate"]


@pytest.mark.parametrize("router", ["laser", "oracle", "prefix-affinity"])
def test_cache_aware_routers_keep_a_conversation_on_its_replica(router):
    res, s = run(conversation(4), router)
    assert sorted(len(r.trace) for r in res.replicas) == [0, 4]
    assert s["prefix_hit_rate"] > 0.5


def test_laser_spreads_one_hot_prefix_that_affinity_pins_to_one_replica():
    trace = shared_prefix(load=4.0, duration_s=6.0, apps=1, prefix_tokens=512)
    _, pinned = run(trace, "prefix-affinity", replicas=4)
    _, spread = run(trace, "laser", replicas=4)
    assert pinned["imbalance"] == 4.0  # every request on one replica
    assert spread["imbalance"] < pinned["imbalance"]
    assert spread["hot"]["ttft_p99_s"] < pinned["hot"]["ttft_p99_s"]


def test_a_cluster_run_is_deterministic():
    trace = cluster_trace("SP", 0.05, 2, 15.0)
    drop = ("router_s", "cpu_s", "wall_s")
    a, b = (
        {k: v for k, v in run(trace, "laser")[1].items() if k not in drop} for _ in range(2))
    assert a == b
