"""Layer pause, the ``laser`` policy's part of it (docs/engine.md, "Layer pause").

Where the executor can stop a forward between decoder layers (the engine; the simulator runs
whole steps), a plan without hot work carries ``pause_until``: the executor stops it at a
layer boundary once a hot request arrives or a hot stream's next token falls due, ``hold``s
its sequences (they leave ``running`` and keep their blocks), runs hot-only steps, and resumes
it; a plan sets ``finish_paused`` when hot work needs the blocks the paused forward holds.
While hot streams decode, their rows and the rest share each step (under hot's TBT cap), so
such a plan is rare then: the pause is for a hot arrival behind a long step of other work.
``LayerPause`` is the part, with its own state (the paused forward's sequences).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from inference.kv.block_manager import BlockManager
from inference.scheduler.cost import CostEstimator
from inference.scheduler.laser.config import LaserPolicyConfig
from inference.scheduler.laser.keys import SchedClass
from inference.scheduler.plan import StepPlan
from inference.sequence import Sequence

Rank = Callable[[Sequence], SchedClass]
HOT = SchedClass.HOT


class LayerPause:
    """The policy's side of the layer pause. ``layers``: the decoder layers the executor can
    stop a forward between (0, as in the simulator's whole steps: never pauses); ``held``:
    the sequences of the paused forward, out of every plan until ``release``;
    ``free_on_release``: those of them that finished meanwhile (the forward may still write
    their blocks)."""

    def __init__(self, layers: int, policy: LaserPolicyConfig, cost: CostEstimator) -> None:
        self.layers, self.policy, self.cost = layers, policy, cost
        self.held: list[Sequence] = []
        self.free_on_release: list[Sequence] = []

    @property
    def pausing(self) -> bool:
        """The executor can stop between layers."""
        return bool(self.layers)

    def may_pause(self, plan: StepPlan, seqs: Mapping[str, Sequence], rank: Rank) -> bool:
        """A plan without class-``HOT`` work may stop between layers (while no forward is
        held)."""
        if not self.pausing or plan.is_empty or self.held:
            return False
        return all(rank(seqs[i.seq_id]) is not HOT for i in plan.scheduled if i.seq_id in seqs)

    def due_at(self, running: Iterable[Sequence], rank: Rank,
               tbt_safety: Callable[[], float]) -> float:
        """When the earliest running hot stream's next token falls due: ``tbt_safety`` of its
        TBT target after its last token, less the estimated hot step and the layer in flight
        when the time comes (at most ``pause_layer_frac`` of the target); inf: none."""
        hot = [q for q in running if rank(q) is HOT and not q.is_prefilling]
        if not (self.pausing and hot):
            return math.inf
        safety = tbt_safety()
        step = self.cost.step_time(len(hot), sum(q.num_computed_tokens for q in hot))
        frac = safety - self.policy.pause_layer_frac
        return min((q.last_token_time or -math.inf) + frac * q.targets.tbt_p99_s
                   for q in hot) - step

    def step_cap_s(self, now: float, hot_seen: tuple[float, float] | None,
                   running: Iterable[Sequence], rank: Rank) -> float | None:
        """Longest step a pausable fill may take: ``pause_layer_frac`` of the latest hot TBT
        target (``hot_seen``: when a hot request was last admitted, and its target) per
        layer, while hot traffic was seen within the reserve window; else None."""
        if not (self.pausing and hot_seen):
            return None
        seen, tbt = hot_seen
        if now - seen > self.policy.reserve_window_s and not any(
                rank(q) is HOT for q in running):
            return None
        return self.policy.pause_layer_frac * tbt * self.layers

    def hold(self, seq_ids: Iterable[str], running: list[Sequence]) -> list[Sequence]:
        """The executor paused a forward: its sequences leave ``running`` (the list
        returned) and keep their blocks, which the forward has partly written; one that
        finishes meanwhile frees them only at ``release``."""
        ids = set(seq_ids)
        self.held = [s for s in running if s.seq_id in ids]
        return [s for s in running if s.seq_id not in ids]

    def release(self, running: list[Sequence], kv: BlockManager) -> list[Sequence]:
        """The paused forward completed (or was dropped): held sequences run again, first
        (the running list returned); the blocks of those that finished meanwhile are freed."""
        running = self.held + running
        self.held = []
        for seq in self.free_on_release:
            kv.free(seq)
        self.free_on_release = []
        return running

    def keeps_blocks(self, seq: Sequence) -> bool:
        """A finished sequence of the paused forward keeps its blocks until ``release``."""
        if seq in self.held:
            self.held.remove(seq)
            self.free_on_release.append(seq)
            return True
        return False
