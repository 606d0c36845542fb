"""Layer-level pause on the tiny model: a cold forward stops between layers when hot work
arrives, the hot step runs, the cold forward completes, and nobody's tokens change."""

from __future__ import annotations

import time

import torch

from inference.request import ContractTargets, EngineRequest, SamplingParams, Tier
from tests.inference.engine.helpers import make_engine, prompt_ids, run

COLD = ContractTargets(cold_deadline_s=3600.0)
HOT = ContractTargets(ttft_p99_s=5.0, tbt_p99_s=5.0)


def _request(rid: str, prompt: list[int], tier: Tier, max_tokens: int = 6) -> EngineRequest:
    sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    now = time.time()
    return EngineRequest(rid, sp, prompt_token_ids=prompt, tier=tier, tenant_id="t",
                         targets=COLD if tier is Tier.COLD else HOT, arrival_time=now,
                         deadline=now + 3600.0 if tier is Tier.COLD else None)


def _hot_during_first_cold_layer(engine, hot: EngineRequest) -> dict:
    """Make ``hot`` arrive while layer 0 of the first cold forward runs (as the event loop
    would, mid-step); returns a record of which step that happened in."""
    layer0 = engine.runner.model.layers[0]
    forward = layer0.forward
    seen = {"added_in_step": None}

    def wrapped(*args, **kwargs):
        out = forward(*args, **kwargs)
        if seen["added_in_step"] is None and not any(
                s.tier is Tier.HOT for s in engine.scheduler.running):
            seen["added_in_step"] = seen["step"]
            engine.add_request(hot)
        return out

    layer0.forward = wrapped
    return seen


def _cold_then_hot(layer_pause: bool):
    """Three cold prompts, then a hot one arriving during the first cold forward; returns
    the engine, when the hot one arrived, each request's first-token time and tokens, and
    how many sequences the scheduler held after each step."""
    engine = make_engine(policy="laser", layer_pause=layer_pause)
    for i in range(3):
        engine.add_request(_request(f"cold{i}", prompt_ids(12, i), Tier.COLD))
    hot = _request("hot", prompt_ids(5, 9), Tier.HOT, max_tokens=4)
    seen = _hot_during_first_cold_layer(engine, hot)
    first: dict[str, float] = {}
    outputs: dict[str, tuple[int, ...]] = {}
    held: list[int] = []
    for i in range(500):
        seen["step"] = i
        if not engine.has_unfinished() and seen["added_in_step"] is not None:
            break
        for d in engine.step():
            if d.token_ids:
                first.setdefault(d.request_id, d.token_times[0])
            outputs[d.request_id] = outputs.get(d.request_id, ()) + d.token_ids
        held.append(len(engine.scheduler.held))
    return engine, seen, first, outputs, held


def test_hot_arrival_pauses_the_cold_forward_and_changes_no_tokens():
    engine, seen, first, outputs, held = _cold_then_hot(layer_pause=True)
    _, base_seen, base_first, base_outputs, base_held = _cold_then_hot(layer_pause=False)
    assert outputs == base_outputs  # greedy: the pause changed nobody's tokens
    assert seen["added_in_step"] == base_seen["added_in_step"] == 0
    # with the pause the first step stops after layer 0 holding the three cold sequences; the
    # next runs hot's prefill and returns its token, the one after completes the cold forward:
    # hot's first token comes first
    assert held[:3] == [3, 3, 0] and set(base_held) == {0}
    assert first["hot"] < min(first[f"cold{i}"] for i in range(3))
    assert base_first["hot"] > max(base_first[f"cold{i}"] for i in range(3))
    assert engine.scheduler.held == [] and engine._paused is None
    assert engine.scheduler.kv.num_free_blocks == engine.runner.num_blocks
    assert engine.stats().running == {"hot": 0, "warm": 0, "cold": 0}


def test_a_hot_step_returns_its_tokens_before_the_paused_forward_runs_on():
    """The hot step's tokens leave the engine when its own forward is done: the paused cold
    forward's remaining layers run in the next call (before anything else is scheduled), not
    between the hot token and its delivery."""
    engine = make_engine(policy="laser", layer_pause=True)
    for i in range(2):
        engine.add_request(_request(f"cold{i}", prompt_ids(12, i), Tier.COLD))
    seen = _hot_during_first_cold_layer(engine, _request("hot", prompt_ids(5, 9), Tier.HOT))
    seen["step"] = 0
    assert not any(d.token_ids for d in engine.step())
    paused = engine._paused
    assert paused is not None and paused.forward.next_layer == 1
    seen["step"] = 1
    hot_step = engine.step()
    assert {d.request_id for d in hot_step if d.token_ids} == {"hot"}
    # the cold forward has not moved: it resumes in the next call, which schedules nothing
    assert engine._paused is paused and paused.forward.next_layer == 1
    assert len(engine.scheduler.held) == 2
    schedule = engine.scheduler.schedule
    engine.scheduler.schedule = lambda now: (_ for _ in ()).throw(AssertionError("scheduled"))
    try:
        resumed = engine.step()
    finally:
        engine.scheduler.schedule = schedule
    assert {d.request_id for d in resumed if d.token_ids} == {"cold0", "cold1"}
    assert engine._paused is None and engine.scheduler.held == []
    out = run(engine, on_step=lambda i: seen.__setitem__("step", i + 3))
    assert set(out) >= {"hot", "cold0", "cold1"}


def test_a_held_sequence_aborted_mid_pause_frees_its_blocks_at_release():
    engine = make_engine(policy="laser", layer_pause=True)
    for i in range(2):
        engine.add_request(_request(f"cold{i}", prompt_ids(12, i), Tier.COLD))
    seen = _hot_during_first_cold_layer(engine, _request("hot", prompt_ids(5, 9), Tier.HOT))
    seen["step"] = 0
    engine.step()
    assert engine._paused is not None and len(engine.scheduler.held) == 2
    free = engine.scheduler.kv.num_free_blocks
    assert {d.finish_reason for d in engine.abort("cold0")} == {"abort"}
    # the paused forward may still write cold0's blocks: nobody gets them before release
    assert engine.scheduler.kv.num_free_blocks == free
    assert engine.stats().running["cold"] == 1
    out = run(engine, on_step=lambda i: seen.__setitem__("step", i + 1))
    assert "cold0" not in out and out["cold1"][0][2] == "length" and out["hot"][0][2] == "length"
    assert engine.scheduler.kv.num_free_blocks == engine.runner.num_blocks


def test_layerwise_forward_gives_the_same_logits_as_execute():
    outputs = []
    for layerwise in (False, True):
        engine = make_engine(policy="fcfs")
        engine.add_request(_request("a", prompt_ids(9), Tier.HOT))
        engine.add_request(_request("b", prompt_ids(4, 2), Tier.HOT))
        plan = engine.scheduler.schedule(time.time())
        batch = engine.runner.prepare(plan, engine.scheduler.seqs)
        if layerwise:
            forward = engine.runner.begin(batch)
            steps = 0
            while not forward.advance(lambda: True):  # one layer per call
                steps += 1
            assert steps == len(engine.runner.model.layers) - 1 and forward.seconds > 0
            outputs.append(forward.logits())
        else:
            outputs.append(engine.runner.execute(batch))
    assert outputs[0].shape == outputs[1].shape == (2, engine.model_config.vocab_size)
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)


def test_hot_that_needs_the_held_blocks_gets_them_once_the_forward_completes():
    outputs = {}
    for layer_pause in (True, False):
        engine = make_engine(num_blocks=8, policy="laser", layer_pause=layer_pause)
        for i in range(2):  # 2 x 3 blocks of the 8
            engine.add_request(_request(f"cold{i}", prompt_ids(12, i), Tier.COLD))
        hot = _request("hot", prompt_ids(10, 9), Tier.HOT)  # 3 blocks: only 2 are free
        seen = _hot_during_first_cold_layer(engine, hot)
        seen["step"] = 0
        engine.step()
        if layer_pause:
            assert len(engine.scheduler.held) == 2
            engine.step()  # no blocks for hot: the paused forward completes instead
            assert engine._paused is None
            assert not engine.scheduler.held
        out = run(engine, on_step=lambda i: seen.__setitem__("step", i + 2))
        outputs[layer_pause] = {rid: out[rid][0][0] for rid in out}
        assert engine.scheduler.kv.num_free_blocks == 8
    assert outputs[True] == outputs[False] and len(outputs[True]["hot"]) == 6


def test_the_cost_model_learns_from_every_whole_forward_and_not_from_a_paused_one():
    """The scheduler's step-time model (``observe_step``) gets each step's forward time,
    whether it ran whole or layer by layer, but not a forward split around hot steps."""
    engine = make_engine(policy="laser", layer_pause=True)
    for i in range(2):
        engine.add_request(_request(f"cold{i}", prompt_ids(12, i), Tier.COLD))
    seen = _hot_during_first_cold_layer(engine, _request("hot", prompt_ids(5, 9), Tier.HOT))
    runner, scheduler = engine.runner, engine.scheduler
    ran, told = [], []
    execute, begin, observe = runner.execute, runner.begin, scheduler.observe_step
    runner.execute = lambda batch: ran.append(batch) or execute(batch)
    runner.begin = lambda batch: ran.append(batch) or begin(batch)
    scheduler.observe_step = lambda n, s, *a: told.append((n, s)) or observe(n, s, *a)
    seen["step"] = 0
    engine.step()
    paused = engine._paused.forward.batch
    run(engine, on_step=lambda i: seen.__setitem__("step", i + 1))
    assert len(ran) > 2 and paused in ran
    assert [n for n, _ in told] == [b.num_tokens for b in ran if b is not paused]
    assert all(s > 0 for _, s in told)
