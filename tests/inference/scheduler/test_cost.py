from __future__ import annotations

import pytest

from inference.scheduler import EwmaCostEstimator, LinearCost
from inference.scheduler.cost import max_tokens_within


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


def test_ewma_prices_steps_with_prompt_chunks_on_their_own_line():
    est = EwmaCostEstimator(alpha=0.1)
    for i in range(400):
        rows = 1 + (i * 37) % 64
        est.observe_step(rows, 0.010 + 1e-3 * rows)  # decode-only steps
        chunk = 16 + (i * 53) % 256
        est.observe_step(rows + chunk, 0.015 + 2e-3 * (rows + chunk), chunk)
    assert est.step_time(64) == pytest.approx(0.010 + 0.064, rel=0.02)
    assert est.step_time(66, 0, 2) == pytest.approx(0.015 + 0.132, rel=0.02)
    # one line through both would price the 64 rows dearer and the chunk cheaper
    assert est.decode.per_token == pytest.approx(1e-3, rel=0.02)


def test_ewma_prompt_steps_never_cost_less_than_their_decode_rows():
    est = EwmaCostEstimator(alpha=0.5)
    for rows in (1, 8, 64):
        est.observe_step(rows, 0.010 + 1e-3 * rows)
    for tokens in (32, 512):
        est.observe_step(tokens, 0.002 + 1e-4 * tokens, tokens)  # cheaper per token
    times = [est.step_time(n, 0, max(0, n - 8)) for n in range(0, 600)]
    assert times == sorted(times)  # monotone: the fill bisects on it
    assert est.step_time(64, 0, 56) >= est.step_time(64)


def test_ewma_line_without_samples_takes_the_others():
    est = EwmaCostEstimator(base=0.5, per_token=0.5)
    est.observe_step(10, 0.04, 10)
    est.observe_step(100, 0.13, 100)
    assert est.step_time(50) == pytest.approx(est.step_time(50, 0, 50))  # no decode samples
    est.observe_step(10, 0.02)  # the decode line starts from the prompt line's fit
    assert est.decode.per_token == pytest.approx(est.prompt.per_token * 0.02 / 0.04)


def test_max_tokens_within_prices_tokens_past_the_decode_rows_as_prompt():
    est = EwmaCostEstimator(alpha=0.5)  # two samples fit each line exactly
    est.observe_step(10, 0.020)
    est.observe_step(20, 0.030)  # decode: 0.01 + 1e-3 a row
    est.observe_step(20, 0.050, 10)
    est.observe_step(40, 0.090, 30)  # prompt steps: 0.01 + 2e-3 a token
    assert max_tokens_within(est, 0.0505, 0, 100) == 40
    assert max_tokens_within(est, 0.0505, 0, 100, decode_rows=8) == 20


@pytest.mark.parametrize("seconds, expect", [(0.0, 0), (0.015, 5), (1.0, 64)])
def test_max_tokens_within_inverts_the_estimate(seconds, expect):
    assert max_tokens_within(LinearCost(0.01, 0.001), seconds, 0, 64) == expect
