"""The table of one load's kernel choices (:mod:`kernels.choice`), beside the packings it
holds: the engine asks it, and nothing else, which packs run a step."""

from __future__ import annotations

from dataclasses import dataclass, field

from kernels.backends import Packing
from kernels.choice import Backend, BandChooser, MatmulMode, Side


@dataclass(slots=True)
class KernelTable:
    """One load's kernel choices: the matmul ``mode`` it asked for (resolved against the CPU),
    the ``backend``, whether the C kernels serve its CPU tensors (``c_kernels``: the head's
    rescoring, the final norm), whether its layers run on them (``native``: a float32 model on
    a CPU where they build, with a float32 or float16 KV cache), the packings a step may switch
    between (none where the model keeps the one it packed; under ``AUTO`` one per
    ``Side``) and, under ``AUTO``, the ``bands`` that pick a side per step kind and row
    count."""

    mode: MatmulMode
    backend: Backend
    native: bool = False
    packings: dict[Side, Packing] = field(default_factory=dict)
    bands: BandChooser | None = None
    c_kernels: bool = False

    @property
    def two_sided(self) -> bool:
        return self.bands is not None and len(self.packings) == 2

    def side(self, n: int, prompt: bool, explore: bool) -> Side | None:
        """The side a step of ``n`` tokens runs on, or None where there is one packing."""
        return self.bands.choose(n, prompt, explore) if self.two_sided and self.bands else None

    def observe(self, n: int, side: Side, seconds: float, prompt: bool) -> None:
        """A whole step of ``n`` tokens on ``side`` took ``seconds``: the bands learn."""
        if self.bands is not None:
            self.bands.observe(n, side, seconds, prompt)
