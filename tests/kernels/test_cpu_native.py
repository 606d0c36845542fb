"""The C kernels of ``kernels/_cpu`` against the PyTorch references and a naive oracle, and the
model's native CPU path against its PyTorch path."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

import kernels
from kernels import _cpu
from kernels.activation import silu_and_mul_reference
from kernels.kv_cache import write_kv_reference
from kernels.rms_norm import rms_norm_reference
from kernels.rotary import build_cos_sin_cache, rotary_embedding_reference
from tests.kernels.backend import use_backend
from tests.kernels.paged import make_paged, rel_err
from tests.kernels.test_decode_reference import naive_decode

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler on this machine")


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    assert _cpu.library() is not None, "the CPU kernels did not build (see the log warning)"


BF16 = torch.bfloat16


@pytest.mark.parametrize("x_dtype", [torch.float32, BF16])
@pytest.mark.parametrize("out_dtype", [torch.float32, BF16])
@pytest.mark.parametrize("with_residual", [False, True])
def test_add_rms_norm_matches_the_reference(x_dtype, out_dtype, with_residual) -> None:
    x = (torch.randn(7, 576) * 3).to(x_dtype)
    weight = torch.randn(576)
    residual = torch.randn(7, 576) if with_residual else None
    if with_residual:
        ref, ref_h = rms_norm_reference(x.float(), weight, 1e-5, residual)
    else:
        ref = rms_norm_reference(x.float(), weight, 1e-5)
    inout = residual.clone() if with_residual else None
    out = _cpu.add_rms_norm(x, weight, 1e-5, inout, out_dtype)
    assert out.dtype == out_dtype and out.shape == (7, 576)
    # float32 differs from the reference in summation order only; bfloat16 in one rounding
    assert (out.float() - ref).abs().max() <= (2e-5 if out_dtype == torch.float32 else 0.02) * \
        ref.abs().max()
    if with_residual:
        torch.testing.assert_close(inout, ref_h, rtol=0, atol=0)  # the sum, written in place


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_rope_write_kv_matches_rotary_and_write_kv(dtype) -> None:
    heads, kv_heads, dim, tokens = 9, 3, 64, 6
    cos_sin = build_cos_sin_cache(dim, 512, 10000.0)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim).to(dtype)
    positions = torch.tensor([0, 5, 17, 300, 511, 2])
    slots = torch.tensor([3, 40, -1, 7, 63, 12])  # -1: padding, not written
    caches = [torch.full((4, 16, kv_heads, dim), float("nan")) for _ in range(4)]
    q, k, v = qkv.float().split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q, k = q.reshape(tokens, heads, dim).clone(), k.reshape(tokens, kv_heads, dim).clone()
    rotary_embedding_reference(positions, q, k, cos_sin)
    write_kv_reference(k, v.reshape(tokens, kv_heads, dim), caches[0], caches[1], slots)
    out = _cpu.rope_write_kv(qkv, positions, cos_sin, caches[2], caches[3], slots, heads)
    torch.testing.assert_close(out, q, rtol=0, atol=0)
    torch.testing.assert_close(caches[2], caches[0], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(caches[3], caches[1], rtol=0, atol=0, equal_nan=True)


# (heads, kv_heads, head_dim): SmolLM2's shape and four queries a KV head (the vector paths,
# AVX-512 or AVX2), and the plain C path
@pytest.mark.parametrize("shape", [(9, 3, 64), (8, 2, 64), (8, 1, 32), (4, 4, 48)])
@pytest.mark.parametrize("out_dtype", [torch.float32, BF16])
def test_decode_attention_matches_a_naive_softmax(shape, out_dtype) -> None:
    heads, kv_heads, dim = shape
    seq_lens = [1, 16, 17, 90, 33]
    k_cache, v_cache, tables = make_paged(seq_lens, 16, kv_heads, dim)  # NaN in unwritten rows
    q = torch.randn(len(seq_lens), heads, dim)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    out = _cpu.paged_attention(q, k_cache, v_cache, tables, lens, dim ** -0.5, out_dtype)
    ref = naive_decode(q, k_cache, v_cache, tables, seq_lens, dim ** -0.5)
    assert out.dtype == out_dtype
    assert rel_err(out, ref) < (1e-6 if out_dtype == torch.float32 else 5e-3)


# the float16 cache (the default beside the approximate matmuls): the same attention over the
# cached values, read as float32
@pytest.mark.parametrize("shape", [(9, 3, 64), (8, 2, 64), (8, 1, 32)])
@pytest.mark.parametrize("chunks", [False, True])
def test_attention_over_a_float16_cache_is_the_attention_over_its_values(shape, chunks) -> None:
    from kernels.prefill_attention import paged_prefill_attention_reference

    heads, kv_heads, dim = shape
    seq_lens, q_lens = [1, 16, 17, 90, 33], [1, 5, 1, 20, 33]
    k_cache, v_cache, tables = make_paged(seq_lens, 16, kv_heads, dim)
    k16, v16 = k_cache.half(), v_cache.half()
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    if chunks:
        q = torch.randn(sum(q_lens), heads, dim)
        qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
        out = _cpu.paged_attention(q, k16, v16, tables, lens, dim ** -0.5, torch.float32, qsl)
        ref = paged_prefill_attention_reference(q, k16.float(), v16.float(), tables, qsl, lens,
                                                dim ** -0.5)
        # the reference's own path for a float16 cache under float32 queries
        mixed = paged_prefill_attention_reference(q, k16, v16, tables, qsl, lens, dim ** -0.5)
        assert rel_err(mixed, ref) < 1e-6
    else:
        q = torch.randn(len(seq_lens), heads, dim)
        out = _cpu.paged_attention(q, k16, v16, tables, lens, dim ** -0.5, torch.float32)
        ref = naive_decode(q, k16.float(), v16.float(), tables, seq_lens, dim ** -0.5)
    assert rel_err(out, ref) < 1e-6
    with pytest.raises(ValueError, match="v_cache"):
        _cpu.paged_attention(q, k16, v_cache, tables, lens, 1.0, torch.float32)


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.float16])
def test_decode_attention_is_the_same_bits_however_its_work_is_split(kv_dtype) -> None:
    """Enough sequences for every thread and AVX-512: a row's heads are attended in one task
    (whole tokens in order); fewer, one task per head. Each head's arithmetic is the same, so
    the result is too, bit for bit, and a mixed step's decode rows get it as well."""
    seq_lens = [1, 16, 17, 90, 33, 200, 5, 64, 31, 2, 48, 150, 77, 16, 9, 120]
    k_cache, v_cache, tables = make_paged(seq_lens, 16, 3, 64)
    k_cache, v_cache = k_cache.to(kv_dtype), v_cache.to(kv_dtype)
    q = torch.randn(len(seq_lens), 9, 64)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    ref = naive_decode(q, k_cache.float(), v_cache.float(), tables, seq_lens, 0.125)
    outs = []
    try:
        for threads in (1, 2, 3, 8):  # 16 sequences: one task a row up to 4 threads
            _cpu.set_threads(threads)
            outs.append(_cpu.paged_attention(q, k_cache, v_cache, tables, lens, 0.125,
                                             torch.float32))
        _cpu.set_threads(1)
        qsl = torch.arange(len(seq_lens) + 1, dtype=torch.int32)  # one row each, as chunks
        outs.append(_cpu.paged_attention(q, k_cache, v_cache, tables, lens, 0.125,
                                         torch.float32, qsl))
    finally:
        _cpu.set_threads(0)
    assert rel_err(outs[0], ref) < 1e-6
    for out in outs[1:]:
        torch.testing.assert_close(out, outs[0], rtol=0, atol=0)


@pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump to read the build with")
def test_the_vector_attention_issues_its_prefetches() -> None:
    """The attention's prefetch helper must inline into it: as a plain ``static inline``
    holding only prefetches GCC 12 found it pure and deleted every call, so the attention
    issued none (docs/engine.md). Read from the build itself: no timing involved."""
    from kernels._cpu import quant

    if not quant.supported():
        pytest.skip("no vector path on this CPU (the plain-C attention prefetches nothing)")
    lib = _cpu.library()
    assert lib is not None
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib._name],
                         capture_output=True, text=True, check=True).stdout
    body = asm.split("<attn_task>:", 1)[1].split("\n\n", 1)[0]
    assert "prefetcht" in body


def test_rope_write_kv_into_a_float16_cache_rounds_what_it_writes() -> None:
    heads, kv_heads, dim, tokens = 9, 3, 64, 5
    cos_sin = build_cos_sin_cache(dim, 512, 10000.0)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim) * 4
    positions, slots = torch.tensor([0, 5, 17, 300, 2]), torch.tensor([3, 0, -1, 7, 60])
    wide = [torch.zeros(4, 16, kv_heads, dim) for _ in range(2)]
    narrow = [torch.zeros(4, 16, kv_heads, dim, dtype=torch.float16) for _ in range(2)]
    q32 = _cpu.rope_write_kv(qkv, positions, cos_sin, *wide, slots, heads)
    q16 = _cpu.rope_write_kv(qkv, positions, cos_sin, *narrow, slots, heads)
    torch.testing.assert_close(q16, q32, rtol=0, atol=0)
    for a, b in zip(narrow, wide):
        torch.testing.assert_close(a, b.half(), rtol=0, atol=0)  # round to nearest even


@pytest.mark.parametrize("shape", [(9, 3, 64), (4, 4, 48)])
def test_paged_attention_of_mixed_chunks_matches_the_prefill_reference(shape) -> None:
    """Decode rows and prompt chunks in one step: each chunk row attends causally (up to its
    own position), as ``paged_prefill_attention`` does with SDPA."""
    from kernels.prefill_attention import paged_prefill_attention_reference

    heads, kv_heads, dim = shape
    seq_lens, q_lens = [1, 16, 17, 90, 33], [1, 5, 1, 20, 33]
    k_cache, v_cache, tables = make_paged(seq_lens, 16, kv_heads, dim)
    q = torch.randn(sum(q_lens), heads, dim)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    out = _cpu.paged_attention(q, k_cache, v_cache, tables, lens, dim ** -0.5, torch.float32,
                               qsl)
    ref = paged_prefill_attention_reference(q, k_cache, v_cache, tables, qsl, lens, dim ** -0.5)
    assert rel_err(out, ref) < 1e-5
    with pytest.raises(ValueError, match="query_start_loc"):
        _cpu.paged_attention(q, k_cache, v_cache, tables, lens, 1.0, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_silu_and_mul_matches_the_reference(dtype) -> None:
    x = torch.cat([torch.randn(5, 40) * 4, torch.tensor([[-100.0, -88.5, 0.0, 89.0, 100.0] * 8])])
    x = x.to(dtype)
    ref = silu_and_mul_reference(x.float())
    out = _cpu.silu_and_mul(x, dtype)
    assert out.dtype == dtype and out.shape == (6, 20)
    tol = 1e-6 if dtype == torch.float32 else 8e-3
    assert torch.all((out.float() - ref).abs() <= tol * ref.abs() + 1e-30)


def test_kernels_flush_denormals_and_give_the_caller_its_float_mode_back() -> None:
    """Denormals in and out of a kernel are zero (their microcode assists made Intel's SiLU
    4.6x slower, laser_pool.c); the calling thread's own arithmetic keeps them after the call."""
    gate_up = torch.tensor([[1e-39, 1.0]])  # silu(1e-39) * 1 = 5e-40: a denormal
    assert _cpu.silu_and_mul(gate_up, torch.float32).item() == 0.0
    assert (torch.tensor([1e-39]) * 0.5).item() != 0.0


def test_wrappers_refuse_what_the_c_code_does_not_handle() -> None:
    with pytest.raises(ValueError, match="contiguous CPU tensor"):
        _cpu.silu_and_mul(torch.randn(4, 8).t(), torch.float32)
    with pytest.raises(ValueError, match="contiguous CPU tensor"):
        _cpu.add_rms_norm(torch.randn(2, 8, dtype=torch.float64), torch.ones(8), 1e-5, None,
                          torch.float32)
    with pytest.raises(ValueError, match="do not group"):
        k = torch.zeros(1, 16, 3, 8)
        _cpu.paged_attention(torch.zeros(1, 4, 8), k, k, torch.zeros(1, 1, dtype=torch.int32),
                              torch.ones(1, dtype=torch.int32), 1.0, torch.float32)


def test_native_backend_is_chosen_on_cpu_and_can_be_turned_off(monkeypatch) -> None:
    x = torch.zeros(1)
    use_backend(monkeypatch, "auto")
    assert kernels.use_native(x)
    use_backend(monkeypatch, "native")
    assert kernels.use_native(x)
    use_backend(monkeypatch, "reference")
    assert not kernels.use_native(x)


def test_a_missing_compiler_falls_back_unless_native_is_forced(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("LASER_NATIVE_DIR", str(tmp_path))
    _cpu.library.cache_clear()
    try:
        assert _cpu.library() is None
        use_backend(monkeypatch, "auto")
        assert not kernels.use_native(torch.zeros(1))
        use_backend(monkeypatch, "native")
        with pytest.raises(RuntimeError, match="do not build"):
            kernels.use_native(torch.zeros(1))
    finally:
        _cpu.library.cache_clear()


def test_the_build_goes_to_the_native_dir_and_is_reused(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("LASER_NATIVE_DIR", str(tmp_path))
    _cpu.library.cache_clear()
    try:
        assert _cpu.library() is not None
        built = list(tmp_path.glob("laser_cpu-*.so"))
        assert len(built) == 1 and not list(tmp_path.glob("tmp*"))
        stamp = built[0].stat().st_mtime_ns
        _cpu.library.cache_clear()
        assert _cpu.library() is not None and built[0].stat().st_mtime_ns == stamp
    finally:
        _cpu.library.cache_clear()


def _count_native_calls(monkeypatch) -> dict[str, int]:
    calls: dict[str, int] = {}
    for name in ("add_rms_norm", "rope_write_kv", "paged_attention", "silu_and_mul"):
        def spy(*args, _fn=getattr(_cpu, name), _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _fn(*args, **kwargs)
        monkeypatch.setattr(_cpu, name, spy)
    return calls


@pytest.mark.parametrize("mixed", [False, True])
def test_model_native_path_matches_the_pytorch_path(monkeypatch, mixed) -> None:
    """A tiny Llama over mixed prefill + decode steps (tests/kernels/test_model_triton_path):
    float32 within float32 rounding of the reference path; with bfloat16-packed projections
    (mixed precision) against the same packed weights on the PyTorch ops."""
    from tests.kernels.test_model_triton_path import _run, _tiny_model

    model = _tiny_model()
    if mixed:
        if not kernels.bf16_matmul_supported():
            pytest.skip("no bfloat16 matmuls on this CPU")
        assert model.pack_linears(torch.bfloat16)
        monkeypatch.setattr(kernels, "use_native", lambda tensor: False)
        ref = _run(model, monkeypatch, "auto")
        monkeypatch.undo()
    else:
        ref = _run(model, monkeypatch, "reference")
    calls = _count_native_calls(monkeypatch)
    out = _run(model, monkeypatch, "auto")
    assert set(calls) == {"add_rms_norm", "rope_write_kv", "paged_attention", "silu_and_mul"}
    assert rel_err(out, ref) <= 1e-5, rel_err(out, ref)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(("rows", "vocab", "dim", "k"), [(1, 97, 24, 8), (5, 300, 19, 64),
                                                         (3, 40, 8, 64)])
def test_rescore_top_matches_topk_and_float64(threads, rows, vocab, dim, k) -> None:
    """``_cpu.rescore_top``: each row's ``k`` largest screened logits (all of them when the
    vocabulary is smaller) become the float32 dot products, the rest stay as screened."""
    torch.manual_seed(rows + vocab)
    hidden = torch.randn(rows, dim)
    weight = torch.randn(vocab, dim)
    screened = hidden @ weight.T + 0.05 * torch.randn(rows, vocab)
    got = screened.clone()
    _cpu.set_threads(threads)
    try:
        assert _cpu.rescore_top(got, hidden, weight, k)
    finally:
        _cpu.set_threads(0)
    top = screened.topk(min(k, vocab), dim=-1).indices
    exact = (hidden.double() @ weight.double().T).float()
    want = screened.scatter(1, top, exact.gather(1, top))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    kept = torch.ones_like(screened, dtype=torch.bool).scatter(1, top, False)
    assert torch.equal(got[kept], screened[kept])  # the tail is untouched
    assert not _cpu.rescore_top(got.double(), hidden, weight, k)  # not float32: no-op
