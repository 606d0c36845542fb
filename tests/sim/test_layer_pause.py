"""The simulator as the engine's layer-pause executor (``SimConfig.layer_pause``)."""

from __future__ import annotations

from inference.request import Tier
from sim import SimConfig, simulate
from sim.summary import summarize
from sim.traces import TraceRequest
from tests.sim.test_simulator import FlatCost  # 10 ms a step plus 1 ms a token


def run(pause: bool):
    # a 2,000-token cold prompt takes a 2 s step; a hot chat arrives 50 ms into it
    trace = [TraceRequest(0.0, Tier.COLD, 2000, 4, deadline_s=600.0, job="j"),
             TraceRequest(0.05, Tier.HOT, 16, 4)]
    return simulate(trace, SimConfig(layer_pause=pause, drain_s=60.0), cost=FlatCost(),
                    num_blocks=512)


def test_a_hot_arrival_stops_a_long_step_between_layers():
    whole, paused = run(False), run(True)
    hot = {r.tier: r for r in whole.accounting.records}[Tier.HOT]
    assert whole.pauses == 0 and hot.ttft > 1.9  # waits for the whole 2 s step
    records = {r.tier: r for r in paused.accounting.records}
    assert paused.pauses == 1
    # 32 layers of 62.8 ms: the step stops at the first boundary after 50 ms, hot runs
    assert records[Tier.HOT].ttft < 0.1
    # the paused forward resumes and finishes, its K/V blocks returned
    assert records[Tier.COLD].finish < float("inf") and records[Tier.COLD].tokens == 4
    assert paused.scheduler.kv.num_free_blocks == paused.scheduler.kv.num_blocks
    assert summarize(paused)["layer_pauses"] == 1
    # the cold step lost only the resumption's cost and the hot steps it made room for
    assert records[Tier.COLD].finish - whole_cold_finish(whole) < 0.2


def whole_cold_finish(result) -> float:
    return {r.tier: r for r in result.accounting.records}[Tier.COLD].finish
