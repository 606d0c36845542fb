"""The simulator's speedups change no decision: ``StepFill._walk`` passing over waiting
sequences that would get nothing, and ``BlockManager.cache_computed_blocks``'s early return
(the prefix cache ends as after one full pass)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from inference.kv.block_manager import BlockManager
from inference.request import Tier
from inference.scheduler.laser.fill import StepFill
from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.scheduler.laser.slack import Speeds, hot_slack_frac, min_hot_slack_frac
from inference.sequence import Sequence
from sim import SimConfig, simulate
from sim.cost_model import CostModel
from sim.profiles import GPUS, MODELS, traces_dir
from sim.scenarios import multi_turn
from sim.summary import TIMING, summarize
from sim.traces import TraceRequest
from tests.inference.factories import make_request


def overload_trace(n: int = 240, seed: int = 1) -> list[TraceRequest]:
    """Hot and warm prompts faster than a step serves them: a waiting queue that the fill
    walks every step, with shared prefixes for the prefix cache."""
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


def plain_walk(self, prefills, waiting, plain=False) -> bool:
    """``StepFill._walk`` without its skip: every sequence of the class is asked."""
    group = sorted([(k, q, False) for k, q in prefills] + [(k, q, True) for k, q in waiting],
                   key=lambda item: item[0])
    for k, q, is_waiting in group:
        if self.used >= self.budget:
            return False
        if k[0] in self._spent:
            break
        if is_waiting or q.seq_id not in self.pre.gone:
            self._prefill(k, q, is_waiting)
    return True


def counted_report(monkeypatch, trace, cost, walk) -> tuple[dict, int]:
    asked = 0
    prefill = StepFill._prefill

    def counted(self, *args):
        nonlocal asked
        asked += 1
        return prefill(self, *args)

    with monkeypatch.context() as m:
        m.setattr(StepFill, "_prefill", counted)
        m.setattr(StepFill, "_walk", walk)
        return laser_report(trace, cost), asked


def test_passing_over_an_idle_queue_leaves_the_report_unchanged(monkeypatch):
    trace = overload_trace()
    skipping, asked = counted_report(monkeypatch, trace, roofline(), StepFill._walk)
    every, asked_all = counted_report(monkeypatch, trace, roofline(), plain_walk)
    assert skipping == every
    assert asked < asked_all / 2  # the queue was passed over, not asked one by one


@pytest.mark.skipif(not traces_dir().is_dir(), reason="shared traces absent")
def test_passing_over_an_idle_queue_leaves_a_multi_turn_report_unchanged(monkeypatch):
    trace = multi_turn(1.5, 120.0, 0)
    skipping, asked = counted_report(monkeypatch, trace, None, StepFill._walk)
    every, asked_all = counted_report(monkeypatch, trace, None, plain_walk)
    assert skipping == every and asked < asked_all


def scripted_fill(acts: set[str], asked: list[str]) -> StepFill:
    """A fill whose ``_prefill`` records who it was asked for and answers True (the fill
    changed) for the sequences named in ``acts``."""
    fill = StepFill.__new__(StepFill)
    fill.used, fill.budget, fill._spent = 0, 100, set()
    fill.pre = SimpleNamespace(gone=set())

    def prefill(key, seq, is_waiting):
        asked.append(seq.seq_id)
        return seq.seq_id in acts

    fill._prefill = prefill
    return fill


def item(n: int, name: str, excess: int = 0, start: int = 0):
    # no id in the key: a running prefill with a waiting one's ``n`` ties, and the walk takes
    # the waiting one first
    return (SortKey(SchedClass.COLD, excess, 0, n, ""),
            SimpleNamespace(seq_id=name, num_computed_tokens=start))


def test_walk_asks_again_once_the_fill_changed():
    asked: list[str] = []
    fill = scripted_fill({"d", "r"}, asked)
    waiting = [item(0, "a"), item(1, "b"), item(2, "d", start=16), item(3, "x"),
               item(5, "e"), item(6, "f"), item(7, "c", excess=1), item(8, "g", excess=1)]
    assert fill._walk([item(4, "r")], waiting)
    # b: a's pair, nothing changed since; d differs in start and acted, so x (a's pair
    # again) is asked; r (a running prefill) acted, so e is asked; f: e's pair; c differs in
    # excess; g: c's pair
    assert asked == ["a", "d", "x", "r", "e", "c"]


class Counted(list):
    """A list that counts the items read by index."""

    reads = 0

    def __getitem__(self, i):
        self.reads += 1
        return super().__getitem__(i)


@pytest.mark.parametrize("excess_last", [0, 1])
def test_a_plain_walk_stops_once_every_pair_to_come_is_idle(excess_last):
    asked: list[str] = []
    fill = scripted_fill({"r"}, asked)
    waiting = Counted([item(i, f"w{i}") for i in range(50)]
                      + [item(50 + i, f"x{i}", excess=1) for i in range(10 * excess_last)])
    assert fill._walk([item(3, "r")], waiting, plain=True)
    # w0 idle; r acts; w4 is asked again, then (if any) x0; the walk passes over the rest
    # of the in-contract pairs, and ends at the next excess one, without reading them
    assert asked == ["w0", "r", "w4"] + ["x0"] * excess_last
    assert waiting.reads < 25  # of 50 or 60
    everyone: list[str] = []
    assert plain_walk(scripted_fill({"r"}, everyone), [item(3, "r")], waiting)
    assert set(asked) <= set(everyone)


def test_min_hot_slack_frac_is_the_least_hot_slack_frac_bit_for_bit():
    rng = random.Random(2)
    sp = Speeds(0.01, 3.3e-5, 0.013)
    seqs = []
    for i in range(300):
        seq = make_request(f"r{i}", prompt_len=rng.randint(1, 3000), arrival=rng.uniform(0, 9))[0]
        seq.num_computed_tokens = rng.randint(0, seq.num_tokens)
        if rng.random() < 0.3:
            seq.first_token_time = seq.arrival_time + 0.1
        seqs.append(seq)
    for n in (0, 1, 7, 300):
        part = seqs[:n]
        want = min((hot_slack_frac(q, 10.0, sp) for q in part), default=float("inf"))
        assert min_hot_slack_frac(part, 10.0, sp) == want


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
