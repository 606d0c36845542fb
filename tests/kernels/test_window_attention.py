"""Sliding-window, soft-capped paged attention and GeGLU: the references against dense oracles,
the Triton kernels (interpreter) and the C GeGLU against them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kernels import _cpu
from kernels._triton.activation import gelu_and_mul_triton
from kernels._triton.window_attention import paged_window_attention_triton
from kernels.activation import gelu_and_mul_reference
from kernels.prefill_attention import paged_prefill_attention_reference
from kernels.window_attention import paged_window_attention_reference
from tests.kernels.paged import dense_kv, make_paged, rel_err

# (query lengths, sequence lengths): decodes, prompt chunks, a resumed chunk, mixed
BATCHES = [([1, 1], [5, 33]), ([9], [9]), ([4, 1, 6], [20, 7, 6])]


def _dense(q, k, v, scale, window, softcap):
    """q ``[n, H, D]`` at the last n of L positions, k/v ``[L, KVH, D]``; float64."""
    n, total, group = q.shape[0], k.shape[0], q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, 1).transpose(0, 1)  # [H, L, D]
    v = v.double().repeat_interleave(group, 1).transpose(0, 1)
    s = q.double().transpose(0, 1) @ k.transpose(1, 2) * scale  # [H, n, L]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    out = torch.empty(q.shape, dtype=torch.float64)
    for j in range(n):
        p = total - n + j
        lo = 0 if window is None else max(0, p - window + 1)
        probs = s[:, j, lo:p + 1].softmax(-1)
        out[j] = (probs[:, None, :] @ v[:, lo:p + 1]).squeeze(1)
    return out


def _case(q_lens, seq_lens, heads=(4, 2), head_dim=24, block=4):
    k_cache, v_cache, tables = make_paged(seq_lens, block, heads[1], head_dim)
    q = torch.randn(sum(q_lens), heads[0], head_dim)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    return q, k_cache, v_cache, tables, qsl, torch.tensor(seq_lens, dtype=torch.int32)


@pytest.mark.parametrize("q_lens,seq_lens", BATCHES)
@pytest.mark.parametrize("window,softcap", [(None, None), (3, None), (None, 2.0), (5, 1.5)])
def test_reference_matches_dense(q_lens, seq_lens, window, softcap):
    q, k_cache, v_cache, tables, qsl, lens = _case(q_lens, seq_lens)
    scale = 1 / math.sqrt(q.shape[-1])
    out = paged_window_attention_reference(q, k_cache, v_cache, tables, qsl, lens, scale,
                                           window, softcap)
    starts = qsl.tolist()
    for i, total in enumerate(seq_lens):
        rows = slice(starts[i], starts[i + 1])
        want = _dense(q[rows], dense_kv(k_cache, tables[i], total),
                      dense_kv(v_cache, tables[i], total), scale, window, softcap)
        assert rel_err(out[rows], want) < 1e-5
    if window is None and softcap is None:
        plain = paged_prefill_attention_reference(q, k_cache, v_cache, tables, qsl, lens, scale)
        assert rel_err(out, plain) < 1e-5


@pytest.mark.parametrize("q_lens,seq_lens", BATCHES)
@pytest.mark.parametrize("window,softcap", [(None, None), (3, 2.0), (40, None)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
def test_triton_matches_reference(q_lens, seq_lens, window, softcap, dtype, tol):
    q, k_cache, v_cache, tables, qsl, lens = _case(q_lens, seq_lens)
    q, k_cache, v_cache = q.to(dtype), k_cache.to(dtype), v_cache.to(dtype)
    args = (q, k_cache, v_cache, tables, qsl, lens, 0.2, window, softcap)
    ref = paged_window_attention_reference(*args)
    assert rel_err(paged_window_attention_triton(*args), ref) <= tol


@pytest.mark.parametrize("rows,d", [(1, 8), (5, 300)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float16, 1e-3)])
def test_gelu_and_mul(rows, d, dtype, tol):
    x = (3 * torch.randn(rows, 2 * d)).to(dtype)
    want = (F.gelu(x[:, :d].double(), approximate="tanh") * x[:, d:].double())
    assert rel_err(gelu_and_mul_reference(x), want) <= tol
    assert rel_err(gelu_and_mul_triton(x), want) <= tol
    if _cpu.library() is not None and dtype == torch.float32:
        assert rel_err(_cpu.silu_and_mul(x, dtype, gelu=True), want) <= tol
        assert abs(_cpu.silu_and_mul(torch.tensor([[-100.0, 1.0]]), dtype, gelu=True)) < 1e-30
