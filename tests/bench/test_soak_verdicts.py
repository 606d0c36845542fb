"""The verdict side of bench/soak.py: the slope test that says whether a series grew (no
server: the soak itself runs only as a benchmark)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.bench.conftest import bench_module

MINUTES = [60.0 * m for m in range(10)]


@pytest.fixture(scope="module")
def soak() -> Iterator[ModuleType]:
    yield from bench_module("soak")


def test_a_flat_or_noisy_series_did_not_grow(soak):
    assert soak.slope_test(MINUTES, [40.0] * 10, 0.1)["grew"] is False
    noisy = [40, 44, 38, 41, 39, 43, 40, 38, 42, 40]
    assert soak.slope_test(MINUTES, [float(y) for y in noisy], 0.1)["grew"] is False


def test_a_steady_climb_grew(soak):
    verdict = soak.slope_test(MINUTES, [100.0 + 3 * m + (m % 2) for m in range(10)], 0.1)
    assert verdict["grew"] is True and verdict["slope_per_min"] == pytest.approx(3.0, abs=0.2)


def test_a_climb_below_the_tolerance_or_one_unit_is_not_growth(soak):
    assert soak.slope_test(MINUTES, [1000.0 + m for m in range(10)], 0.1)["grew"] is False
    assert soak.slope_test(MINUTES, [3.0] * 9 + [3.5], 0.1)["grew"] is False


def test_too_few_samples_give_no_verdict(soak):
    assert soak.slope_test(MINUTES[:2], [1.0, 2.0], 0.1)["grew"] is None


def test_rss_is_held_to_an_absolute_growth(soak):
    climb = [3300.0 + 10 * m for m in range(10)]  # 90 MB over the run, under 10 % of 3.3 GB
    assert soak.slope_test(MINUTES, climb, 0.1)["grew"] is False
    assert soak.slope_test(MINUTES, climb, 0.1, absolute=64.0)["grew"] is True
