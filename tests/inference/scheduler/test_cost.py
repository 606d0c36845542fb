from __future__ import annotations

import pytest

from inference.scheduler import EwmaCostEstimator, LinearCost
from inference.scheduler.cost import EwmaLine, max_tokens_within


def test_ewma_learns_a_line_from_measured_steps():
    est = EwmaCostEstimator(base=0.5, per_token=0.5, alpha=0.1)
    for i in range(400):
        tokens = 1 + (i * 37) % 512
        est.observe_step(tokens, 0.004 + 1e-5 * tokens)
    assert est.decode.base == pytest.approx(0.004, rel=0.02)
    assert est.decode.per_token == pytest.approx(1e-5, rel=0.02)


def test_ewma_with_one_token_count_scales_its_prior():
    est = EwmaCostEstimator(base=0.01, per_token=0.001)
    est.observe_step(10, 0.04)  # the prior said 0.02
    assert est.step_time(10) == pytest.approx(0.04)
    assert est.step_time(0) == pytest.approx(0.02)


def test_ewma_ignores_empty_steps():
    est = EwmaCostEstimator(base=0.01, per_token=0.001)
    est.observe_step(0, 5.0)
    assert est.step_time(10) == pytest.approx(0.02)


def test_ewma_prices_what_prompt_chunks_add_to_a_step_on_its_own_line():
    est = EwmaCostEstimator(alpha=0.1)
    for i in range(400):
        rows = 1 + (i * 37) % 64
        est.observe_step(rows, 0.010 + 1e-3 * rows)  # decode-only steps
        chunk = 1 + (i * 53) % 256
        # a prompt step: its tokens as decode rows, plus 5 ms and 1 ms a prompt token
        est.observe_step(rows + chunk, 0.015 + 1e-3 * rows + 2e-3 * chunk, chunk)
    assert est.step_time(64) == pytest.approx(0.010 + 0.064, rel=0.02)
    assert est.step_time(66, 0, 2) == pytest.approx(0.015 + 0.064 + 0.004, rel=0.02)
    assert est.step_time(300, 0, 256) == pytest.approx(0.015 + 0.044 + 0.512, rel=0.02)
    # one line through every prompt step's tokens would price the first of these at
    # 0.015 + 2e-3 a token whatever its mix (0.147 s): no prompt beside 64 decodes
    assert est.prompt.per_token == pytest.approx(1e-3, rel=0.02)


def test_ewma_prompt_steps_never_cost_less_than_their_decode_rows():
    est = EwmaCostEstimator(alpha=0.5)
    for rows in (1, 8, 64):
        est.observe_step(rows, 0.010 + 1e-3 * rows)
    for tokens in (32, 512):
        est.observe_step(tokens, 0.002 + 1e-4 * tokens, tokens)  # cheaper per token
    times = [est.step_time(n, 0, max(0, n - 8)) for n in range(0, 600)]
    assert times == sorted(times)  # monotone: the fill bisects on it
    assert est.step_time(64, 0, 56) >= est.step_time(64)


def test_ewma_prompt_steps_stand_in_for_decode_steps_until_one_runs():
    est = EwmaCostEstimator(base=0.5, per_token=0.5)
    est.observe_step(10, 0.04, 10)
    est.observe_step(100, 0.13, 100)
    assert est.step_time(50) == pytest.approx(0.04 + 0.001 * 40)  # their line, as decode
    assert est.step_time(50, 0, 50) == est.step_time(50)  # nothing added yet
    slope = est.decode.per_token
    est.observe_step(10, 0.02)  # the first decode step: the line's shape, its level
    assert est.decode.samples == 1
    assert est.step_time(10) == pytest.approx(0.02)
    assert est.decode.per_token == pytest.approx(slope * 0.02 / 0.04)
    est.observe_step(20, 0.05, 10)  # now prompt steps teach what they add
    assert est.step_time(20, 0, 10) == pytest.approx(0.05)


def test_ewma_steps_of_one_width_move_the_level_not_the_slope():
    """64 streams' prompt chunks are 9-11 tokens for long stretches; a noisy machine made the
    unguarded fit's slope 22 ms a token (1.1 ms measured) and admission refused requests."""
    guarded, plain = EwmaLine(0.0, 1e-3, 0.05, spread=0.25), EwmaLine(0.0, 1e-3, 0.05)
    for line in (guarded, plain):
        for i in range(200):  # wide chunks first: the slope is learned, 1 ms a token
            line.observe(1 + (i * 37) % 256, 0.002 + 1e-3 * (1 + (i * 37) % 256))
        for i in range(200):  # then 9-11 tokens, the 11s slow: noise, not a slope
            x = 9 + i % 3
            line.observe(x, 0.002 + 1e-3 * x + (0.02 if x == 11 else 0.0))
    level = 0.002 + 0.010 + 0.02 / 3  # what 10 tokens took, on average
    assert plain.per_token > 5e-3 and plain.at(10) > 2 * level
    # frozen where the widths stopped spreading (the window then still held wide steps)
    assert guarded.per_token < 2.5e-3
    assert guarded.at(10) == pytest.approx(level, rel=0.1)


def test_ewma_one_slow_step_moves_a_clipped_line_a_little():
    clipped, plain = EwmaLine(0.01, 1e-3, 0.1, clip=3.0), EwmaLine(0.01, 1e-3, 0.1)
    for line in (clipped, plain):
        for i in range(100):
            rows = 1 + (i * 37) % 64
            line.observe(rows, 0.010 + 1e-3 * rows + (0.001 if i % 2 else -0.001))
        line.observe(32, 0.042 + 0.100)  # another process took the cores for 100 ms
    assert plain.at(32) > 0.042 + 0.008
    assert clipped.at(32) < 0.042 + 0.002
    for i in range(200):  # a lasting change is followed all the same: the machine got slower
        rows = 1 + (i * 37) % 64
        clipped.observe(rows, 2 * (0.010 + 1e-3 * rows))
    assert clipped.at(32) == pytest.approx(0.084, rel=0.02)


def test_max_tokens_within_prices_tokens_past_the_decode_rows_as_prompt():
    est = EwmaCostEstimator(alpha=0.5)  # two samples fit each line exactly
    est.observe_step(10, 0.020)
    est.observe_step(20, 0.030)  # decode: 0.01 + 1e-3 a row
    est.observe_step(20, 0.045, 10)
    est.observe_step(40, 0.085, 30)  # prompt chunks add 0.005 + 1e-3 a prompt token
    assert max_tokens_within(est, 0.0505, 0, 100) == 40
    assert max_tokens_within(est, 0.0505, 0, 100, decode_rows=8) == 21


@pytest.mark.parametrize("seconds, expect", [(0.0, 0), (0.015, 5), (1.0, 64)])
def test_max_tokens_within_inverts_the_estimate(seconds, expect):
    assert max_tokens_within(LinearCost(0.01, 0.001), seconds, 0, 64) == expect


def test_ewma_decode_steps_of_one_width_keep_the_slope_prompt_steps_are_priced_by():
    """2 chats + 14 bulk streams decode 16 rows a step for long stretches while their context
    grows; that drift is no slope, and a slope of 0 would price a prompt step's tokens as
    free (6 decodes + 54 prompt tokens at 56 ms where it took 92)."""
    est = EwmaCostEstimator(alpha=0.05)
    for i in range(300):  # widths spread (a load ending): 1 ms a row is learned
        rows = 1 + (i * 37) % 64
        est.observe_step(rows, 0.004 + 1e-3 * rows)
    for i in range(600):  # then 16 rows a step, slower as the context grows, with noise
        est.observe_step(16 if i % 7 else 15, 0.020 + 1e-5 * i + (0.002 if i % 2 else -0.002))
    assert est.decode.per_token == pytest.approx(1e-3, rel=0.1)
    assert est.step_time(16) == pytest.approx(0.020 + 1e-5 * 600, rel=0.1)
    assert est.step_time(60) > est.step_time(16) + 0.035  # 44 more tokens, about 1 ms each
