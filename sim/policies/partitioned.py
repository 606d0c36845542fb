"""Static per-tier pools (what operators do today): the baseline the tier policy must beat.

Each tier owns a fixed share of the KV blocks and of the per-step token budget, sized from
its peak demand; a tier never uses another's idle share. Within a tier: first come, first
served, preempting the tier's own latest arrival when its pool runs out.
"""

from __future__ import annotations

from collections.abc import Mapping

from inference.errors import AdmissionRefused
from inference.kv.block_manager import BlockCopy, BlockManager
from inference.request import Tier
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.fcfs import FCFSScheduler
from inference.scheduler.plan import ScheduledSeq, StepPlan
from inference.sequence import Sequence

DEFAULT_SHARES = {Tier.HOT: 0.5, Tier.WARM: 0.3, Tier.COLD: 0.2}


class PartitionedScheduler(FCFSScheduler):
    name = "partitioned"

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager,
                 shares: Mapping[Tier, float] | None = None) -> None:
        super().__init__(config, block_manager)
        self._kept_out = False  # this step, a partition kept out work the pool had room for
        shares = dict(shares or DEFAULT_SHARES)
        total = sum(shares.get(t, 0.0) for t in Tier)
        if total <= 0 or any(v < 0 for v in shares.values()):
            raise ValueError("partition shares must be non-negative and not all zero")
        frac = {t: shares.get(t, 0.0) / total for t in Tier}
        self.block_caps = {t: int(frac[t] * block_manager.num_blocks) for t in Tier}
        self.token_caps = {t: max(1, int(frac[t] * config.max_num_batched_tokens)) for t in Tier}
        self.seq_caps = {t: max(1, round(frac[t] * config.max_num_seqs)) for t in Tier}

    def admit(self, seqs: list[Sequence], now: float) -> None:
        super().admit(seqs, now)
        head = seqs[0]
        need = -(-(head.num_prompt_tokens + head.max_tokens) // self.kv.block_size) * len(seqs)
        if need > self.block_caps[head.tier]:
            raise AdmissionRefused(
                f"request needs {need} KV blocks; the {head.tier} pool holds "
                f"{self.block_caps[head.tier]}", tier=head.tier, retry_after_s=None)

    def sort_key(self, seq: Sequence) -> tuple:
        return (seq.tier.rank, seq.arrival_time, seq.seq_id)

    def reserved_idle_blocks(self) -> int:
        used = self._blocks_by_tier()
        return min(self.kv.num_free_blocks,
                   sum(max(0, self.block_caps[t] - used[t]) for t in Tier))

    def kept_out(self) -> bool:
        """A tier's partition (its blocks or its seats) kept out work the shared pool had
        room for, in the last step."""
        return self._kept_out

    def _blocks_by_tier(self) -> dict[Tier, int]:
        used = dict.fromkeys(Tier, 0)
        for seq in self.running:
            used[seq.tier] += len(seq.block_ids)
        return used

    def schedule(self, now: float) -> StepPlan:
        self._kept_out = False
        self.running.sort(key=self.sort_key)
        self.waiting.sort(key=self.sort_key)
        blocks = self._blocks_by_tier()
        items: list[tuple[ScheduledSeq, list[BlockCopy]]] = []
        preempted: list[str] = []
        for tier in Tier:
            budget = self.token_caps[tier]
            running = [s for s in self.running if s.tier is tier]
            budget = self._run_pool(tier, running, budget, blocks, items, preempted)
            if not any(self.seqs[p].tier is tier for p in preempted if p in self.seqs):
                self._admit_pool(tier, budget, blocks, items, now)
        return self.make_plan(items, preempted)

    def _fits(self, tier: Tier, seq: Sequence, n: int, blocks: dict) -> bool:
        need = self.kv.blocks_needed(seq, n)
        if blocks[tier] + need <= self.block_caps[tier]:
            return True
        self._kept_out |= need <= self.kv.num_free_blocks  # the shared pool had room
        return False

    def _schedule_in_pool(self, tier, seq, budget, blocks):
        n = min(budget, seq.num_tokens - seq.num_computed_tokens)
        if n <= 0 or not self._fits(tier, seq, min(n, self.config.long_prefill_chunk), blocks):
            return None
        before = len(seq.block_ids)
        got = self.try_schedule(seq, n)
        if got is not None:
            blocks[tier] += len(seq.block_ids) - before + len(got[1])
        return got

    def _run_pool(self, tier, queue, budget, blocks, items, preempted) -> int:
        while queue and budget > 0:
            seq = queue.pop(0)
            got = self._schedule_in_pool(tier, seq, budget, blocks)
            while got is None and queue:
                victim = queue.pop()
                blocks[tier] -= len(victim.block_ids)
                self.preempt(victim)
                preempted.append(victim.seq_id)
                got = self._schedule_in_pool(tier, seq, budget, blocks)
            if got is None:
                blocks[tier] -= len(seq.block_ids)
                self.preempt(seq)
                preempted.append(seq.seq_id)
                break
            items.append(got)
            budget -= got[0].num_tokens
        return budget

    def _admit_pool(self, tier, budget, blocks, items, now) -> None:
        count = sum(1 for s in self.running if s.tier is tier)
        for seq in [s for s in self.waiting if s.tier is tier]:
            if count >= self.seq_caps[tier]:
                self._kept_out |= self.kv.num_free_blocks > 0  # the pool's seats, not KV
                break
            if budget <= 0:
                break
            if not seq.block_ids and seq.num_computed_tokens == 0:
                self.kv.match_prefix(seq)
                blocks[tier] += len(seq.block_ids)
            got = self._schedule_in_pool(tier, seq, budget, blocks)
            if got is None:
                blocks[tier] -= len(seq.block_ids)
                self.release_unscheduled(seq)
                break
            self.start_running(seq, now)
            items.append(got)
            budget -= got[0].num_tokens
            count += 1
