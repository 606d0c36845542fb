"""Which packs run a step under ``matmul_dtype=auto``, calibrated once at load: the runner's
model runs synthetic steps of each kind and band on each side (``StepProbe``), and
``kernels.table.calibrate_sides`` records the faster side per band in a ``SideTable`` that
every later step only looks up (docs/engine.md, "Which kernels run a step").

A probe runs only as many layers as keep its work near ``PROBE_ROW_LAYERS`` row-layers (every
layer has the same shapes, so one layer's time scales to the stack), then the final norm and
the LM head on the rows a step of that kind samples: the head is where the two sides differ
most in a prompt step (the bfloat16 side scores it on the float32 head).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from inference.model import AttentionMetadata
from kernels.choice import Side, StepKind
from kernels.table import SideTable, calibrate_sides

if TYPE_CHECKING:
    from inference.engine.runner import ModelRunner

# rows x layers one probe runs: a one-row probe runs the whole stack, wider ones fewer layers
PROBE_ROW_LAYERS = 16


class StepProbe:
    """Times synthetic steps of ``runner``'s model on either side (``seconds``): decode steps
    of ``rows`` one-token sequences, each in a block of its own, and prompt steps of one
    ``rows``-token prompt that samples its last row. The probes write KV blocks that no
    sequence owns yet (it runs before the first step)."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner

    def widest(self) -> dict[StepKind, int]:
        """The widest probe of each kind the KV pool holds."""
        runner = self.runner
        return {StepKind.DECODE: runner.num_blocks,
                StepKind.PROMPT: runner.num_blocks * runner.block_size}

    def seconds(self, side: Side, kind: StepKind, rows: int) -> float:
        """A step's estimated seconds: the layers run, scaled to the whole stack, plus the
        final norm and the head."""
        runner, model = self.runner, self.runner.model
        runner.use_side(side, rows)
        ids, positions, meta, sample = self._inputs(kind, rows)
        total = len(model.layers)
        layers = max(1, min(total, PROBE_ROW_LAYERS // rows))
        stop = None if layers == total else (lambda: True)
        with torch.inference_mode():
            t0 = time.perf_counter()
            hidden, residual, ran = model.run_layers(positions, model.embed(ids), None,
                                                     runner.kv_caches, meta, 0, stop, layers)
            t1 = time.perf_counter()
            out = model.norm_out(hidden, residual).index_select(0, sample)
            model.compute_logits(out, exact=kind is StepKind.PROMPT)
            t2 = time.perf_counter()
        return (t1 - t0) * total / max(1, ran) + (t2 - t1)

    def _inputs(self, kind: StepKind, rows: int
                ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        """Token ids, positions, metadata and sampled rows of a probe step."""
        bs, vocab = self.runner.block_size, self.runner.model.config.vocab_size
        ids = torch.arange(rows, dtype=torch.int64) % vocab
        if kind is StepKind.DECODE:  # one token at its block's last slot
            meta = AttentionMetadata.build([[i] for i in range(rows)], [bs] * rows,
                                           [1] * rows, bs)
            positions, sample = torch.full((rows,), bs - 1), torch.arange(rows)
        else:
            meta = AttentionMetadata.build([list(range(-(-rows // bs)))], [rows], [rows], bs)
            positions, sample = torch.arange(rows), torch.tensor([rows - 1])
        meta.native = self.runner.kernels.native
        return ids, positions, meta, sample


def calibrate(runner: ModelRunner, widest: dict[StepKind, int]) -> SideTable:
    """The side per step kind and band for ``runner`` on this machine, for steps of up to
    ``widest[kind]`` tokens (capped by the KV pool)."""
    probe = StepProbe(runner)
    fits = probe.widest()
    return calibrate_sides(probe.seconds, {k: min(widest[k], fits[k]) for k in StepKind})
