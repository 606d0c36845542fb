"""A forward pass that runs layer by layer and may stop between layers (layer pause): the
runner starts it (``ModelRunner.begin``), the engine advances it around hot steps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .runner import BatchInputs, ModelRunner


class LayerwiseForward:
    """A forward pass paused between decoder layers: the state to resume from is the hidden
    state and residual after ``next_layer`` layers (each layer has already written its K/V).

    ``seconds`` adds up the time spent in ``advance``, for the step-time model.
    """

    def __init__(self, runner: ModelRunner, batch: BatchInputs, hidden: torch.Tensor) -> None:
        self.runner, self.batch = runner, batch
        self.hidden: torch.Tensor = hidden  # [T, hidden]
        self.residual: torch.Tensor | None = None
        self.next_layer = 0
        self.seconds = 0.0

    @property
    def done(self) -> bool:
        return self.next_layer >= len(self.runner.model.layers)

    def advance(self, stop: Callable[[], bool], min_layers: int = 1) -> bool:
        """Run layers until the last one or until ``stop()`` is true (asked between layers,
        after at least ``min_layers``); True when every layer has run."""
        t0 = time.perf_counter()
        model, batch = self.runner.model, self.batch
        self.runner.prepare_forward(batch)  # per advance: a hot step in between may change them
        with torch.inference_mode():
            self.hidden, self.residual, ran = model.run_layers(
                batch.positions, self.hidden, self.residual, self.runner.kv_caches, batch.meta,
                self.next_layer, stop, min_layers)
            self.next_layer += ran
        self.seconds += time.perf_counter() - t0
        return self.done

    def logits(self) -> torch.Tensor:
        """After the last layer: the sampling rows' float32 logits, as ``execute`` returns."""
        if not self.done:
            raise RuntimeError("the forward has layers left to run")
        with torch.inference_mode():
            t0 = time.perf_counter()
            self.runner.select_packs(self.batch)  # a hot step in between may switch them
            hidden = self.runner.model.norm_out(self.hidden, self.residual)
            out = self.runner.sample_logits(self.batch, hidden)
            self.seconds += time.perf_counter() - t0
            return out
