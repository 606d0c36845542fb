"""The cost model against the profiling CSVs it is calibrated on."""

from __future__ import annotations

import csv

import pytest

from sim.cost_model import OPS, CostModel, cost_model_for
from sim.profiles import GPUS, MODELS, PROFILED, kv_capacity_tokens, traces_dir

pytestmark = pytest.mark.skipif(not traces_dir().is_dir(), reason="shared traces absent")


def profiled_points(rel: str) -> list[tuple[int, float]]:
    """(num_tokens, ms of one layer's non-attention operators) for every tp=1 row."""
    with open(traces_dir() / rel, newline="") as f:
        return [(int(r["num_tokens"]),
                 sum(float(r[f"time_stats.{op}.median"]) for op in OPS))
                for r in csv.DictReader(f) if r["num_tensor_parallel_workers"] == "1"]


@pytest.mark.parametrize(("gpu", "model"), sorted(PROFILED))
def test_non_attention_time_within_5_percent_of_every_profiled_row(gpu, model):
    cm = cost_model_for(gpu, model)
    rows = profiled_points(PROFILED[(gpu, model)])
    assert len(rows) > 100
    layers = MODELS[model].num_layers
    for n, ms in rows:
        want = ms * layers / 1e3
        assert abs(cm.linear_s(n) - want) <= 0.05 * want, (n, cm.linear_s(n), want)


def test_attention_terms_grow_with_chunk_and_context():
    cm = cost_model_for("a100", "llama3-8b")
    assert cm.plan_time([(0, 2048)]) > cm.plan_time([(0, 1024)]) * 1.9  # superlinear
    assert cm.plan_time([(4096, 512)]) > cm.plan_time([(0, 512)])
    few, many = cm.plan_time([(1000, 1)] * 8), cm.plan_time([(7000, 1)] * 8)
    assert many > few and cm.linear_s(8) < few


def test_roofline_profile_for_an_unprofiled_pair_is_monotone():
    cm = CostModel(MODELS["llama3-8b"], GPUS["h100"])
    assert not cm.calibrated
    times = [cm.linear_s(n) for n in (1, 64, 512, 4096)]
    assert times == sorted(times) and times[0] > 0


def test_kv_capacity_is_memory_minus_weights():
    m, g = MODELS["llama3-8b"], GPUS["a100"]
    tokens = kv_capacity_tokens(m, g)
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert tokens * m.kv_bytes_per_token < g.memory_bytes - m.weight_bytes
    with pytest.raises(ValueError):
        kv_capacity_tokens(MODELS["llama2-13b"], GPUS["l40s"], utilization=0.5)
