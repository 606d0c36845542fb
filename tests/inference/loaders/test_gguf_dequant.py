"""Each supported GGUF tensor type reads back within the format's quantisation error."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize

from inference.loaders.gguf_loader import dequantize_tensor
from inference.loaders.weights import WeightError
from tests.inference.loaders.gguf_writer import write_one_tensor


def _bound(x: np.ndarray, qtype: Q) -> np.ndarray:
    """Largest allowed |error| per element: half a quantisation step of its 32-wide block."""
    if qtype == Q.F32:
        return np.zeros_like(x)
    if qtype == Q.F16:
        return np.abs(x) * 2.0 ** -11 + 1e-7
    if qtype == Q.BF16:
        return np.abs(x) * 2.0 ** -8 + 1e-30
    blocks = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(blocks).max(-1, keepdims=True)
    lo, hi = blocks.min(-1, keepdims=True), blocks.max(-1, keepdims=True)
    # (step, rounding error in steps, largest code, offset): Q4_0 clips the side opposite the
    # block's signed maximum at +7 steps, so that side may be a whole step off.
    step, rounding, levels, offset = {Q.Q8_0: (amax / 127, 0.5, 127, 0),
                                      Q.Q4_0: (amax / 8, 1.0, 8, 0),
                                      Q.Q4_1: ((hi - lo) / 15, 0.5, 15, np.abs(lo))}[qtype]
    fp16 = 2.0 ** -10  # the block scale (and min) are stored as fp16
    bound = step * (rounding + levels * fp16) + offset * fp16 + 1e-6
    return np.broadcast_to(bound, blocks.shape).reshape(x.shape)


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1])
def test_dequantize_round_trip(tmp_path, qtype):
    rng = np.random.default_rng(int(qtype))
    original = (rng.standard_normal((6, 96)) * rng.uniform(0.1, 3, (6, 1))).astype(np.float32)
    data = (original.astype(np.float16 if qtype == Q.F16 else np.float32)
            if qtype in (Q.F32, Q.F16) else quantize(original, qtype))
    tensor = write_one_tensor(tmp_path / "t.gguf", data, qtype)
    got = dequantize_tensor(tensor.data, tensor.tensor_type).numpy()
    assert got.shape == original.shape and got.dtype == np.float32
    err = np.abs(got - original)
    assert (err <= _bound(original, qtype)).all(), float(err.max())
    if qtype != Q.F32:
        assert err.max() > 0  # it really went through the quantised format


def test_unsupported_type_is_refused():
    with pytest.raises(WeightError, match="IQ4_XS"):
        dequantize_tensor(np.zeros((1, 136), np.uint8), Q.IQ4_XS)
