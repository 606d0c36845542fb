"""Layer pause, the ``laser`` policy's part of it (docs/engine.md, "Layer pause").

Where the executor can stop a forward between decoder layers (the engine; the simulator runs
whole steps), a plan without hot work carries ``pause_until``: the executor stops it at a
layer boundary once a hot request arrives or a hot stream's next token falls due, ``hold``s
its sequences (they leave ``running`` and keep their blocks), runs hot-only steps, and resumes
it; a plan sets ``finish_paused`` when hot work needs the blocks the paused forward holds.
While hot streams decode, their rows and the rest share each step (under hot's TBT cap), so
such a plan is rare then: the pause is for a hot arrival behind a long step of other work.
The state is the policy's ``PauseState``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from inference.scheduler.laser.keys import SchedClass
from inference.scheduler.plan import StepPlan
from inference.sequence import Sequence


class LayerPause:
    """Mixed into ``LaserScheduler`` (which provides ``pause``, ``rank``, ``cost``,
    ``tbt_safety``, ``policy``, ``ablations``, ``state`` and the queues)."""

    @property
    def pausing(self) -> bool:
        """The executor can stop between layers and the policy wants it to."""
        return bool(self.pause.layers) and self.ablations.layer_pause_enabled

    def _may_pause(self, plan: StepPlan) -> bool:
        """A plan without class-0 work may stop between layers (while no forward is held)."""
        if not self.pausing or plan.is_empty or self.pause.held:
            return False
        return all(self.rank(self.seqs[i.seq_id]) is not SchedClass.HOT for i in plan.scheduled
                   if i.seq_id in self.seqs)

    def pause_due_at(self) -> float:
        """When the earliest running hot stream's next token falls due: ``tbt_safety`` of its
        TBT target after its last token, less the estimated hot step and the layer in flight
        when the time comes (at most ``pause_layer_frac`` of the target); inf: none."""
        hot = [q for q in self.running
               if self.rank(q) is SchedClass.HOT and not q.is_prefilling]
        if not (self.pausing and hot):
            return math.inf
        safety = self.tbt_safety()
        step = self.cost.step_time(len(hot), sum(q.num_computed_tokens for q in hot))
        frac = safety - self.policy.pause_layer_frac
        return min((q.last_token_time or -math.inf) + frac * q.targets.tbt_p99_s
                   for q in hot) - step

    def pause_step_cap_s(self, now: float) -> float | None:
        """Longest step a pausable fill may take: ``pause_layer_frac`` of the latest hot TBT
        target per layer, while hot traffic was seen within the reserve window; else None."""
        if not (self.pausing and self.state.hot_seen):
            return None
        seen, tbt = self.state.hot_seen
        if now - seen > self.policy.reserve_window_s and not any(
                self.rank(q) is SchedClass.HOT for q in self.running):
            return None
        return self.policy.pause_layer_frac * tbt * self.pause.layers

    def hold(self, seq_ids: Iterable[str]) -> None:
        """The executor paused a forward: its sequences leave ``running`` (no plan schedules
        or preempts them until ``release``) and keep their blocks, which the forward has
        partly written; one that finishes meanwhile (abort) frees them only at ``release``."""
        ids = set(seq_ids)
        self.pause.held = [s for s in self.running if s.seq_id in ids]
        self.running = [s for s in self.running if s.seq_id not in ids]

    def release(self) -> None:
        """The paused forward completed (or was dropped): held sequences run again."""
        pause = self.pause
        self.running = pause.held + self.running
        pause.held = []
        for seq in pause.free_on_release:
            self.kv.free(seq)
        pause.free_on_release = []

    def has_work(self) -> bool:
        return super().has_work() or bool(self.pause.held)

    def in_flight(self) -> list[Sequence]:
        return self.pause.held + self.running

    def _free_blocks(self, seq: Sequence) -> None:
        if seq in self.pause.held:
            self.pause.held.remove(seq)
            self.pause.free_on_release.append(seq)
        else:
            super()._free_blocks(seq)
