"""The quantized matmul of ``laser_quant.c``: the GGUF's blocks as stored (Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q4_K, Q5_K, Q6_K).

A :class:`PackedQuant` holds one weight ``[N, K]`` repacked from its GGUF rows (the same codes
and scales, interleaved 16 outputs at a time; ``laser_quant.h`` says how) and multiplies float32 (or
bfloat16) activations quantised per block of 32 to int8, as llama.cpp does; ``split`` views
quantise them in two parts instead (about 15 bits kept, for steps with prompt tokens). A
float32 weight with no GGUF blocks (a Hugging Face model, a mixed-format fusion) is quantised
to Q8_0 first (:func:`quantize_q8_0`).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from . import _check, _gemm_threads, library, loaded

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K = 2, 3, 6, 7, 8, 12, 13, 14  # GGML's type ids
FORMATS = {Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0", Q4_K: "Q4_K",
           Q5_K: "Q5_K", Q6_K: "Q6_K"}
# a GGUF block: (inputs, bytes)
GGUF_BLOCKS = {Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34),
               Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210)}
BLOCK = 32
ISAS = ("scalar", "avx2", "avx-vnni", "avx512-vnni")  # laser_quant_isa's levels


@functools.cache
def supported() -> bool:
    """Whether the quantized matmul has a vector path here (AVX2 or better): the scalar one is
    a reference, too slow to serve."""
    lib = library()
    return lib is not None and lib.laser_quant_isa(-1) >= 1


def isa(limit: int | None = None) -> str:
    """The path in use (``ISAS``); ``limit`` caps it from now on (tests force each path;
    ``len(ISAS)`` lifts the cap)."""
    return ISAS[loaded().laser_quant_isa(-1 if limit is None else limit)]


# PackedQuant.split (laser_gemm_q's split): activations in one part, two, two for the prompt
# rows of a step and one for its decode rows before them (laser_decoder_layer); SEL: two kept
# only in each row's outlier blocks (laser_quant.c), PROMPT_SEL: two for the prompt rows, SEL
# for the decode rows
ONE, TWO, PROMPT_TWO, SEL, PROMPT_SEL = 0, 1, 2, 3, 4


class PackedQuant:
    """One quantized weight in ``laser_pack_q``'s layout, standing where ``kernels.linear``
    takes a packed weight. Activations around it stay float32 (``dtype``); ``split`` says in
    how many parts they are quantised (``ONE``, ``TWO``, ``PROMPT_TWO``, ``SEL``,
    ``PROMPT_SEL``)."""

    __slots__ = ("data", "fmt", "out_features", "in_features", "split")
    dtype = torch.float32

    def __init__(self, data: torch.Tensor, fmt: int, out_features: int, in_features: int,
                 split: int = ONE) -> None:
        self.data, self.fmt, self.split = data, fmt, int(split)
        self.out_features, self.in_features = out_features, in_features

    def split_view(self, split: int = TWO) -> PackedQuant:
        return PackedQuant(self.data, self.fmt, self.out_features, self.in_features, split)

    @property
    def nbytes(self) -> int:
        return self.data.numel()


def _raw(raw: torch.Tensor | np.ndarray, fmt: int, n: int, k: int) -> torch.Tensor:
    if fmt not in FORMATS:
        raise ValueError(f"unsupported quantized format {fmt}")
    width, size = GGUF_BLOCKS[fmt]
    if k % width:
        raise ValueError(f"in_features {k} is not a multiple of {FORMATS[fmt]}'s {width}")
    t = torch.as_tensor(np.ascontiguousarray(raw)).view(torch.uint8).reshape(-1)
    if t.numel() != n * k // width * size:
        raise ValueError(f"{t.numel()} bytes are not {n} x {k} {FORMATS[fmt]} weights")
    return t


def pack_q(raw: torch.Tensor | np.ndarray, fmt: int, out_features: int,
           in_features: int) -> PackedQuant:
    """GGUF rows (``[N, K / block inputs * block bytes]`` uint8, any shape of those bytes) ->
    packed."""
    n, k = out_features, in_features
    src = _raw(raw, fmt, n, k)
    data = torch.empty(loaded().laser_q_packed_bytes(fmt, n, k), dtype=torch.uint8)
    loaded().laser_pack_q(src.data_ptr(), fmt, n, k, data.data_ptr())
    return PackedQuant(data, fmt, n, k)


def quantize_q8_0(weight: torch.Tensor) -> torch.Tensor:
    """float32 ``[N, K]`` -> GGUF Q8_0 rows (uint8 ``[N, K / 32 * 34]``)."""
    _check(weight, "weight", torch.float32)
    n, k = weight.shape
    if k % BLOCK:
        raise ValueError(f"in_features {k} is not a multiple of {BLOCK}")
    raw = torch.empty((n, k // BLOCK * GGUF_BLOCKS[Q8_0][1]), dtype=torch.uint8)
    loaded().laser_quantize_q8_0(weight.data_ptr(), n, k, raw.data_ptr())
    return raw


def dequantize(raw: torch.Tensor | np.ndarray, fmt: int, out_features: int,
               in_features: int) -> torch.Tensor:
    """GGUF rows -> float32 ``[N, K]`` (tests and references)."""
    src = _raw(raw, fmt, out_features, in_features)
    out = torch.empty((out_features, in_features), dtype=torch.float32)
    loaded().laser_dequantize_q(src.data_ptr(), fmt, out_features, in_features, out.data_ptr())
    return out


def gemm_q(x: torch.Tensor, packed: PackedQuant, out_dtype: torch.dtype = torch.float32,
           threads: int | None = None, one_rows: int = 0) -> torch.Tensor:
    """``x`` ``[M, K]`` (float32 or bfloat16) times the packed weight transposed: ``[M, N]`` in
    ``out_dtype`` (float32 or bfloat16); a ``PROMPT_TWO`` pack takes rows ``[0, one_rows)``
    in one part, a ``PROMPT_SEL`` pack selective (a step's decode rows, as a decode step's).
    ``threads``: the pool's (default: ``set_threads``'s setting, else one below
    ``THREADED_ROWS`` rows)."""
    from . import DTYPES

    if x.dtype not in DTYPES:
        x = x.float()
    x = x.contiguous()
    num_rows, k = x.shape
    if k != packed.in_features:
        raise ValueError(f"gemm_q: x has {k} features, the weight {packed.in_features}")
    _check(x, "x", torch.float32, torch.bfloat16)
    out = torch.empty((num_rows, packed.out_features), dtype=out_dtype)
    if num_rows:
        threads = _gemm_threads(num_rows) if threads is None else threads
        loaded().laser_gemm_q(x.data_ptr(), DTYPES[x.dtype], num_rows, k,
                               packed.data.data_ptr(), packed.fmt, packed.out_features,
                               out.data_ptr(), DTYPES[out_dtype], threads, packed.split, one_rows)
    return out
