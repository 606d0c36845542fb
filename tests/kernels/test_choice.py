"""``kernels.choice``: the typed kernel choices of one load, without tensors or packing."""

from __future__ import annotations

import pytest
import torch

from kernels.choice import (
    Backend,
    Band,
    Crossover,
    MatmulMode,
    Side,
    StepKind,
    resolve_matmul_mode,
)
from kernels.table import KernelTable, SideTable, calibrate_sides


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


def test_a_crossover_splits_by_rows_whatever_the_kind():
    bands = Crossover(4)
    assert [bands.side(n, StepKind.DECODE) for n in (1, 4, 5, 64)] == [
        Side.QUANT, Side.QUANT, Side.BF16, Side.BF16]
    assert bands.side(5, StepKind.PROMPT) is Side.BF16


def test_bands_cover_every_width_in_order():
    assert [Band.of(n) for n in (1, 2, 8, 9, 32, 33, 128, 129, 4096)] == [
        Band.ONE, Band.TILE, Band.TILE, Band.POOL, Band.POOL, Band.CHUNK, Band.CHUNK,
        Band.WIDE, Band.WIDE]
    assert [b.low for b in Band] == [1, 2, 9, 33, 129]
    assert all(b.low <= b.probe <= b for b in Band)


def make_table(quant_up_to: Band, prompt: Side = Side.BF16) -> SideTable:
    """Decode steps on the blocks up to ``quant_up_to``, prompt steps all on ``prompt``."""
    sides = {(StepKind.DECODE, b): Side.QUANT if b <= quant_up_to else Side.BF16 for b in Band}
    sides |= {(StepKind.PROMPT, b): prompt for b in Band}
    return SideTable.of(sides)


def test_the_table_looks_up_the_side_per_kind_and_band():
    table = make_table(Band.TILE)
    assert [table.side(n, StepKind.DECODE) for n in (1, 8, 9, 64, 300)] == [
        Side.QUANT, Side.QUANT, Side.BF16, Side.BF16, Side.BF16]
    assert {table.side(n, StepKind.PROMPT) for n in (2, 30, 3000)} == {Side.BF16}
    with pytest.raises(ValueError, match="one side per step kind and band"):
        SideTable(table.rows[1:])


def fake_timer(quant_faster_up_to: int, calls: list | None = None):
    """Step seconds that make the blocks faster up to ``quant_faster_up_to`` rows (prompt
    steps: never), the bfloat16 packs beyond."""
    def seconds(side: Side, kind: StepKind, rows: int) -> float:
        if calls is not None:
            calls.append((side, kind, rows))
        quant_wins = kind is StepKind.DECODE and rows <= quant_faster_up_to
        return rows * (1.0 if (side is Side.QUANT) == quant_wins else 1.5)
    return seconds


def test_calibration_picks_the_faster_side_per_band():
    table = calibrate_sides(fake_timer(8), dict.fromkeys(StepKind, 512))
    assert table == make_table(Band.TILE, prompt=Side.BF16)
    assert calibrate_sides(fake_timer(100), dict.fromkeys(StepKind, 512)) == make_table(
        Band.CHUNK, prompt=Side.BF16)


def test_calibration_times_each_reachable_band_alternating_until_clear():
    calls: list = []
    table = calibrate_sides(fake_timer(1, calls), {StepKind.DECODE: 20, StepKind.PROMPT: 3},
                            repeats=2, clear=1.25, most=4)
    decode = sorted({rows for _, kind, rows in calls if kind is StepKind.DECODE})
    prompt = sorted({rows for _, kind, rows in calls if kind is StepKind.PROMPT})
    assert decode == [1, 4, 16] and prompt == [3]  # no 1-row prompt, nothing past the widest
    assert calls[:4] == [(side, StepKind.DECODE, 1) for side in Side] * 2  # 1.5x: clear
    # bands no step reaches take the nearest timed band's side
    assert table.side(4096, StepKind.DECODE) is table.side(16, StepKind.DECODE) is Side.BF16
    assert table.side(1, StepKind.PROMPT) is table.side(64, StepKind.PROMPT) is Side.BF16


def test_calibration_keeps_the_least_time_and_the_blocks_on_a_tie():
    runs = iter([9.0, 1.0, 2.0, 9.0])  # least: quant 2, bfloat16 1, though it ran last at 9
    table = calibrate_sides(lambda side, kind, rows: next(runs),
                            {StepKind.DECODE: 1, StepKind.PROMPT: 1}, repeats=2, most=4)
    assert table.side(1, StepKind.DECODE) is Side.BF16
    calls: list = []
    tie = calibrate_sides(lambda side, kind, rows: calls.append(side) or 1.0,
                          dict.fromkeys(StepKind, 1), repeats=2, most=3)
    assert {side for _, _, side in tie.rows} == {Side.QUANT}
    assert len(calls) == 6  # never clear: ``most`` runs of each side


def test_the_table_gives_a_side_only_with_two_packings():
    table = make_table(Band.ONE)
    one = KernelTable(MatmulMode.AUTO, Backend.AUTO, sides=table)  # AUTO fell back: one pack
    assert not one.two_sided and one.side(3, StepKind.DECODE) is None
    both = KernelTable(MatmulMode.AUTO, Backend.AUTO, True,
                       {Side.QUANT: object(), Side.BF16: object()}, table)
    assert both.two_sided and both.side(1, StepKind.DECODE) is Side.QUANT
    assert both.side(3, StepKind.DECODE) is Side.BF16
