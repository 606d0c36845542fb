"""Preemption within one step of the ``laser`` fill: the least urgent running sequence
ranked after the work that needs room goes first, and hot work first takes the hot block
reserve back from the sequences that borrow it. ``Preemption`` is a part of its own, built
per step from what it reads (the running sequences in key order, the sort key, the block
manager, the reserve's borrowers) and handing each victim back to the fill through
``give_back``, which takes the victim's chunk out of the step's tallies."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from inference.kv.block_manager import BlockManager
from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.sequence import Sequence

_C_HOT = SchedClass.HOT  # (an enum member read off its class is slow)


class Preemption:
    """Who gives up its blocks this step (see the module docstring). ``victims``: the running
    sequences in key order, least urgent last; ``lent``: the running sequences that borrow
    the hot block reserve; ``give_back``: called with each victim before its blocks are freed.
    ``gone`` and ``preempted`` are the step's victims (a set, and in order); ``borrowed`` the
    waiting prompts admitted into the reserve this step (``lend``)."""

    def __init__(self, victims: list[Sequence], key: Callable[[Sequence], SortKey],
                 kv: BlockManager, lent: frozenset[str],
                 give_back: Callable[[Sequence], None]) -> None:
        self.victims, self.key, self.kv, self.lent = victims, key, kv, lent
        self.give_back = give_back
        self.preempted: list[Sequence] = []
        self.gone: set[str] = set()
        self.borrowed: list[str] = []

    def lend(self, seq_id: str) -> None:
        """A waiting prompt admitted into the hot block reserve: hot takes it back first."""
        self.borrowed.append(seq_id)

    def below(self, key: SortKey) -> bool:
        """Preempt the least urgent running sequence ranked after ``key``; False if none.
        Hot work takes the hot block reserve back from its borrowers first."""
        if key.cls is _C_HOT and (self.lent or self.borrowed) and self._reclaim():
            return True
        victims = self.victims
        while victims:
            victim = victims[-1]
            if victim.seq_id in self.gone:
                victims.pop()
                continue
            if self.key(victim) <= key:
                return False
            victims.pop()
            self.preempt(victim)
            return True
        return False

    def _reclaim(self) -> bool:
        """Preempt the least urgent running borrower of the hot block reserve, if any."""
        lent, new, victims = self.lent, self.borrowed, self.victims
        for i in range(len(victims) - 1, -1, -1):
            victim = victims[i]
            sid = victim.seq_id
            if (sid not in self.gone and (sid in lent or sid in new)
                    and self.key(victim).cls is not _C_HOT):
                del victims[i]
                self.preempt(victim)
                return True
        return False

    def preempt(self, seq: Sequence) -> None:
        """Hand ``seq`` back to the fill (while it still holds its blocks: the tallies count
        them), then free its blocks."""
        self.give_back(seq)
        self.kv.free(seq)
        self.gone.add(seq.seq_id)
        self.preempted.append(seq)

    def still_lent(self, running: Iterable[Sequence]) -> frozenset[str]:
        """Borrowers of the hot block reserve that still run, and this step's new ones."""
        lent = self.lent
        if lent:
            ids = {q.seq_id for q in running}
            lent = frozenset(i for i in lent if i in ids and i not in self.gone)
        return lent.union(self.borrowed) if self.borrowed else lent
