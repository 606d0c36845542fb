"""What the engine and the simulator ask of a scheduling policy: ``SchedulingPolicy``, and,
of a policy that lets the executor stop a forward between layers, ``LayerPausing``.

The engine and the simulator hold a policy as a ``SchedulingPolicy`` and ask
``layer_pausing`` once, when they build it, for its pause hooks: a policy without them gets
``NEVER_PAUSES`` (its plans never carry ``pause_until``, so nothing is ever held).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

from inference.kv.block_manager import BlockManager
from inference.scheduler.plan import StepPlan, StepResult
from inference.sequence import Sequence, SequenceStatus


@runtime_checkable
class SchedulingPolicy(Protocol):
    """A policy: requests in (``add``) and out (``abort``, ``finish``), one plan a step
    (``schedule``) and its sampled tokens folded back (``update``). ``seqs`` are the
    sequences it holds by id, ``waiting`` those queued; ``kv`` is the block pool it
    allocates from."""

    name: str
    kv: BlockManager
    seqs: dict[str, Sequence]
    waiting: list[Sequence]
    num_preemptions: int

    def add(self, seqs: list[Sequence], now: float) -> None:
        """Queue a request's sequences, or raise ``AdmissionRefused`` with a reason."""
        ...

    def abort(self, request_id: str) -> list[Sequence]:
        """Drop every sequence of a request and free its blocks; the ones dropped."""
        ...

    def finish(self, seq_id: str, status: SequenceStatus) -> None:
        """Finish a sequence for a reason found outside the policy (e.g. a stop string)."""
        ...

    def schedule(self, now: float) -> StepPlan:
        """Decide this step's batch."""
        ...

    def update(self, plan: StepPlan, sampled: Mapping[str, int], now: float) -> StepResult:
        """Fold a step's sampled tokens back: advance, append, finish."""
        ...

    def has_work(self) -> bool:
        ...

    def in_flight(self) -> list[Sequence]:
        """Sequences holding KV blocks for work in progress."""
        ...

    def observe_step(self, num_tokens: int, seconds: float, prompt_tokens: int = 0,
                     token_s: float | None = None) -> None:
        """A measured step (the engine reports each one)."""
        ...

    def observe_contention(self, factor: float) -> None:
        """How many times longer the engine's threads take than with the cores to themselves."""
        ...


@runtime_checkable
class LayerPausing(Protocol):
    """The layer-pause hooks (docs/engine.md, "Layer pause"): a plan with ``pause_until``
    may be stopped between layers; the executor then ``hold``s its sequences, runs other
    plans, asks ``pause_due_at`` when to stop the resumed forward again, and ``release``s
    the sequences once the forward completes."""

    def pause_due_at(self) -> float:
        """When the paused forward must stop again for hot work (inf: not for time)."""
        ...

    def hold(self, seq_ids: Iterable[str]) -> None:
        """The forward of these sequences stopped between layers: keep them out of plans."""
        ...

    def release(self) -> None:
        """The paused forward completed or was dropped: its sequences run again."""
        ...


class _NeverPauses:
    """The hooks of a policy that never asks for a pause."""

    def pause_due_at(self) -> float:
        return math.inf

    def hold(self, seq_ids: Iterable[str]) -> None:
        raise RuntimeError("this policy's plans are never paused")

    def release(self) -> None:
        return None


NEVER_PAUSES: LayerPausing = _NeverPauses()


def layer_pausing(policy: object) -> LayerPausing:
    """``policy``'s layer-pause hooks, or ``NEVER_PAUSES`` when it has none."""
    return policy if isinstance(policy, LayerPausing) else NEVER_PAUSES
