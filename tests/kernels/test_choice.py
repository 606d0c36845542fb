"""``kernels.choice``: the typed kernel choices of one load, without tensors or packing."""

from __future__ import annotations

import pytest
import torch

from kernels.choice import (
    Backend,
    Crossover,
    MatmulMode,
    Side,
    resolve_matmul_mode,
)
from kernels.table import KernelTable


def test_backend_names_parse_in_any_case_and_blank_is_auto():
    assert Backend.parse(" Native ") is Backend.NATIVE
    assert Backend.parse("") is Backend.AUTO
    with pytest.raises(ValueError, match="X=.cuda.*auto, triton, native, reference"):
        Backend.parse("cuda", "X")


def test_matmul_modes_from_what_callers_pass():
    assert MatmulMode.of(None) is MatmulMode.OWN
    assert MatmulMode.of(torch.bfloat16) is MatmulMode.BF16
    assert MatmulMode.of("q8") is MatmulMode.Q8 and MatmulMode.Q8.quantized
    assert not MatmulMode.AUTO.quantized
    with pytest.raises(ValueError):
        MatmulMode.of(torch.float16)


@pytest.mark.parametrize(("requested", "dtype", "cpu", "quant", "bf16", "want"), [
    (MatmulMode.AUTO, torch.float32, True, True, True, MatmulMode.AUTO),
    (MatmulMode.AUTO, torch.float32, True, True, False, MatmulMode.QUANT),
    (MatmulMode.AUTO, torch.float32, True, False, True, MatmulMode.BF16),
    (MatmulMode.AUTO, torch.float32, True, False, False, MatmulMode.OWN),
    (MatmulMode.AUTO, torch.bfloat16, True, True, True, MatmulMode.OWN),
    (MatmulMode.AUTO, torch.float32, False, True, True, MatmulMode.OWN),
    (MatmulMode.Q8, torch.float32, True, False, False, MatmulMode.Q8),
    (MatmulMode.QUANT, torch.bfloat16, True, True, True, MatmulMode.OWN),
    (MatmulMode.BF16, torch.float32, True, False, False, MatmulMode.BF16),
    (MatmulMode.OWN, torch.float32, True, True, True, MatmulMode.OWN),
])
def test_a_requested_mode_resolves_against_the_machine(requested, dtype, cpu, quant, bf16,
                                                       want):
    assert resolve_matmul_mode(requested, dtype, cpu, quant, bf16) is want


def test_a_crossover_splits_the_bands_by_rows_and_learns_nothing():
    bands = Crossover(4)
    assert [bands.choose(n) for n in (1, 4, 5, 64)] == [Side.QUANT, Side.QUANT, Side.BF16,
                                                         Side.BF16]
    bands.observe(5, Side.BF16, 10.0)
    assert bands.choose(5, prompt=True) is Side.BF16


class _Bands:
    """Records what the table asks and is told."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def choose(self, n: int, prompt: bool = False, explore: bool = True) -> Side:
        self.calls.append(("choose", n, prompt, explore))
        return Side.BF16

    def observe(self, n: int, side: Side, seconds: float, prompt: bool = False) -> None:
        self.calls.append(("observe", n, side, prompt))


def test_the_table_asks_its_bands_only_with_two_packings():
    bands = _Bands()
    one = KernelTable(MatmulMode.AUTO, Backend.AUTO, bands=bands)  # AUTO fell back: one pack
    assert not one.two_sided and one.side(3, False, True) is None and not bands.calls
    both = KernelTable(MatmulMode.AUTO, Backend.AUTO, True,
                       {Side.QUANT: object(), Side.BF16: object()}, bands)
    assert both.two_sided and both.side(3, True, False) is Side.BF16
    both.observe(3, Side.BF16, 0.1, True)
    assert bands.calls == [("choose", 3, True, False), ("observe", 3, Side.BF16, True)]
