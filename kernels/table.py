"""The table of one load's kernel choices (:mod:`kernels.choice`), beside the packings it
holds: the engine asks it, and nothing else, which packs run a step.

Under ``AUTO`` the side per step kind and row band is calibrated once, at load
(:func:`calibrate_sides`): which side is faster at which width differs between CPUs with the
same vector units, so no fixed crossover suits every machine, and a choice made once keeps a
step's kernels (and so its bits) a function of its shape alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kernels.backends import Packing
from kernels.choice import Backend, Band, MatmulMode, Side, SideRule, StepKind

# seconds one step of ``rows`` tokens of a kind takes on a side (a calibration's clock)
StepTimer = Callable[[Side, StepKind, int], float]


@dataclass(frozen=True, slots=True)
class SideTable:
    """A side for every step kind and row band (``rows``: one entry per ``(kind, band)``,
    as ``calibrate_sides`` makes it)."""

    rows: tuple[tuple[StepKind, Band, Side], ...]

    def __post_init__(self) -> None:
        keys = {(kind, band) for kind, band, _ in self.rows}
        if len(keys) != len(self.rows) or len(keys) != len(StepKind) * len(Band):
            raise ValueError("a SideTable needs exactly one side per step kind and band")

    @classmethod
    def of(cls, sides: Mapping[tuple[StepKind, Band], Side]) -> SideTable:
        return cls(tuple((kind, band, side) for (kind, band), side in sorted(sides.items())))

    def side(self, rows: int, kind: StepKind) -> Side:
        """The side of a step of ``rows`` tokens of ``kind``."""
        band = Band.of(rows)
        return next(side for k, b, side in self.rows if k is kind and b is band)


def calibrate_sides(seconds: StepTimer, widest: Mapping[StepKind, int], repeats: int = 2,
                    clear: float = 1.25, most: int = 4) -> SideTable:
    """Time both sides on each band a step of each kind can fall in (up to ``widest[kind]``
    tokens), at the band's probe width (or the widest step, where that is narrower): the
    sides in turn, so that a drift of the machine's speed hits both alike, ``repeats`` times
    each, and up to ``most`` times while neither side's least time is ``clear`` times the
    other's. A band goes to the side with the least time (a slow run is noise from the rest of
    the machine, a fast one is not), the quantized blocks on a tie; a band no step can reach
    takes its nearest timed band's side."""
    sides: dict[tuple[StepKind, Band], Side] = {}
    for kind in StepKind:
        timed = {band: _faster(seconds, kind, min(band.probe, widest[kind]), repeats, clear,
                               most)
                 for band in Band
                 if max(band.low, kind.min_rows) <= min(band, widest[kind])}
        for band in Band:
            near = min(timed, key=lambda b: (abs(b - band), b), default=None)
            sides[kind, band] = Side.QUANT if near is None else timed[near]
    return SideTable.of(sides)


def _faster(seconds: StepTimer, kind: StepKind, rows: int, repeats: int, clear: float,
            most: int) -> Side:
    rows = max(rows, kind.min_rows)
    best = {side: float("inf") for side in Side}
    for run in range(max(repeats, most)):
        for side in Side:
            best[side] = min(best[side], seconds(side, kind, rows))
        fast, slow = sorted(best.values())
        if run + 1 >= repeats and slow >= clear * fast:
            break
    return Side.QUANT if best[Side.QUANT] <= best[Side.BF16] else Side.BF16


@dataclass(slots=True)
class KernelTable:
    """One load's kernel choices: the matmul ``mode`` it asked for (resolved against the CPU),
    the ``backend``, whether the C kernels serve its CPU tensors (``c_kernels``: the head's
    rescoring, the final norm), whether its layers run on them (``native``: a float32 model on
    a CPU where they build, with a float32 or float16 KV cache), the packings a step may switch
    between (none where the model keeps the one it packed; under ``AUTO`` one per ``Side``)
    and, under ``AUTO``, the rule (``sides``: a calibrated :class:`SideTable` or a pinned
    ``Crossover``) that picks a side per step kind and row count."""

    mode: MatmulMode
    backend: Backend
    native: bool = False
    packings: dict[Side, Packing] = field(default_factory=dict)
    sides: SideRule | None = None
    c_kernels: bool = False

    @property
    def two_sided(self) -> bool:
        return self.sides is not None and len(self.packings) == 2

    def side(self, rows: int, kind: StepKind) -> Side | None:
        """The side a step of ``rows`` tokens runs on, or None where there is one packing."""
        return self.sides.side(rows, kind) if self.two_sided and self.sides else None
