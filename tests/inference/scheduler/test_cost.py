from __future__ import annotations

import pytest

from inference.scheduler import EwmaCostEstimator, LinearCost
from inference.scheduler.cost import max_tokens_within


def test_ewma_learns_a_line_from_measured_steps():
    est = EwmaCostEstimator(base=0.5, per_token=0.5, alpha=0.1)
    for i in range(400):
        tokens = 1 + (i * 37) % 512
        est.observe_step(tokens, 0.004 + 1e-5 * tokens)
    assert est.base == pytest.approx(0.004, rel=0.02)
    assert est.per_token == pytest.approx(1e-5, rel=0.02)


def test_ewma_with_one_token_count_scales_its_prior():
    est = EwmaCostEstimator(base=0.01, per_token=0.001)
    est.observe_step(10, 0.04)  # the prior said 0.02
    assert est.step_time(10) == pytest.approx(0.04)
    assert est.step_time(0) == pytest.approx(0.02)


def test_ewma_ignores_empty_steps():
    est = EwmaCostEstimator(base=0.01, per_token=0.001)
    est.observe_step(0, 5.0)
    assert est.step_time(10) == pytest.approx(0.02)


@pytest.mark.parametrize("seconds, expect", [(0.0, 0), (0.015, 5), (1.0, 64)])
def test_max_tokens_within_inverts_the_estimate(seconds, expect):
    assert max_tokens_within(LinearCost(0.01, 0.001), seconds, 0, 64) == expect
