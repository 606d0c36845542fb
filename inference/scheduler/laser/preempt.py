"""Preemption within one step of the ``laser`` fill: the least urgent running sequence
ranked after the work that needs room goes first, and hot work first takes the hot block
reserve back from the sequences that borrow it. ``Preemption`` owns the step's tallies a
preemption gives back (the chunks taken, tokens, blocks, seats); ``StepFill`` builds on it."""

from __future__ import annotations

from inference.scheduler.laser.fillview import Chunk, FillView
from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.scheduler.plan import ScheduledSeq
from inference.sequence import Sequence


class Preemption:
    """The step's tallies and its preemption (see the module docstring). ``victims``: the
    running sequences in key order, least urgent last (set by the fill); ``items``: the
    chunks taken, with their class; ``gone``: the sequences preempted this step;
    ``borrowed``: non-hot prompts admitted into the hot block reserve this step."""

    def __init__(self, view: FillView) -> None:
        self.v = view
        self.victims: list[Sequence] = []
        self.items: dict[str, tuple[Chunk, SchedClass]] = {}
        self.preempted: list[Sequence] = []
        self.gone: set[str] = set()
        self.borrowed: list[str] = []
        self.n_running = len(view.running)
        self.used = 0
        self.prompt = 0  # of ``used``: tokens in prompt chunks (the rest decode rows)
        self.used_by_class = [0, 0, 0, 0]
        self.hot_blocks = 0
        self._spent: set[SchedClass] = set()  # classes whose allowance is used up
        self._attn = getattr(view.cost, "prefill_attn_s", None)
        self.attn_s = 0.0  # attention seconds of the prefill chunks taken so far

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

    def _computed_blocks(self, seq: Sequence) -> int:
        """Blocks ``seq`` holds beyond the cached prefix it found at admission: what the
        hot reserve sizes itself by (a later turn finds its prefix in the cache again)."""
        return len(seq.block_ids) - seq.num_cached_tokens // self.v.kv.block_size

    def _chunk_attn(self, item: ScheduledSeq) -> float:
        if self._attn is None or item.num_tokens == 1:
            return 0.0
        return self._attn(item.start, item.num_tokens)
