"""Laser's bfloat16 matmul (``laser_gemm_bf16`` in ``kernels/_cpu``): against float64 products
of the same bfloat16-rounded operands, through ``kernels.linear``, in the model, and the
runner's choice between it and oneDNN."""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels import _cpu
from tests.kernels.paged import rel_err

pytestmark = pytest.mark.skipif(not _cpu.gemm_supported(),
                                reason="the C kernels have no bfloat16 matmul on this CPU")

BF16 = torch.bfloat16


def _rounded_product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.to(BF16).double() @ w.to(BF16).double().T


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 16, 21])
@pytest.mark.parametrize("shape", [(64, 32), (37, 10), (96, 576), (50, 1536)])
def test_gemm_equals_the_float64_product_of_the_rounded_operands(rows, shape) -> None:
    """Row counts across the 8-row tiles, widths that are and are not whole 32-output blocks:
    only float32 summation separates the kernel from the exact product of its inputs."""
    n, k = shape
    torch.manual_seed(rows * 1000 + n)
    w, x = torch.randn(n, k), torch.randn(rows, k)
    out = _cpu.gemm_bf16(x.to(BF16), _cpu.pack_bf16(w), torch.float32)
    ref = _rounded_product(x, w)
    assert out.shape == (rows, n)
    assert (out.double() - ref).abs().max() <= 1e-5 * ref.abs().max() * k ** 0.5


@pytest.mark.parametrize("rows", [1, 8, 13, 70])
def test_split_activations_leave_only_the_weights_rounded(rows) -> None:
    """float32 x as hi + lo bfloat16 parts: within float32 summation of the product of the
    exact x and the rounded weights, a thousand times closer than rounding x too."""
    torch.manual_seed(rows)
    w, x = torch.randn(96, 576), torch.randn(rows, 576)
    packed = _cpu.pack_bf16(w)
    ref = x.double() @ w.to(BF16).double().T
    split = _cpu.gemm_bf16(x, packed.split_view(), torch.float32)
    plain = _cpu.gemm_bf16(x, packed, torch.float32)
    assert packed.split_view().dtype == torch.float32 and packed.dtype == BF16
    err = (split.double() - ref).abs().max() / ref.abs().max()
    assert err <= 1e-5
    assert err * 100 < (plain.double() - ref).abs().max() / ref.abs().max()


@pytest.mark.parametrize("split", [False, True])
def test_threads_split_the_blocks_and_give_the_same_sums(split) -> None:
    torch.manual_seed(5)
    w, x = torch.randn(333, 64), torch.randn(9, 64)
    packed = _cpu.pack_bf16(w)
    packed = packed.split_view() if split else packed
    one = _cpu.gemm_bf16(x, packed, torch.float32)
    for threads in (2, 3, 64):
        assert torch.equal(_cpu.gemm_bf16(x, packed, torch.float32, threads), one)


def test_bfloat16_output_is_the_float32_output_rounded() -> None:
    torch.manual_seed(0)
    w, x = torch.randn(200, 96), torch.randn(11, 96)
    packed = _cpu.pack_bf16(w)
    exact = _cpu.gemm_bf16(x, packed, torch.float32)
    assert torch.equal(_cpu.gemm_bf16(x, packed, BF16), exact.to(BF16))


def test_the_kernel_refuses_what_it_does_not_handle() -> None:
    with pytest.raises(ValueError, match="odd"):
        _cpu.pack_bf16(torch.randn(8, 5))
    with pytest.raises(ValueError, match="features"):
        _cpu.gemm_bf16(torch.randn(2, 6), _cpu.pack_bf16(torch.randn(8, 4)), torch.float32)
    with pytest.raises(ValueError, match="contiguous"):
        _cpu.pack_bf16(torch.randn(8, 4).t())


def test_linear_runs_the_kernel_for_a_native_pack() -> None:
    torch.manual_seed(3)
    w, x, bias = torch.randn(70, 48), torch.randn(5, 48), torch.randn(70)
    packed = kernels.pack_linear_weight(w, BF16, native=True)
    assert isinstance(packed, _cpu.PackedBF16) and packed.dtype == BF16
    ref = _rounded_product(x, w)
    out = kernels.linear(x, w, packed)
    assert out.dtype == torch.float32 and rel_err(out.double(), ref) <= 1e-6
    raw = kernels.linear(x.to(BF16), w, packed, raw=True)
    assert raw.dtype == BF16 and torch.equal(raw, out.to(BF16))
    split = kernels.linear(x, w, packed.split_view(), raw=True)  # float32 in, float32 out
    assert split.dtype == torch.float32
    assert rel_err(split.double(), x.double() @ w.to(BF16).double().T) <= 1e-5
    with_bias = kernels.linear(x, w, packed, bias)
    assert rel_err(with_bias.double(), ref + bias.double()) <= 1e-6
    # an odd width, or no native request, keeps oneDNN's packing
    assert isinstance(kernels.pack_linear_weight(torch.randn(8, 5), BF16, native=True),
                      (torch.Tensor, type(None)))
    assert not isinstance(kernels.pack_linear_weight(w, BF16), _cpu.PackedBF16)


def test_the_model_on_the_kernel_is_as_close_to_float32_as_on_onednn(monkeypatch) -> None:
    """A tiny Llama with bfloat16 projections: the same error against float32 either way (both
    round the same operands; only the summation order differs)."""
    from tests.kernels.test_model_triton_path import _run, _tiny_model

    if not kernels.bf16_matmul_supported():
        pytest.skip("no oneDNN bfloat16 matmuls on this CPU")
    exact = _run(_tiny_model(), monkeypatch, "auto")
    results = {}
    for native in (False, True):
        model = _tiny_model()
        assert model.pack_linears(BF16, native_gemm=native)
        kinds = {type(layer.backend.decode[3]) for layer in model.layers}
        assert kinds == {_cpu.PackedBF16 if native else torch.Tensor}
        results[native] = _run(model, monkeypatch, "auto")
    onednn, ours = rel_err(results[False], exact), rel_err(results[True], exact)
    assert 0 < ours <= 2 * onednn + 1e-4, (ours, onednn)
    assert rel_err(results[True], results[False]) <= 2 * onednn + 1e-4


@pytest.mark.parametrize("threads, native", [((1, 2), True), ((2, 2), False)])
def test_the_runner_gives_one_thread_decode_matmuls_to_the_kernel(threads, native) -> None:
    """One decode thread: the kernel (single-threaded, faster there); more: oneDNN's threads."""
    from inference.engine.runner import ModelRunner
    from tests.kernels.test_model_triton_path import _tiny_model

    if not kernels.bf16_matmul_supported():
        pytest.skip("no oneDNN bfloat16 matmuls on this CPU")
    saved = torch.get_num_threads()
    try:
        runner = ModelRunner(_tiny_model(), num_blocks=4, block_size=16, matmul_mode=BF16,
                             threads=threads)
    finally:
        torch.set_num_threads(saved)
    layer = runner.model.layers[0]
    assert isinstance(layer.backend.decode[2], _cpu.PackedBF16) is native
    assert isinstance(runner.model.packing.head_screen, _cpu.PackedBF16) is native
    # prefill: the same bfloat16 weights with split float32 activations, or float32 oneDNN
    exact = layer.backend.prompt[0]
    assert exact.dtype == torch.float32
    if native:
        assert exact.split and exact.data is layer.backend.decode[0].data
    else:
        assert not isinstance(exact, _cpu.PackedBF16)


def test_the_one_call_layer_equals_the_layer_op_by_op(monkeypatch) -> None:
    """``_cpu.decoder_layer`` runs the same C calls in the same order as the op-by-op native
    path: bit for bit the same logits, over prefill chunks (split) and decode steps."""
    from inference.model.llama import DecoderLayer
    from kernels.backends import Packing
    from tests.kernels.test_model_triton_path import _run, _tiny_model

    model = _tiny_model()
    assert model.pack_linears(BF16, native_gemm=True)
    stacks, calls = [], []
    real_stack, real = _cpu.decoder_stack, _cpu.decoder_layer
    monkeypatch.setattr(_cpu, "decoder_stack",
                        lambda *a, **k: stacks.append(1) or real_stack(*a, **k))
    monkeypatch.setattr(_cpu, "decoder_layer", lambda *a, **k: calls.append(1) or real(*a, **k))
    fused = _run(model, monkeypatch, "auto")
    assert len(stacks) == 3 and not calls  # the whole stack in one C call a step
    monkeypatch.setattr(Packing, "_stack", lambda *a: None)  # one C call a layer
    assert torch.equal(_run(model, monkeypatch, "auto"), fused)
    assert len(calls) == 3 * len(model.layers)  # every layer of the three steps
    for layer in model.layers:
        assert isinstance(layer, DecoderLayer) and layer.backend.one_call
        layer.backend.set_one_call(False)  # the op-by-op native path, same packs
    assert torch.equal(_run(model, monkeypatch, "auto"), fused)
