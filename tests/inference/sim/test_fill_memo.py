"""The simulator's speedups change no decision: ``StepFill._fit_attention``'s memo answers as
the bisection would, and ``BlockManager.cache_computed_blocks``'s early return leaves the
prefix cache as a full pass does."""

from __future__ import annotations

import random

import pytest

from inference.kv.block_manager import BlockManager
from inference.request import Tier
from inference.scheduler.laser.fill import FillMode, StepFill
from inference.sequence import Sequence
from inference.sim import SimConfig, simulate
from inference.sim.cost_model import CostModel
from inference.sim.profiles import GPUS, MODELS, traces_dir
from inference.sim.scenarios import multi_turn
from inference.sim.summary import TIMING, summarize
from inference.sim.traces import TraceRequest
from tests.inference.factories import make_request, make_scheduler


def overload_trace(n: int = 240, seed: int = 1) -> list[TraceRequest]:
    """Hot and warm prompts faster than a step serves them: a waiting queue that the fill
    walks every step (the memo's case), with shared prefixes for the prefix cache."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tier = Tier.HOT if rng.random() < 0.7 else Tier.WARM
        out.append(TraceRequest(i * 0.01, tier, rng.randint(200, 3000), rng.randint(2, 40),
                                prefix_blocks=(1 + i % 3,) * rng.randint(0, 4)))
    return out


def laser_report(trace: list[TraceRequest], cost: CostModel | None = None) -> dict:
    out = summarize(simulate(trace, SimConfig(policy="laser"), cost=cost))
    for key in TIMING:
        out.pop(key)
    return out


def roofline() -> CostModel:
    return CostModel(MODELS["llama3-8b"], GPUS["a100"], None)  # prices prefill attention


def test_every_remembered_fit_is_the_bisection_s_answer(monkeypatch):
    memo = StepFill._fit_attention
    seen = {"calls": 0, "computed": 0, "wrong": 0}
    fit = StepFill._fit

    def counted_fit(self, seq, n, hot):
        seen["computed"] += 1
        return fit(self, seq, n, hot)

    def checked(self, seq, n, hot):
        seen["calls"] += 1
        got = memo(self, seq, n, hot)
        seen["wrong"] += got != fit(self, seq, n, hot)
        return got

    monkeypatch.setattr(StepFill, "_fit", counted_fit)
    monkeypatch.setattr(StepFill, "_fit_attention", checked)
    laser_report(overload_trace(), roofline())
    assert seen["computed"] < seen["calls"] / 2  # the queue asked the same question often
    assert seen["wrong"] == 0


def test_the_memo_follows_every_input_of_the_fit():
    # within one step the fill's state moves (chunks taken, attention, a first-token deadline,
    # the hot floor) and sequences differ in their start: each answer must be the bisection's
    sched = make_scheduler("laser", num_blocks=2048, block_size=16, max_model_len=8192,
                           max_num_batched_tokens=2048, long_prefill_chunk=2048,
                           options={"cost": roofline()})
    seq = make_request("r0", prompt_len=6000)[0]
    fill = StepFill(sched._view(0.0, FillMode.ALL))
    fill.context, fill.cap_s, fill.hot_cap_s = 20_000, 0.06, 0.1  # what _limits sets
    rng = random.Random(0)
    answers = set()
    for _ in range(400):
        fill.used = rng.choice([0, 1, 300, 700])
        fill.attn_s = rng.choice([0.0, 0.004, 0.02])
        fill.finish_by = rng.choice([None, 0.03, 0.08])
        fill.hot_floor = rng.choice([0, 32])
        seq.num_computed_tokens = rng.choice([0, 1500, 4000])
        n, hot = rng.choice([40, 600, 2048]), rng.random() < 0.5
        got = fill._fit_attention(seq, n, hot)
        assert got == fill._fit(seq, n, hot)
        answers.add(got)
    assert len(fill._fits) < 400 and len(answers) > 20  # hits, and answers that differ


def test_the_memo_leaves_the_report_unchanged(monkeypatch):
    trace = overload_trace()
    remembered = laser_report(trace, roofline())
    monkeypatch.setattr(StepFill, "_fit_attention", StepFill._fit)
    assert laser_report(trace, roofline()) == remembered


@pytest.mark.skipif(not traces_dir().is_dir(), reason="shared traces absent")
def test_the_memo_leaves_a_multi_turn_report_unchanged(monkeypatch):
    trace = multi_turn(1.5, 60.0, 0)
    remembered = laser_report(trace)
    monkeypatch.setattr(StepFill, "_fit_attention", StepFill._fit)
    assert laser_report(trace) == remembered


def _seq(tokens: int) -> Sequence:
    return Sequence(seq_id="s", request_id="r", index=0, prompt_token_ids=list(range(tokens)),
                    max_tokens=8, tier=Tier.HOT, arrival_time=0.0, salt="t")


def test_caching_block_by_block_equals_one_pass():
    def cached_after(steps: list[int]) -> tuple[dict, list]:
        kv = BlockManager(8, 4, prefix_caching=True)
        seq = _seq(14)
        assert kv.allocate_slots(seq, 14) is not None
        for computed in steps:
            seq.num_computed_tokens = computed
            kv.cache_computed_blocks(seq)
        return dict(kv._cached), [kv.blocks[b].hash for b in seq.block_ids]

    step_by_step = cached_after([1, 2, 3, 4, 5, 7, 8, 8, 11, 12, 13, 14])
    assert step_by_step == cached_after([14])
    assert len(step_by_step[0]) == 3  # 14 tokens: three full blocks of 4


def test_no_hash_list_before_a_block_is_full():
    kv = BlockManager(8, 4, prefix_caching=True)
    seq = _seq(6)
    assert kv.allocate_slots(seq, 6) is not None
    seq.num_computed_tokens = 3
    kv.cache_computed_blocks(seq)
    assert "s" not in kv._hashes and not kv._cached
    seq.num_computed_tokens = 4
    kv.cache_computed_blocks(seq)
    assert len(kv._hashes["s"]) == 1 and len(kv._cached) == 1
