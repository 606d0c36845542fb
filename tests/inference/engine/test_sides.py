"""``matmul_dtype=auto``: the side per step kind and band, calibrated once at load
(``inference.engine.sides``), then only looked up: no environment read, no learning."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import pytest
import torch

import kernels
from inference.engine.sides import StepProbe
from kernels.choice import Band, Side, StepKind
from tests.kernels.test_choice import make_table
from tests.kernels.test_cpu_quant_model import _runner, _step

pytestmark = pytest.mark.skipif(
    not (kernels.quant_supported() and kernels.bf16_matmul_supported()),
    reason="auto keeps both packs only with both matmuls")


class _NoEnviron(Mapping[str, str]):
    """An ``os.environ`` whose every read fails the test."""

    def __getitem__(self, key: str) -> str:
        raise AssertionError(f"environment read at call time: {key}")

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("environment read at call time")

    def __len__(self) -> int:
        raise AssertionError("environment read at call time")


def test_steps_read_no_environment_after_load(monkeypatch):
    from inference.engine.runner import AUTO

    auto = _runner(AUTO, sides=make_table(Band.ONE))
    with monkeypatch.context() as patch:  # undone before pytest writes its own variables
        patch.setattr(os, "environ", _NoEnviron())
        for rows, side in ((1, Side.QUANT), (3, Side.BF16), (-5, Side.BF16), (1, Side.QUANT)):
            auto.execute(_step(rows))
            assert auto.packs_in_use == side


def test_a_calibrated_runner_steps_as_one_given_its_table():
    """The probes write only KV blocks no sequence owns yet and leave nothing behind: after
    calibrating, each step's logits are those of a runner given the same table."""
    from inference.engine.runner import AUTO

    calibrated = _runner(AUTO)
    given = _runner(AUTO, sides=calibrated.kernels.sides)
    for rows in (1, 3, -5, 2):
        assert torch.equal(calibrated.execute(_step(rows)), given.execute(_step(rows))), rows
        assert calibrated.packs_in_use == given.packs_in_use


@pytest.mark.parametrize("kind", list(StepKind))
@pytest.mark.parametrize("rows", [2, 8, 40])
def test_a_probe_times_a_step_of_its_kind_on_either_side(kind, rows):
    """A probe runs on the side it names and estimates a positive step time; the KV pool
    bounds the widest probe of each kind."""
    from inference.engine.runner import AUTO

    runner = _runner(AUTO, sides=make_table(Band.ONE))
    probe = StepProbe(runner)
    assert probe.widest() == {StepKind.DECODE: 8, StepKind.PROMPT: 128}
    rows = min(rows, probe.widest()[kind])
    for side in Side:
        assert probe.seconds(side, kind, rows) > 0
        assert runner.packs_in_use is side
