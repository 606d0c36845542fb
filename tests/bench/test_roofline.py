"""bench/roofline.py: the int8 loop runs what it counts, and shares are work over peak."""

from __future__ import annotations

import math
import platform

import pytest


def test_fractions_are_work_per_second_over_each_peak(roofline):
    limits = {"int8_peak_gops": 400.0, "bf16_gflops": 200.0, "f32_gflops": 100.0,
              "read_gbs": 20.0}
    got = roofline.fractions(limits, int8_ops=100e9, flops=50e9, bytes_read=4e9, seconds=0.5)
    assert got["of_int8"] == pytest.approx(0.5)
    assert got["of_bf16"] == pytest.approx(0.5) and got["of_f32"] == pytest.approx(1.0)
    assert got["of_read"] == pytest.approx(0.4)
    assert math.isnan(roofline.fractions(limits, seconds=1.0)["of_int8"])  # no work stated


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 vector paths")
def test_int8_loop_counts_the_groups_it_runs(roofline):
    lib = roofline._library()
    avx2 = roofline.INT8_PATHS.index("avx2")
    if not lib.roofline_pairs(avx2):
        pytest.skip("no AVX2 here")
    assert lib.roofline_run(avx2, 1000, 2) == 1000 * 12 * 2
    assert lib.roofline_run(avx2, 1000, 0) == 0
    assert roofline.int8_gops("avx2", 1, repeats=1, iters=10_000) > 0
