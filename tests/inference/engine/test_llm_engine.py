"""LLMEngine on a tiny random model: outputs equal a dense run whatever the batching does."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference.errors import EngineOverloaded, InvalidParameter, PromptTooLong
from inference.request import EngineRequest, SamplingParams
from tests.inference.engine.helpers import (
    assert_matches_dense,
    capture_logits,
    make_engine,
    prompt_ids,
    request,
    run,
)


def _run_greedy(engine, prompts, max_tokens=12):
    seen = capture_logits(engine)
    for i, p in enumerate(prompts):
        engine.add_request(request(f"r{i}", p, max_tokens))
    out = run(engine)
    for i, p in enumerate(prompts):
        ids, _, finish = out[f"r{i}"][0]
        assert finish == "length" and len(ids) == max_tokens
        assert_matches_dense(p, ids, seen[f"r{i}-0"])
    return {rid: out[rid][0][0] for rid in out}


def test_greedy_identical_under_forced_preemption():
    prompts = [prompt_ids(10, k) for k in range(4)]
    roomy = _run_greedy(make_engine(num_blocks=128), prompts)
    tight = make_engine(num_blocks=14)  # 4 x 6 blocks needed at the end: must preempt
    assert _run_greedy(tight, prompts) == roomy
    assert tight.stats().num_preemptions > 0
    assert tight.scheduler.kv.num_free_blocks == 14


def test_prefix_cache_hit_gives_the_same_logits():
    engine = make_engine()
    p = prompt_ids(13)
    first = _run_greedy(engine, [p])["r0"]
    seen = capture_logits(engine)
    engine.add_request(request("again", p, 12))
    out = run(engine)
    ids, _, _ = out["again"][0]
    assert ids == first
    assert_matches_dense(p, ids, seen["again-0"])
    assert engine.scheduler.kv.stats().cached_free_blocks > 0


def test_prefix_cache_hit_is_reported_and_salted():
    engine = make_engine()
    p = prompt_ids(13)
    for rid, tenant in (("a", "t1"), ("b", "t1"), ("c", "t2")):
        sp = SamplingParams(max_tokens=2, temperature=0.0)
        engine.add_request(EngineRequest(rid, sp, prompt_token_ids=p, tenant_id=tenant))
        deltas = [d for _ in range(20) for d in engine.step()]
        cached = {d.request_id: d.cached_tokens for d in deltas}
        assert cached[rid] == (12 if rid == "b" else 0)  # 3 full blocks of 4


def test_chunked_prefill_matches_dense():
    prompts = [prompt_ids(23, 1), prompt_ids(9, 2)]
    engine = make_engine(max_num_batched_tokens=5)
    _run_greedy(engine, prompts, max_tokens=6)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.integers(1, 20), min_size=1, max_size=4),
       joins=st.lists(st.integers(0, 6), min_size=4, max_size=4),
       budget=st.sampled_from([7, 16, 64]))
def test_logits_batched_equal_alone(lengths, joins, budget):
    """Requests joining at random steps, prefilling in chunks beside others' decodes."""
    engine = make_engine(num_blocks=64, max_num_batched_tokens=budget)
    seen = capture_logits(engine)
    prompts = {f"q{i}": prompt_ids(n, 5 * i) for i, n in enumerate(lengths)}
    first = min(joins[:len(lengths)])

    def join(step):
        step += first  # the first request joins at step 0, else the engine looks idle
        for i, rid in enumerate(prompts):
            if joins[i] == step:
                engine.add_request(request(rid, prompts[rid], 5))

    out = run(engine, on_step=join, min_steps=max(joins) - first + 1)
    for rid, p in prompts.items():
        assert_matches_dense(p, out[rid][0][0], seen[f"{rid}-0"])


def _sampled(neighbours: int, seed: int = 1234):
    engine = make_engine()
    for k in range(neighbours):
        engine.add_request(request(f"n{k}", prompt_ids(5 + 3 * k, k), 10, temperature=1.0))
    engine.add_request(request("me", prompt_ids(8), 10, temperature=0.9, top_p=0.9,
                               top_k=40, seed=seed))
    return run(engine)["me"][0][0]


def test_seed_reproducible_whatever_the_neighbours():
    alone = _sampled(0)
    assert _sampled(3) == alone
    assert _sampled(1) == alone
    assert _sampled(0, seed=99) != alone


def test_seeded_sampling_survives_preemption():
    def go(num_blocks):
        engine = make_engine(num_blocks=num_blocks)
        for k in range(3):
            engine.add_request(request(f"r{k}", prompt_ids(10, k), 12, temperature=1.0, seed=k))
        return {rid: v[0][0] for rid, v in run(engine).items()}, engine

    roomy, _ = go(128)
    tight, engine = go(11)
    assert tight == roomy and engine.stats().num_preemptions > 0


def test_n_choices_share_the_prompt_and_differ():
    engine = make_engine()
    engine.add_request(request("n", prompt_ids(9), 8, temperature=1.0, n=3, seed=5))
    out = run(engine)["n"]
    assert sorted(out) == [0, 1, 2]
    assert all(len(ids) == 8 and finish == "length" for ids, _, finish in out.values())
    assert len({ids for ids, _, _ in out.values()}) > 1
    assert engine.scheduler.kv.num_free_blocks == engine.runner.num_blocks


def test_errors_are_raised_before_any_work():
    engine = make_engine(num_blocks=16, max_waiting=1)  # 64 slots: max_model_len capped to 64
    assert engine.max_model_len == 64
    with pytest.raises(PromptTooLong) as exc:
        engine.add_request(request("long", prompt_ids(64), 1))
    assert exc.value.param == "prompt"
    with pytest.raises(PromptTooLong) as exc:
        engine.add_request(request("long", prompt_ids(60), 8))
    assert exc.value.param == "max_tokens"
    with pytest.raises(PromptTooLong) as exc:
        engine.add_request(EngineRequest("m", SamplingParams(max_tokens=4), messages=[
            {"role": "user", "content": "hello world " * 40}]))
    assert exc.value.param == "messages"
    with pytest.raises(InvalidParameter) as exc:
        engine.add_request(request("bad", [1, 10**6], 2))
    assert exc.value.param == "prompt"
    engine.add_request(request("ok", prompt_ids(4), 2))
    with pytest.raises(InvalidParameter):
        engine.add_request(request("ok", prompt_ids(4), 2))
    with pytest.raises(EngineOverloaded):
        engine.add_request(request("full", prompt_ids(4), 2))
    assert engine.stats().num_steps == 0 and engine.num_requests == 1


def test_chat_messages_use_the_template_and_stop_on_im_end():
    engine = make_engine()
    messages = [{"role": "user", "content": "hello"}]
    ids = engine.encode(EngineRequest("c", SamplingParams(max_tokens=4), messages=messages))
    assert engine.tokenizer.decode(ids, skip_special_tokens=False) == (
        "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")
    assert engine.tokenizer.token_to_id("<|im_end|>") in engine.eos_token_ids


def test_abort_frees_blocks_and_reports_abort():
    engine = make_engine()
    engine.add_request(request("a", prompt_ids(10), 50, n=2, temperature=1.0))
    engine.add_request(request("b", prompt_ids(6, 3), 5))
    for _ in range(3):
        engine.step()
    assert engine.scheduler.kv.num_free_blocks < engine.runner.num_blocks
    deltas = engine.abort("a")
    assert sorted(d.index for d in deltas) == [0, 1]
    assert {d.finish_reason for d in deltas} == {"abort"}
    assert engine.abort("a") == []
    out = run(engine)
    assert "a" not in out and out["b"][0][2] == "length"
    assert engine.scheduler.kv.num_free_blocks == engine.runner.num_blocks


def test_stats_report_usage_and_fragmentation():
    engine = make_engine(num_blocks=32)
    engine.add_request(request("a", prompt_ids(5), 20))
    engine.step()  # 5 tokens computed in 2 blocks of 4: 3 of 8 slots empty
    s = engine.stats()
    assert s.running["hot"] == 1 and s.used_blocks == 2
    assert s.kv_usage == pytest.approx(2 / 32)
    assert s.kv_fragmentation == pytest.approx(3 / 8)
    assert s.tokens_per_s > 0 and s.num_steps == 1
    assert engine.stats().to_dict()["used_blocks"] == 2


def test_laser_policy_learns_step_time_from_real_steps():
    engine = make_engine(policy="laser")
    cost = engine.scheduler.cost
    prior = [(line.base, line.per_token) for line in (cost.decode, cost.prompt)]
    engine.add_request(request("a", prompt_ids(12), 6))
    engine.add_request(request("b", prompt_ids(5, 2), 6))
    for _ in range(3):
        engine.step()
    engine.add_request(request("c", prompt_ids(7, 3), 6))
    run(engine)
    # one observation per step that ran the model: the steps that only decode teach the
    # decode line, the prompt steps after one what their prompt chunks add
    assert cost.prompt.samples >= 1 and cost.decode.samples >= 5
    assert [(line.base, line.per_token) for line in (cost.decode, cost.prompt)] != prior


def test_overload_factor_reaches_the_laser_policy():
    assert make_engine(policy="laser", overload_ttft_factor=7.5).scheduler.policy \
        .overload_ttft_factor == 7.5
    assert make_engine(policy="laser").scheduler.policy.overload_ttft_factor == 10.0  # config
    with pytest.raises(ValueError, match="overload_ttft_factor"):
        make_engine(policy="laser", overload_ttft_factor=0.5)


def test_steps_set_the_pools_spin():
    """The C kernels' pool polls ``pool_spin_us`` after each call: every step sets it, so two
    engines in one process each run with their own."""
    from kernels import _cpu

    lib = _cpu.library()
    if lib is None:
        pytest.skip("no C compiler here")
    try:
        for spin in (7, 0):
            engine = make_engine(pool_spin_us=spin)
            engine.add_request(request("r", prompt_ids(5), max_tokens=2))
            run(engine)
            assert lib.laser_pool_spin() == spin
    finally:
        _cpu.set_threads(0, 0)


def test_wide_steps_run_on_the_wide_thread_count():
    """A prefill of 64 tokens and more runs on ``wide_threads``, decode steps on
    ``num_threads``; the engine switches torch's count per step and keeps the results."""
    import torch

    before = torch.get_num_threads()
    seen: list[tuple[int, int]] = []
    try:
        engine = make_engine(wide_threads=2, max_num_batched_tokens=128)  # num_threads=1
        engine.add_request(request("wide", prompt_ids(140), max_tokens=3))
        run(engine, on_step=lambda *_: seen.append(torch.get_num_threads()))
        # on_step runs before each step: it sees what the step before it set
        assert seen[1] == 2 and seen[-1] == 1, seen  # the 128-token prefill chunk, then decodes
    finally:
        torch.set_num_threads(before)
