"""kernels.linear: the oneDNN-packed CPU path equals F.linear; the fallbacks take over cleanly."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernels
from tests.kernels.backend import use_backend
from tests.kernels.paged import rel_err


@pytest.mark.parametrize("rows", [1, 7, 16, 300])
@pytest.mark.parametrize("shape", [(96, 64), (49, 33), (3072, 576)])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_equals_f_linear(rows, shape, bias):
    gen = torch.Generator().manual_seed(rows * 7 + shape[0])
    weight = torch.randn(shape, generator=gen)
    b = torch.randn(shape[0], generator=gen) if bias else None
    x = torch.randn(rows, shape[1], generator=gen)
    packed = kernels.pack_linear_weight(weight)
    if not torch.backends.mkldnn.is_available():
        assert packed is None
    out = kernels.linear(x, weight, packed, b)
    assert out.shape == (rows, shape[0])
    assert rel_err(out, F.linear(x, weight, b)) <= 1e-5


def test_reference_backend_does_not_pack(monkeypatch):
    use_backend(monkeypatch, "reference")
    assert kernels.pack_linear_weight(torch.randn(8, 4)) is None


def test_unpackable_weights_fall_back():
    assert kernels.pack_linear_weight(torch.randn(8, 4, dtype=torch.float64)) is None
    assert kernels.pack_linear_weight(torch.randn(8)) is None
    x, w = torch.randn(3, 4, dtype=torch.float64), torch.randn(8, 4, dtype=torch.float64)
    torch.testing.assert_close(kernels.linear(x, w, None), F.linear(x, w))


def _unpack(model) -> None:
    from kernels.backends import unpacked

    model.set_pack_state(unpacked(len(model.layers)))


def test_model_pack_linears_keeps_logits():
    from inference.model import AttentionMetadata
    from tests.inference.engine.helpers import tiny_loaded

    model = tiny_loaded(seed=1).model
    ids = torch.tensor([5, 9, 17, 3, 40, 2])
    meta = AttentionMetadata.build([[0, 1]], [6], [6], 4)
    _unpack(model)  # the cached tiny model may have been packed by an engine test
    with torch.inference_mode():
        plain = model.compute_logits(model(ids, torch.arange(6), model.allocate_kv_caches(2, 4),
                                           meta))
        assert model.pack_linears() == torch.backends.mkldnn.is_available()
        packed = model.compute_logits(model(ids, torch.arange(6),
                                            model.allocate_kv_caches(2, 4), meta))
    assert rel_err(packed, plain) <= 1e-5


needs_bf16 = pytest.mark.skipif(not kernels.bf16_matmul_supported(),
                                reason="no native bfloat16 matmuls on this CPU")


@needs_bf16
@pytest.mark.parametrize("rows", [1, 16, 300])
def test_bf16_packed_weight_gives_the_rounded_product_in_float32(rows):
    gen = torch.Generator().manual_seed(rows)
    weight, x = torch.randn(3072, 576, generator=gen), torch.randn(rows, 576, generator=gen)
    b = torch.randn(3072, generator=gen)
    packed = kernels.pack_linear_weight(weight, torch.bfloat16)
    assert packed is not None and packed.dtype == torch.bfloat16
    out = kernels.linear(x, weight, packed)
    assert out.dtype == torch.float32
    # what rounding both operands to bfloat16, summing in float32 and rounding the sum to
    # bfloat16 gives, to one bfloat16 step (the summation order differs) ...
    rounded = F.linear(x.bfloat16().float(), weight.bfloat16().float())
    step = rounded.abs() * 2**-7 + 1e-4  # + float32 summation noise near zero
    assert ((out - rounded).abs() <= step).all()
    # ... about bfloat16's precision away from the float32 product; the bias is added after
    assert 1e-4 < rel_err(out, F.linear(x, weight)) <= 1e-2
    assert torch.equal(kernels.linear(x, weight, packed, b), out + b)


def test_only_float32_weights_pack_as_bf16():
    with pytest.raises(ValueError, match="cannot pack"):
        kernels.pack_linear_weight(torch.randn(8, 4, dtype=torch.float16), torch.bfloat16)


@needs_bf16
def test_model_packs_layers_in_bf16_and_keeps_the_head_exact():
    """Mixed precision: decode steps on the bfloat16 packs, steps with prompt tokens on the
    float32 ones (and the exact head), so a prefill's logits equal float32's."""
    from inference.model import AttentionMetadata
    from tests.inference.engine.helpers import tiny_loaded

    model = tiny_loaded(seed=1).model
    ids = torch.tensor([5, 9, 17, 3, 40, 2])
    prefill = AttentionMetadata.build([[0, 1]], [5], [5], 4)
    decode = AttentionMetadata.build([[0, 1]], [6], [1], 4)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        caches = model.allocate_kv_caches(2, 4)
        first = model.compute_logits(model(ids[:5], torch.arange(5), caches, prefill)[-1:],
                                     exact=True)
        return first, model.compute_logits(model(ids[5:], torch.tensor([5]), caches, decode))

    _unpack(model)
    try:
        with torch.inference_mode():
            plain = run()
            assert model.pack_linears(torch.bfloat16)
            layer = model.layers[0]
            assert {layer.backend.decode[2].dtype for layer in model.layers} == {torch.bfloat16}
            assert [p.dtype for p in layer.backend.packs(decode)] == [torch.bfloat16] * 4
            assert [p.dtype for p in layer.backend.packs(prefill)] == [torch.float32] * 4
            assert model.packing.head_packed.dtype == torch.float32
            mixed = run()
        assert mixed[1].dtype == torch.float32
        assert rel_err(mixed[0], plain[0]) <= 1e-5  # the prefill: float32 throughout
        assert 1e-5 < rel_err(mixed[1], plain[1]) <= 5e-2  # the decode step: bfloat16
    finally:
        _unpack(model)  # other tests share the cached model


@needs_bf16
def test_screened_lm_head_is_exact_where_it_matters():
    """Mixed precision scores the vocabulary with a bfloat16 head and rescores the best
    ``SCREEN_TOP`` of each row exactly: the largest logits equal the float32 head's, so does
    the argmax, and the tail stays within bfloat16 rounding."""
    from kernels.backends import SCREEN_TOP
    from tests.inference.engine.helpers import tiny_loaded

    model = tiny_loaded(seed=2).model
    head = model.embed_tokens if model.lm_head is None else model.lm_head
    hidden = torch.randn(7, head.shape[1], generator=torch.Generator().manual_seed(0))
    _unpack(model)
    try:
        with torch.inference_mode():
            model.pack_linears(torch.bfloat16)
            assert model.packing.head_screen is not None
            got = model.compute_logits(hidden)
        exact = F.linear(hidden, head)
        # the screen's K best hold the true best K/4 (near the K-th, rounding may swap ranks)
        top = exact.topk(min(SCREEN_TOP, exact.shape[-1] // 2) // 4, dim=-1).indices
        torch.testing.assert_close(got.gather(1, top), exact.gather(1, top))
        assert torch.equal(got.argmax(-1), exact.argmax(-1))
        assert rel_err(got, exact) <= 1e-2
    finally:
        _unpack(model)
