"""The greedy pick (``kernels.argmax``; ``laser_argmax_rows`` in ``kernels/_cpu``) gives
``torch.argmax``'s index on every row: first of tied maxima, a NaN before any number, rows of
-inf, every length around the vector width, every thread count."""

from __future__ import annotations

import math

import pytest
import torch

import kernels
from kernels import _cpu

pytestmark = pytest.mark.skipif(_cpu.library() is None, reason="the C kernels do not build here")


@pytest.fixture(autouse=True)
def _restore():
    yield
    _cpu.set_threads(0)


def _rows(n: int, seed: int) -> torch.Tensor:
    """Random rows, then rows with ties, NaNs, infinities and signed zeros at the edges of
    the 8-value blocks and the tail."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(12, n, generator=g)
    last = n - 1
    x[1] = 0.5  # all equal: index 0
    x[2, last] = x[2].max() + 1  # the maximum in the tail
    x[3, min(8, last)] = x[3, last] = 100.0  # a tie: the first one
    x[4, last] = math.nan  # a NaN wins over every number
    x[5, min(3, last)] = math.nan
    x[5, last] = math.nan  # the first NaN
    x[6] = -math.inf  # all -inf: index 0
    x[7, last] = math.inf
    x[8] = -0.0
    x[8, last] = 0.0  # -0 == 0: the first
    x[9] = torch.finfo(torch.float32).min
    x[10, n // 2] = math.nan
    x[11].neg_()
    return x


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 15, 16, 17, 64, 100, 49152])
def test_argmax_equals_torch(n):
    x = _rows(n, n)
    want = torch.argmax(x, dim=-1)
    for threads in (1, 2, 3):
        _cpu.set_threads(threads)
        for got in (_cpu.argmax_rows(x), kernels.argmax(x)):  # the C kernel, the dispatch
            assert got.dtype == torch.int64
            assert torch.equal(got, want), (threads, got, want)


def test_argmax_many_rows_and_views():
    x = torch.randn(70, 300, generator=torch.Generator().manual_seed(1))
    _cpu.set_threads(2)
    assert torch.equal(kernels.argmax(x), x.argmax(-1))
    view = x[:, ::2]  # not contiguous: the reference path
    assert torch.equal(kernels.argmax(view), view.argmax(-1))
    assert kernels.argmax(x[:0]).shape == (0,)
