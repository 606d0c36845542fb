"""The floor under any policy's hot misses: hand-built bursts, and laser never beats it."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.request import Tier
from sim import Contracts, SimConfig, simulate
from sim.bound import hot_miss_bound
from sim.cost_model import cost_model_for
from sim.profiles import traces_dir
from sim.summary import summarize
from sim.traces import TraceRequest

# the cost model reads the shared profiling files: skip (like the other simulator tests)
# rather than fail at import where they are absent
pytestmark = pytest.mark.skipif(not traces_dir().is_dir(), reason="shared traces absent")


@cache
def cost():
    return cost_model_for("a100", "llama3-8b")


def bound(trace):
    return hot_miss_bound(trace, cost(), Contracts(), budget=2048, chunk=2048, max_len=8192)


def hot(at: float, prompt: int, **kw) -> TraceRequest:
    return TraceRequest(at, Tier.HOT, prompt, 4, tenant="t", **kw)


def test_two_long_prompts_at_once_cost_a_miss_and_apart_they_do_not():
    # Each 7,000-token prompt needs ~0.55 s of the machine and may take 0.2 s more than its
    # own idle prefill: together they need ~1.1 s within ~0.76 s.
    assert bound([hot(0.0, 7000), hot(0.01, 7000)]).misses == 1
    assert bound([hot(0.0, 7000), hot(5.0, 7000)]).misses == 0
    b = bound([hot(0.0, 7000), hot(0.01, 7000), hot(0.02, 7000), hot(0.03, 7000)])
    assert (b.hot, b.misses, b.max_attainment) == (4, 2, 0.5)


def test_demotable_prompts_prefixes_and_long_requests_are_left_out():
    assert bound([hot(0.0, 7000), hot(0.01, 7000, demotable=True)]).misses == 0
    assert bound([hot(0.0, 7000), hot(0.01, 7000, prefix_blocks=(1,))]) is None
    b = bound([hot(0.0, 7000), hot(0.01, 8190)])  # 8,190 + 4 tokens exceed the context
    assert (b.hot, b.misses) == (1, 0)


@settings(max_examples=12, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 3), st.integers(500, 7000)), min_size=1, max_size=8))
def test_laser_never_misses_fewer_than_the_bound(spec):
    trace = sorted((hot(t, p) for t, p in spec), key=lambda r: r.arrival_s)
    s = summarize(simulate(trace, SimConfig(policy="laser")))["hot"]
    misses = round(s["requests"] * (1 - s["attainment"]))
    assert misses >= bound(trace).misses
