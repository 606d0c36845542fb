"""Layer-level decode batching in the simulator (``SimConfig.layer_decode_batching``)."""

from __future__ import annotations

import pytest

from inference.request import Tier
from inference.scheduler.plan import ScheduledSeq
from sim import SimConfig, simulate
from sim.ablations import LaserAblations
from sim.config import Contracts
from sim.cost_model import STEP_OVERHEAD_S, CostModel
from sim.layer_batching import LayerBatcher
from sim.profiles import GPUS, MODELS
from sim.summary import summarize
from sim.traces import TraceRequest

HOT_TBT = 0.025
RELAXED_OUT = 1500


def roofline() -> CostModel:
    """Llama-3-8B on an A100 from its shapes: 11 ms of weights a step, 92 ns per context
    token of a decode's K/V."""
    return CostModel(MODELS["llama3-8b"], GPUS["a100"])


def trace(hot_at: float) -> list[TraceRequest]:
    """60 long-context warm and cold streams decoding (about 40 ms a whole step once their
    contexts pass 5,000 tokens), and hot chats arriving while they do."""
    relaxed = [TraceRequest(0.0, Tier.WARM if i % 2 else Tier.COLD, 4000, RELAXED_OUT,
                            deadline_s=None if i % 2 else 3600.0, job=None if i % 2 else "j")
               for i in range(60)]
    hot = [TraceRequest(hot_at + i, Tier.HOT, 64, 80) for i in range(3)]
    return relaxed + hot


def run(batching: bool, policy: str = "fcfs", hot_at: float = 60.0, **extra):
    cfg = SimConfig(policy=policy, contracts=Contracts(hot_tbt_s=HOT_TBT), drain_s=600.0,
                    layer_decode_batching=batching, **extra)
    return simulate(trace(hot_at), cfg, cost=roofline(), num_blocks=30_000)


def by_tier(result) -> dict[Tier, list]:
    out: dict[Tier, list] = {t: [] for t in Tier}
    for r in result.accounting.records:
        out[r.tier].append(r)
    return out


@pytest.mark.parametrize(("policy", "extra"), [
    ("fcfs", {}),
    # laser without its turn-taking under the TBT cap (share.py), which drops rows instead
    ("laser", {"ablations": LaserAblations(tbt_share_enabled=False)}),
])
def test_relaxed_decodes_run_fewer_layers_so_hot_steps_keep_the_cap(policy, extra):
    off, on = run(False, policy, **extra), run(True, policy, **extra)
    hot_off, hot_on = by_tier(off)[Tier.HOT], by_tier(on)[Tier.HOT]
    assert len(hot_off) == len(hot_on) == 3
    # whole-depth steps of 60 long decodes run past the hot cap; split ones stay within it
    assert all(r.tbt_p99 > HOT_TBT for r in hot_off)
    assert all(0 < r.tbt_p99 <= HOT_TBT for r in hot_on)
    stats = summarize(on)["layer_batching"]
    assert stats["split_steps"] > 0 and stats["hot_over_cap"] == 0
    assert stats["hot_steps"] >= 79  # a hot chat decodes 79 tokens after its first
    assert "layer_batching" not in summarize(off)
    # every relaxed stream still completes with all of its tokens, later than without
    for tier in (Tier.WARM, Tier.COLD):
        recs_off, recs_on = by_tier(off)[tier], by_tier(on)[tier]
        assert len(recs_on) == len(recs_off) == 30
        assert all(r.tokens == RELAXED_OUT and r.finish < float("inf") for r in recs_on)
        assert (max(r.finish for r in recs_on) > max(r.finish for r in recs_off))
    assert on.scheduler.kv.num_free_blocks == on.scheduler.kv.num_blocks


def test_without_hot_decodes_the_switch_changes_nothing():
    # the hot chats arrive after every relaxed stream finished: no step has a cap to keep
    off, on = run(False, hot_at=500.0), run(True, hot_at=500.0)
    assert summarize(on)["layer_batching"]["split_steps"] == 0
    assert on.steps == off.steps
    for a, b in zip(off.accounting.records, on.accounting.records, strict=True):
        assert (a.tier, a.tokens) == (b.tier, b.tokens)
        assert a.ttft == pytest.approx(b.ttft) and a.tbt_p99 == pytest.approx(b.tbt_p99)
        assert a.finish == pytest.approx(b.finish)


def test_off_by_default():
    assert SimConfig().layer_decode_batching is False


def test_a_step_is_priced_per_layer():
    cost = roofline()
    batcher = LayerBatcher(cost, MODELS["llama3-8b"].num_layers)
    hot = ScheduledSeq("h", 999, 1, True)  # 1,000 tokens of context
    relaxed = [(ScheduledSeq(f"r{i}", 4999, 1, True), 0) for i in range(40)]
    # the whole depth for every row: the cost model's own step
    whole = cost.plan_time([(999, 1)] + [(4999, 1)] * 40)
    assert batcher._price([hot], relaxed, 32) == pytest.approx(whole)
    # relaxed rows through half the layers: half the layers carry them, half their K/V read
    half = (STEP_OVERHEAD_S + (cost.linear_s(41) + cost.linear_s(1)) / 2
            + cost.decode_attn_s(1000) + cost.decode_attn_s(40 * 5000) / 2)
    assert batcher._price([hot], relaxed, 16) == pytest.approx(half)
    assert half < whole
    # rows 24 layers in run their last 8, whatever group is asked
    late = [(x, 24) for x, _ in relaxed]
    eighth = (STEP_OVERHEAD_S + (8 * cost.linear_s(41) + 24 * cost.linear_s(1)) / 32
              + cost.decode_attn_s(1000) + cost.decode_attn_s(40 * 5000) / 4)
    assert batcher._price([hot], late, 16) == pytest.approx(eighth)
