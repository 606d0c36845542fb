"""Paged decode and prefill attention: Triton (interpreter) against the references."""

from __future__ import annotations

import pytest
import torch

from kernels._triton.decode_attention import paged_decode_attention_triton
from kernels._triton.prefill_attention import paged_prefill_attention_triton
from kernels.decode_attention import paged_decode_attention_reference
from kernels.prefill_attention import paged_prefill_attention_reference
from tests.kernels.paged import make_paged, rel_err

DTYPES = [(torch.float32, 1e-5), (torch.float16, 1e-3)]
# (heads, kv heads, head dim, page size): GQA 9/3 and 32/8, MHA 1/1, MQA 4/1
SHAPES = [(9, 3, 64, 16), (32, 8, 128, 32), (1, 1, 64, 32), (4, 1, 128, 16)]


def _poison_empty(monkeypatch):
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: empty(*a, **k).fill_(float("nan")))


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,head_dim,page", SHAPES)
@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode(heads, kv_heads, head_dim, page, num_splits, dtype, tol, monkeypatch):
    seq_lens = [1, page, 3 * page + 5]  # a single token, one full page, pages + a partial one
    k_cache, v_cache, tables = make_paged(seq_lens, page, kv_heads, head_dim, dtype)
    q = torch.randn(len(seq_lens), heads, head_dim).to(dtype)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    ref = paged_decode_attention_reference(q, k_cache, v_cache, tables, lens, head_dim**-0.5)
    _poison_empty(monkeypatch)
    out = paged_decode_attention_triton(
        q, k_cache, v_cache, tables, lens, head_dim**-0.5, num_splits=num_splits, block_n=32
    )
    assert rel_err(out, ref) <= tol


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,head_dim,page", SHAPES)
def test_prefill_mixed_batch(heads, kv_heads, head_dim, page, dtype, tol, monkeypatch):
    # a decode, a fresh prompt, a chunk after a cached prefix ending mid-page, a 1-token prompt
    seq_lens = [2 * page + 3, page + 7, 2 * page + 9, 1]
    q_lens = [1, page + 7, 20, 1]
    k_cache, v_cache, tables = make_paged(seq_lens, page, kv_heads, head_dim, dtype)
    q = torch.randn(sum(q_lens), heads, head_dim).to(dtype)
    starts = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    args = (q, k_cache, v_cache, tables, starts, lens, head_dim**-0.5)
    ref = paged_prefill_attention_reference(*args)
    _poison_empty(monkeypatch)
    out = paged_prefill_attention_triton(*args, block_m=16, block_n=32)
    assert rel_err(out, ref) <= tol
