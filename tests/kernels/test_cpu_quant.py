"""The quantized matmul (``laser_gemm_q`` in ``kernels/_cpu/laser_quant.c``): each GGUF format
against float64 products of the dequantised weights, every vector path and thread count giving
the same bits, the pool, and the model and runner in the quantized modes."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as GT
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

import kernels
from kernels import _cpu
from kernels._cpu import quant
from tests.inference.loaders.test_gguf_kquants import random_blocks

pytestmark = pytest.mark.skipif(_cpu.library() is None, reason="the C kernels do not build here")

FORMATS = {fmt: GT(fmt) for fmt in quant.FORMATS}
ISA_LEVELS = range(len(quant.ISAS))
THREADS = range(1, max(4, len(os.sched_getaffinity(0))) + 1)


@pytest.fixture(autouse=True)
def _restore():
    yield
    quant.isa(len(quant.ISAS))  # lift any cap a test set
    _cpu.set_threads(0)


def _width(fmt: int, k: int) -> int:
    """``k`` rounded up to whole blocks of the format (K-quants: 256 inputs)."""
    width = quant.GGUF_BLOCKS[fmt][0]
    return -(-k // width) * width


def _weight(fmt: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, torch.Tensor]:
    """GGUF blocks of a random weight (gguf's own quantiser; for the K-quants, which it cannot
    make, random codes and scales) and gguf's dequantisation of them."""
    if quant.GGUF_BLOCKS[fmt][0] == 256:
        raw = random_blocks(np.random.default_rng(seed), FORMATS[fmt], n, k, peak=3.0)
    else:
        w = torch.Generator().manual_seed(seed)
        raw = gguf_quantize(torch.randn(n, k, generator=w).numpy(), FORMATS[fmt])
    return raw, torch.from_numpy(gguf_dequantize(raw, FORMATS[fmt])).float()


def _quantised_acts(x: torch.Tensor) -> torch.Tensor:
    """The activations as the kernel sees them in one part: per 32-block, e = max|x| / 127
    and q = round-half-even(x * (1 / e)), in float32 as the C code computes them."""
    b = x.reshape(x.shape[0], -1, 32)
    e = b.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(e > 0, 1 / e, torch.zeros_like(e))
    return (torch.round(b * inv) * e).reshape(x.shape)


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantised_blocks_equal_ggufs(fmt) -> None:
    k = _width(fmt, 96)
    raw, ref = _weight(fmt, 37, k)
    assert torch.equal(quant.dequantize(raw, fmt, 37, k), ref)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(1, 32), (17, 96), (53, 64), (100, 576), (7, 1280)])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 16, 33, 64, 130])
def test_gemm_equals_the_float64_product_of_its_operands(fmt, shape, rows) -> None:
    """One part: exactly (up to float32 sums) the dequantised weights times the int8-rounded
    activations, within 1 % of the exact product (relative to the sum of |x| |w|); two parts:
    within 5e-5 of it (a part keeps about 1/254 of what the one before left). Widths across the
    16-output groups, rows across the 8-row (AVX-512) and 4-row tiles."""
    n, k = shape[0], _width(fmt, shape[1])
    raw, w = _weight(fmt, n, k, seed=rows)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(n))
    packed = quant.pack_q(raw, fmt, n, k)
    one, two = quant.gemm_q(x, packed), quant.gemm_q(x, packed.split_view())
    assert one.shape == two.shape == (rows, n)
    exact = x.double() @ w.double().T
    rounded = _quantised_acts(x).double() @ w.double().T
    scale = (x.double().abs() @ w.double().abs().T).max()  # sum of |x| |w|: no cancellation
    assert (one.double() - rounded).abs().max() <= 1e-5 * scale
    assert (one.double() - exact).abs().max() <= 1e-2 * scale
    assert (two.double() - exact).abs().max() <= 5e-5 * scale


SPLITS = [quant.ONE, quant.TWO, quant.SEL]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("split", SPLITS)
def test_every_vector_path_and_thread_count_gives_the_same_bits(fmt, split) -> None:
    """AVX-512 VNNI, AVX-VNNI, AVX2 and plain C sum the same integers and the same floats in
    the same order; threads split whole output groups. Paths this CPU lacks are skipped by
    ``laser_quant_isa`` (it never reports more than it built)."""
    k = _width(fmt, 576)  # K-quants: three blocks of 256
    raw, _ = _weight(fmt, 70, k)
    packed = quant.pack_q(raw, fmt, 70, k)
    packed = packed.split_view(split) if split else packed
    x = torch.randn(9, k)
    x[::2, 64:96] *= 8  # outlier blocks in some rows (SEL keeps their second parts)
    quant.isa(0)
    assert quant.isa() == "scalar"
    want = quant.gemm_q(x, packed, threads=1)
    for level in ISA_LEVELS:
        used = quant.isa(level)
        assert quant.ISAS.index(used) <= level
        for threads in THREADS:
            assert torch.equal(quant.gemm_q(x, packed, threads=threads), want), (used, threads)


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f
                         if line.startswith("flags")), set())
    except OSError:
        return set()


@pytest.mark.skipif(not _cpu_flags(), reason="no /proc/cpuinfo flags here")
def test_the_build_has_the_best_path_this_cpu_has() -> None:
    """The tests above compare the paths with plain C: they must not all be plain C."""
    flags = _cpu_flags()
    want = ("avx512-vnni" if {"avx512_vnni", "avx512bw", "avx512vl"} <= flags else
            "avx-vnni" if "avx_vnni" in flags and "avx2" in flags else
            "avx2" if {"avx2", "fma", "f16c"} <= flags else "scalar")
    assert quant.isa(len(quant.ISAS)) == want


def _edge_rows(rows: int, k: int) -> torch.Tensor:
    """Random rows with blocks that test the activations' quantisation: all zeros (scale 0),
    exact halves (ties that round to even; the second part's rest of +-1/2 clamps to 127),
    one large value among small ones, and tiny values (still normal: where max|x| / 127 is
    subnormal, 1 / e overflows and the C cast of the rounded value is undefined)."""
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
    blocks = x.view(rows, -1, 32)
    kinds = blocks.shape[1]
    for r in range(rows):
        kind = blocks[r, r % kinds]
        match r % 5:
            case 0:
                kind.zero_()
            case 1:
                kind.copy_(torch.arange(-16, 16) + 0.5)
                kind[0] = 127.0
            case 2:
                kind.mul_(1e-3)
                kind[5] = -4e4
            case 3:
                kind.mul_(1e-30)
    return x


# the formats' shapes for the row-count test: Q4_0's, Q8_0's and the two-level Q6_K's all,
# the others' (their code paths shared with those) the two smallest
ROW_COUNT_SHAPES = [(fmt, n, k) for fmt in FORMATS
                    for n, k in [(16, 32), (33, 96), (70, 192), (131, 160)]
                    if fmt in (quant.Q4_0, quant.Q8_0, quant.Q6_K) or n in (16, 33)]


@pytest.mark.parametrize("fmt,n,k", ROW_COUNT_SHAPES)
@pytest.mark.parametrize("split", SPLITS)
def test_every_row_count_gives_the_scalar_paths_bits(fmt, split, n, k) -> None:
    """Rows 1..70 (across every tile height a vector path takes, and its remainders), odd
    widths, one and two threads: each vector path, its AVX2 quantisation of the activations
    included, equals the plain C path (which quantises in plain C too)."""
    k = _width(fmt, k)
    raw, _ = _weight(fmt, n, k, seed=n)
    packed = quant.pack_q(raw, fmt, n, k)
    packed = packed.split_view(split) if split else packed
    x = _edge_rows(70, k)
    quant.isa(0)
    want = quant.gemm_q(x, packed, threads=1)
    for rows in range(1, 71):
        assert torch.equal(quant.gemm_q(x[:rows], packed, threads=1), want[:rows]), rows
    for level in ISA_LEVELS[1:]:
        used = quant.isa(level)
        for threads in (1, 2):
            for rows in range(1, 71):
                got = quant.gemm_q(x[:rows], packed, threads=threads)
                assert torch.equal(got, want[:rows]), (used, threads, rows)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("one_rows", [1, 3, 8, 13, 29])
@pytest.mark.parametrize("kind, decode", [(quant.PROMPT_TWO, quant.ONE),
                                          (quant.PROMPT_SEL, quant.SEL)])
def test_decode_rows_before_a_prompt_chunk_get_a_decode_steps_bits(fmt, one_rows, kind,
                                                                   decode) -> None:
    """A two-part call with its first rows as a decode step's (``PROMPT_TWO``: one part,
    ``PROMPT_SEL``: selective; a step's decode rows beside a prompt chunk): those rows equal
    such a call's, the rest a two-part call's, on every path and thread count (tiles of each
    height straddle the boundary)."""
    k = _width(fmt, 192)
    raw, _ = _weight(fmt, 70, k, seed=one_rows)
    one = quant.pack_q(raw, fmt, 70, k)
    mixed = one.split_view(kind)
    x = _edge_rows(37, k)
    quant.isa(0)
    want = torch.cat([quant.gemm_q(x[:one_rows], one.split_view(decode), threads=1),
                      quant.gemm_q(x[one_rows:], one.split_view(), threads=1)])
    assert not torch.equal(want, quant.gemm_q(x, one.split_view(), threads=1))
    for level in ISA_LEVELS:
        used = quant.isa(level)
        for threads in (1, 2, 3):
            got = quant.gemm_q(x, mixed, threads=threads, one_rows=one_rows)
            assert torch.equal(got, want), (used, threads)
    # without the rows it is a two-part call (the per-projection path's prompt steps)
    assert torch.equal(quant.gemm_q(x, mixed, threads=1), quant.gemm_q(x, one.split_view()))


@pytest.mark.parametrize("fmt", FORMATS)
def test_selective_rows_keep_the_second_part_only_in_their_outlier_blocks(fmt) -> None:
    """``SEL``: a row without an outlier block (no block's scale above twice the row's mean)
    has the one-part bits; a row with one is closer to the exact product than one part, and
    has the bits it has alone, whatever else shares the call and its tiles (on every path)."""
    k = _width(fmt, 192)
    raw, _ = _weight(fmt, 48, k)
    one = quant.pack_q(raw, fmt, 48, k)
    sel = one.split_view(quant.SEL)
    w = quant.dequantize(raw, fmt, 48, k).double()
    plain = torch.randn(6, k, generator=torch.Generator().manual_seed(5))
    assert torch.equal(quant.gemm_q(plain, sel), quant.gemm_q(plain, one))
    x = plain.clone()
    x[1::2, 96:128] *= 20  # rows 1, 3, 5: an outlier block
    exact = x.double() @ w.T
    got, rounded = quant.gemm_q(x, sel), quant.gemm_q(x, one)
    assert torch.equal(got[0::2], rounded[0::2])
    for r in (1, 3, 5):
        err = (got[r].double() - exact[r]).norm()
        assert err < 0.5 * (rounded[r].double() - exact[r]).norm(), r
    for level in ISA_LEVELS:
        used = quant.isa(level)
        for threads in (1, 2):
            alone = torch.cat([quant.gemm_q(x[r:r + 1], sel, threads=threads) for r in range(6)])
            assert torch.equal(alone, got), (used, threads)
            assert torch.equal(quant.gemm_q(x, sel, threads=threads), got), (used, threads)


def test_calls_from_many_threads_at_once_keep_their_own_activations() -> None:
    """Each calling thread quantises into its own buffer (kept between its calls): calls from
    threads at once, large and small (a long prompt's buffer is not the kept one), each get
    their own product."""
    from concurrent.futures import ThreadPoolExecutor

    raw, _ = _weight(quant.Q4_1, 48, 1536)
    packed = quant.pack_q(raw, quant.Q4_1, 48, 1536).split_view()
    xs = [torch.randn(rows, 1536) for rows in (1, 5, 64, 300, 3, 16, 200, 7)]
    want = [quant.gemm_q(x, packed, threads=1) for x in xs]

    def run(i: int) -> bool:
        return all(torch.equal(quant.gemm_q(xs[i], packed, threads=1 + i % 2), want[i])
                   for _ in range(20))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(run, range(len(xs))))


def test_bfloat16_in_and_out() -> None:
    raw, _ = _weight(quant.Q4_1, 40, 64)
    packed = quant.pack_q(raw, quant.Q4_1, 40, 64)
    x = torch.randn(3, 64).to(torch.bfloat16)
    f32 = quant.gemm_q(x.float(), packed)
    assert torch.equal(quant.gemm_q(x, packed), f32)
    assert torch.equal(quant.gemm_q(x, packed, torch.bfloat16), f32.to(torch.bfloat16))


def test_q8_0_quantisation_of_a_float_weight() -> None:
    w = torch.randn(33, 64)
    raw = quant.quantize_q8_0(w)
    back = quant.dequantize(raw, quant.Q8_0, 33, 64)
    step = w.reshape(33, 2, 32).abs().amax(-1, keepdim=True) / 127
    # half a step, and the float16 rounding of the scale (127 steps of 2^-11 of it)
    assert ((back - w).reshape(33, 2, 32).abs() <= step * 0.57).all()
    packed = kernels.pack_quant_weight(w)
    assert packed.fmt == quant.Q8_0


def test_the_kernel_refuses_what_it_does_not_handle() -> None:
    raw, _ = _weight(quant.Q4_0, 8, 64)
    with pytest.raises(ValueError):
        quant.pack_q(raw, quant.Q4_0, 8, 96)  # not that many bytes
    with pytest.raises(ValueError):
        quant.pack_q(raw, 9, 8, 64)  # Q8_1: not a format of this kernel
    with pytest.raises(ValueError):
        quant.pack_q(raw, quant.Q4_K, 8, 64)  # not a whole K block
    packed = quant.pack_q(raw, quant.Q4_0, 8, 64)
    with pytest.raises(ValueError):
        quant.gemm_q(torch.randn(2, 32), packed)


def test_linear_runs_the_quantized_pack() -> None:
    raw, w = _weight(quant.Q8_0, 24, 64)
    packed = quant.pack_q(raw, quant.Q8_0, 24, 64)
    x, bias = torch.randn(5, 64), torch.randn(24)
    out = kernels.linear(x, w, packed, bias)
    assert torch.equal(out, quant.gemm_q(x, packed) + bias)


@pytest.mark.parametrize("threads", THREADS)
def test_the_pooled_attention_equals_one_thread(threads) -> None:
    """The paged attention split over (sequence, KV head) tasks: the same bits."""
    from tests.kernels.paged import make_paged

    seq_lens = [5, 40, 17, 1, 90]
    k_cache, v_cache, tables = make_paged(seq_lens, 16, 3, 64)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    q = torch.randn(len(seq_lens), 9, 64)
    one = _cpu.paged_attention(q, k_cache, v_cache, tables, lens, 0.25, torch.float32)
    _cpu.set_threads(threads)
    assert torch.equal(_cpu.paged_attention(q, k_cache, v_cache, tables, lens, 0.25,
                                            torch.float32), one)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_starts_its_own_pool() -> None:
    """A prefork server's worker inherits none of the parent's pool threads: the child starts
    its own instead of waiting on workers that do not exist there."""
    raw, _ = _weight(quant.Q4_1, 256, 64)
    packed = quant.pack_q(raw, quant.Q4_1, 256, 64)
    x = torch.randn(3, 64)
    want = quant.gemm_q(x, packed, threads=2)  # the parent's workers exist now
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's verdict is its exit status
        os._exit(0 if torch.equal(quant.gemm_q(x, packed, threads=2), want) else 1)
    _, status = os.waitpid(pid, 0)
    assert status == 0
