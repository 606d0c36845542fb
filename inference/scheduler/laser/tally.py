"""What one step of the ``laser`` fill has taken so far: ``StepTally``, the base of
``StepFill``. A chunk taken adds to it, a preempted sequence's chunk leaves it; the caps the
fill checks (tokens, step time) read it."""

from __future__ import annotations

from inference.scheduler.cost import CostEstimator
from inference.scheduler.laser.fillview import Chunk
from inference.scheduler.laser.keys import SchedClass
from inference.scheduler.plan import ScheduledSeq
from inference.sequence import Sequence

_C_HOT = SchedClass.HOT  # (an enum member read off its class is slow)


class StepTally:
    """``items``: the chunks taken, with their class; ``used``: their tokens (``prompt`` of
    them in prompt chunks, the rest decode rows), also ``used_by_class``; ``hot_blocks``: the
    blocks class ``HOT`` computes (what the hot reserve sizes itself by); ``attn_s``: the
    attention seconds of the prefill chunks, when the estimator prices it
    (``prefill_attn_s``)."""

    def __init__(self, cost: CostEstimator, block_size: int) -> None:
        self.cost, self.block_size = cost, block_size
        self.items: dict[str, tuple[Chunk, SchedClass]] = {}
        self.used = 0
        self.prompt = 0
        self.used_by_class = [0, 0, 0, 0]
        self.hot_blocks = 0
        self._attn = getattr(cost, "prefill_attn_s", None)
        self.attn_s = 0.0

    def _add(self, seq: Sequence, got: Chunk, cls: SchedClass) -> None:
        self.items[seq.seq_id] = (got, cls)
        n = got[0].num_tokens
        self.used += n
        if n > 1:
            self.prompt += n
        self.used_by_class[cls] += n
        self.attn_s += self._chunk_attn(got[0])
        if cls is _C_HOT:
            self.hot_blocks += self._computed_blocks(seq)

    def _drop(self, seq: Sequence) -> None:
        """``seq``'s chunk, if it has one, leaves the tallies (while ``seq`` still holds its
        blocks: ``hot_blocks`` counts them)."""
        entry = self.items.pop(seq.seq_id, None)
        if entry is None:
            return
        (item, _), cls = entry
        self.used -= item.num_tokens
        if item.num_tokens > 1:
            self.prompt -= item.num_tokens
        self.used_by_class[cls] -= item.num_tokens
        self.attn_s -= self._chunk_attn(item)
        if cls is _C_HOT:
            self.hot_blocks -= self._computed_blocks(seq)

    def _computed_blocks(self, seq: Sequence) -> int:
        """Blocks ``seq`` holds beyond the cached prefix it found at admission: what the
        hot reserve sizes itself by (a later turn finds its prefix in the cache again)."""
        return len(seq.block_ids) - seq.num_cached_tokens // self.block_size

    def _chunk_attn(self, item: ScheduledSeq) -> float:
        if self._attn is None or item.num_tokens == 1:
            return 0.0
        return self._attn(item.start, item.num_tokens)
