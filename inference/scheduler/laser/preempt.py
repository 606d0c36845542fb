"""Preemption within one step of the ``laser`` fill: the least urgent running sequence
ranked after the work that needs room goes first, and hot work first takes the hot block
reserve back from the sequences that borrow it. A mixin of ``StepFill``, whose state
(``victims``, ``items``, the step's counts) it updates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inference.scheduler.laser.keys import SchedClass, SortKey

if TYPE_CHECKING:
    from inference.sequence import Sequence


class Preemption:
    """``StepFill``'s preemption (see the module docstring)."""

    def _preempt_below(self, key: SortKey) -> bool:
        """Preempt the least urgent running sequence ranked after ``key``; False if none.
        Hot work takes the hot block reserve back from its borrowers first."""
        if key.cls is SchedClass.HOT and (self.v.lent or self.borrowed) and self._reclaim():
            return True
        while self.victims:
            victim = self.victims[-1]
            if victim.seq_id in self.gone:
                self.victims.pop()
                continue
            if self.v.key(victim) <= key:
                return False
            self.victims.pop()
            self._preempt(victim)
            return True
        return False

    def _reclaim(self) -> bool:
        """Preempt the least urgent running borrower of the hot block reserve, if any."""
        lent, new = self.v.lent, self.borrowed
        for i in range(len(self.victims) - 1, -1, -1):
            victim = self.victims[i]
            sid = victim.seq_id
            if (sid not in self.gone and (sid in lent or sid in new)
                    and self.v.key(victim).cls is not SchedClass.HOT):
                del self.victims[i]
                self._preempt(victim)
                return True
        return False

    def _preempt(self, seq: Sequence) -> None:
        entry = self.items.pop(seq.seq_id, None)
        if entry is not None:
            (item, _), cls = entry
            self.used -= item.num_tokens
            if item.num_tokens > 1:
                self.prompt -= item.num_tokens
            self.used_by_class[cls] -= item.num_tokens
            self.attn_s -= self._chunk_attn(item)
            if cls is SchedClass.HOT:
                self.hot_blocks -= self._computed_blocks(seq)
        self.v.kv.free(seq)
        self.gone.add(seq.seq_id)
        self.preempted.append(seq)
        self.n_running -= 1
        self._spent.clear()
