"""A long prompt chunk's step on the quantized blocks (``kernels.packing.LONG_PROMPT_ONE_PART``):
its prompt rows in one int8 part, its decode rows with a decode step's bits, and which steps
take that pack set."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import kernels
from kernels import _cpu, packing
from kernels._cpu import quant
from kernels.backends import LayerBackend, LayerShape
from kernels.layer_ops import NATIVE_CHUNK_ROWS
from kernels.linear import RowSplitQuant, linear

pytestmark = pytest.mark.skipif(not kernels.quant_supported(),
                                reason="no vector quantized matmul here")


def _weight(n: int, k: int, seed: int) -> torch.Tensor:
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("decode_split", [quant.SEL, quant.TWO])
@pytest.mark.parametrize("one_rows", [0, 1, 5, 19])
def test_decode_rows_keep_a_decode_steps_bits_and_prompt_rows_take_one_part(
        decode_split, one_rows) -> None:
    w = _weight(48, 96, one_rows)
    packed = kernels.pack_quant_weight(w)
    decode = packed.split_view(decode_split)
    x = torch.randn(70, 96, generator=torch.Generator().manual_seed(7))
    x[:, 5] *= 40  # an outlier block, so that SEL keeps a second part there
    got = linear(x, w, RowSplitQuant(decode, packed.split_view(quant.ONE)), one_rows=one_rows)
    assert torch.equal(got[:one_rows], quant.gemm_q(x[:one_rows], decode))
    assert torch.equal(got[one_rows:], quant.gemm_q(x[one_rows:], packed))
    two = quant.gemm_q(x[one_rows:], packed.split_view(quant.TWO))
    assert not torch.equal(got[one_rows:], two)  # one part is not the two-part product
    exact = x[one_rows:].double() @ quant.dequantize(
        quant.quantize_q8_0(w), quant.Q8_0, 48, 96).double().T
    assert (got[one_rows:].double() - exact).norm() < 0.05 * exact.norm()


def _meta(decode_only: bool, longest: int) -> SimpleNamespace:
    return SimpleNamespace(is_decode_only=decode_only, max_query_len=longest)


def test_only_chunks_too_long_for_the_one_call_layer_take_the_long_prompt_packs() -> None:
    backend = LayerBackend(("d",) * 4, ("p",) * 4)
    backend.long_prompt = ("l",) * 4
    assert backend.packs(_meta(True, 1)) == ("d",) * 4
    assert backend.packs(_meta(False, NATIVE_CHUNK_ROWS)) == ("p",) * 4
    assert backend.packs(_meta(False, NATIVE_CHUNK_ROWS + 1)) == ("l",) * 4
    backend.long_prompt = None
    assert backend.packs(_meta(False, NATIVE_CHUNK_ROWS + 1)) == ("p",) * 4


@pytest.mark.parametrize("enabled", [True, False])
def test_quant_packing_builds_the_long_prompt_set_when_enabled(monkeypatch, enabled) -> None:
    monkeypatch.setattr(packing, "LONG_PROMPT_ONE_PART", enabled)
    hidden, inter = 64, 96
    projections = (_weight(3 * hidden, hidden, 1), _weight(hidden, hidden, 2),
                   _weight(2 * inter, hidden, 3), _weight(hidden, inter, 4))
    layer = packing.LayerParams(projections, (None,) * 4, None,
                                (torch.ones(hidden), torch.ones(hidden)))
    shape = LayerShape((2, 1, 32), 1e-5, 32 ** -0.5)
    state = kernels.pack_model([layer], _weight(100, hidden, 5), None, shape,
                               kernels.MatmulMode.QUANT)
    long_prompt = state.layers[0].long_prompt
    if not enabled:
        assert long_prompt is None
        return
    assert long_prompt is not None
    for pack, decode, split in zip(long_prompt, state.layers[0].decode,
                                   packing.QUANT_DECODE_SPLIT, strict=True):
        assert isinstance(pack, RowSplitQuant) and pack.decode is decode
        assert decode.split == split and pack.prompt.split == quant.ONE
        assert pack.prompt.data is decode.data  # a view: no second copy of the weight
    _cpu.set_threads(0)
