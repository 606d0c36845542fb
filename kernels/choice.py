"""The kernel choices of one load, typed and made once.

Which kernels run a step follows from four things, each fixed before the first step:

- the backend (:class:`Backend`, ``LASER_KERNELS``, read once per process by
  :mod:`kernels.dispatch`);
- the matmul mode the projections are packed for (:class:`MatmulMode`), resolved against the
  CPU once (:func:`resolve_matmul_mode`);
- each layer's backend (``kernels.backends.LayerBackend``), chosen when its weights are packed;
- under :attr:`MatmulMode.AUTO`, the side (:class:`Side`: the quantized blocks or the bfloat16
  packs) for each step kind (:class:`StepKind`) and row-count band (:class:`Band`), which
  depends on the CPU: calibrated once at load on this machine (``kernels.table.calibrate_sides``,
  timed by ``inference.engine.sides``) or pinned by a :class:`Crossover`.

``kernels.table.KernelTable`` records them for one load: the engine asks it, and nothing else, which
packs run a step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import torch


class Backend(enum.StrEnum):
    """Where the public kernels run (``LASER_KERNELS``)."""

    AUTO = "auto"  # Triton on CUDA tensors, the C kernels on CPU ones where they build
    TRITON = "triton"  # always Triton (CPU tensors need TRITON_INTERPRET=1)
    NATIVE = "native"  # the C kernels on CPU tensors; an error where they do not build
    REFERENCE = "reference"  # always the plain PyTorch reference

    @classmethod
    def parse(cls, value: str, source: str = "LASER_KERNELS") -> Backend:
        """``value`` (any case, blank: ``auto``) as a backend; ValueError naming ``source``."""
        value = value.strip().lower() or "auto"
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{source}={value!r}: expected one of "
                             f"{', '.join(b.value for b in cls)}") from None


class MatmulMode(enum.StrEnum):
    """What a model's CPU projections are packed for (``kernels.packing``)."""

    OWN = "own"  # each weight in its own dtype (oneDNN-packed on a CPU)
    BF16 = "bfloat16"  # a float32 model's projections in bfloat16: mixed precision
    QUANT = "quant"  # the GGUF's quantized blocks, activations in two int8 parts
    Q8 = "q8"  # the same with one part in decode steps (llama.cpp's arithmetic)
    AUTO = "auto"  # both QUANT and BF16 packs, a side per step kind and band

    @property
    def quantized(self) -> bool:
        return self in (MatmulMode.QUANT, MatmulMode.Q8)

    @classmethod
    def of(cls, value: MatmulMode | torch.dtype | str | None) -> MatmulMode:
        """A mode from what callers outside the engine pass: None (``OWN``), ``torch.bfloat16``
        (``BF16``), a mode or its name."""
        if value is None:
            return cls.OWN
        if isinstance(value, torch.dtype):
            if value != torch.bfloat16:
                raise ValueError(f"no matmul mode packs projections as {value}")
            return cls.BF16
        return cls(value)


class Side(enum.IntEnum):
    """Which of AUTO's two packings runs a step."""

    QUANT = 0
    BF16 = 1


def resolve_matmul_mode(requested: MatmulMode, model_dtype: torch.dtype, cpu: bool,
                        quant: bool, bf16: bool) -> MatmulMode:
    """The mode a load packs for: ``requested`` where this machine serves it (``quant``: the
    quantized matmul builds; ``bf16``: native bfloat16 matmuls), else what it falls back to.
    Only a float32 model on a CPU packs for another dtype than its own."""
    if not cpu or requested is MatmulMode.OWN:
        return MatmulMode.OWN
    if requested.quantized:
        return requested if model_dtype == torch.float32 else MatmulMode.OWN
    if model_dtype != torch.float32:
        return MatmulMode.OWN
    if requested is MatmulMode.AUTO:
        if quant:
            return MatmulMode.AUTO if bf16 else MatmulMode.QUANT
        return MatmulMode.BF16 if bf16 else MatmulMode.OWN
    return requested


class StepKind(enum.IntEnum):
    """What a step runs, as far as the packs go: decode rows only, or prompt tokens too (these
    take each side's two-part packs, so the sides' order can differ from decode steps')."""

    DECODE = 0
    PROMPT = 1

    @property
    def min_rows(self) -> int:
        """The fewest tokens a step of this kind has (a prompt step has a row of two or more)."""
        return 1 if self is StepKind.DECODE else 2


class Band(enum.IntEnum):
    """Row-count bands of a step, each valued at its widest step: the widths at which the
    kernels change how they work. One row is bound by weight bytes; a quantized or bfloat16
    tile holds up to 8 rows; from 16 rows the quantized matmul splits its rows over the pool;
    the C layer takes prompt chunks of up to 64 rows and torch's wide threads start at 128."""

    ONE = 1
    TILE = 8
    POOL = 32
    CHUNK = 128
    WIDE = 1 << 30

    @classmethod
    def of(cls, rows: int) -> Band:
        """The band of a step of ``rows`` tokens."""
        return next(band for band in cls if rows <= band)

    @property
    def low(self) -> int:
        """The narrowest step in the band."""
        below = [b for b in Band if b < self]
        return below[-1] + 1 if below else 1

    @property
    def probe(self) -> int:
        """The rows a calibration times for the band: about its geometric middle."""
        return _PROBES[self]


_PROBES = {Band.ONE: 1, Band.TILE: 4, Band.POOL: 16, Band.CHUNK: 64, Band.WIDE: 256}


class SideRule(Protocol):
    """The side a step of ``rows`` tokens of ``kind`` runs on under ``AUTO``."""

    def side(self, rows: int, kind: StepKind) -> Side: ...


@dataclass(frozen=True, slots=True)
class Crossover:
    """A pinned split: steps of at most ``max_rows`` tokens on the quantized blocks, wider ones
    on the bfloat16 packs, whatever their kind (``EngineConfig.quant_max_rows``)."""

    max_rows: int

    def side(self, rows: int, kind: StepKind) -> Side:
        return Side.BF16 if rows > self.max_rows else Side.QUANT
