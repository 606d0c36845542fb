"""The scheduler interface and the mechanics every policy shares.

A policy decides *order* (who runs first, who is preempted first) and *budgets*; the base class
owns the queues, KV allocation, preemption by recompute, forking of ``n > 1`` choices and the
folding back of sampled tokens. The same object runs inside the engine and the simulator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping

from inference.errors import EngineOverloaded
from inference.kv.block_manager import BlockCopy, BlockManager
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.plan import ScheduledSeq, StepPlan, StepResult
from inference.sequence import Sequence, SequenceStatus


class Scheduler(ABC):
    name: str = "base"

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager) -> None:
        self.config = config
        self.kv = block_manager
        self.seqs: dict[str, Sequence] = {}
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self._unforked: dict[str, list[Sequence]] = {}  # parent seq id -> children
        self.num_preemptions = 0
        # Layer-level pause (see ``hold``): the number of decoder layers of a forward that the
        # executor can stop between (the engine sets it); 0, as in the simulator, which runs
        # whole steps, turns pausing off.
        self.layer_pause = 0
        self.held: list[Sequence] = []
        self._free_on_release: list[Sequence] = []
        # set by ``schedule`` when urgent work could not get KV blocks because held sequences
        # keep theirs: the executor should complete the paused forward now
        self.release_wanted = False

    # ---- requests in and out -------------------------------------------------------------
    def add(self, seqs: list[Sequence], now: float) -> None:
        """Queue a request's sequences, or raise ``AdmissionRefused`` with a reason."""
        self.admit(seqs, now)
        for seq in seqs:
            self.seqs[seq.seq_id] = seq
            if seq.parent_id is None:
                self.waiting.append(seq)
            else:
                self._unforked.setdefault(seq.parent_id, []).append(seq)

    def admit(self, seqs: list[Sequence], now: float) -> None:
        """Admission control; the default only bounds the queue."""
        if len(self.waiting) >= self.config.max_waiting:
            raise EngineOverloaded("the engine's queue is full", tier=seqs[0].tier,
                                   retry_after_s=1.0)

    def abort(self, request_id: str) -> list[Sequence]:
        """Drop every sequence of a request and free its blocks; returns the ones dropped."""
        dropped = [s for s in self.seqs.values() if s.request_id == request_id]
        for seq in dropped:
            self._finish(seq, SequenceStatus.FINISHED_ABORTED)
        return dropped

    def finish(self, seq_id: str, status: SequenceStatus) -> None:
        """Finish a sequence for a reason found outside the scheduler (e.g. a stop string)."""
        seq = self.seqs.get(seq_id)
        if seq is not None:
            self._finish(seq, status)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.held)

    def observe_step(self, num_tokens: int, seconds: float) -> None:
        """The engine reports each measured step; policies that estimate step time learn."""

    def reserved_idle_blocks(self) -> int:
        """Free KV blocks this policy keeps from some tier (fragmentation accounting)."""
        return 0

    # ---- layer-level pause ----------------------------------------------------------------
    def may_pause(self, plan: StepPlan) -> bool:
        """Whether the executor may stop ``plan``'s forward between layers for other work.
        No by default: only a policy that knows what is worth the pause says yes."""
        return False

    def pause_due_at(self) -> float:
        """Wall time at which a pausable forward should stop between layers even if no new
        urgent request arrived (e.g. a hot stream's next token falls due); inf for never."""
        return float("inf")

    def hold(self, seq_ids: Iterable[str]) -> None:
        """Take the sequences of a paused forward out of ``running``: no plan schedules or
        preempts them until ``release``. They keep their blocks, which the paused forward
        has partly written; a held sequence that finishes (abort) frees its blocks only at
        ``release``, so no other sequence gets them while the forward may still write."""
        ids = set(seq_ids)
        self.held = [s for s in self.running if s.seq_id in ids]
        self.running = [s for s in self.running if s.seq_id not in ids]

    def release(self) -> None:
        """The paused forward completed (or was dropped): held sequences run again."""
        self.running = self.held + self.running
        self.held = []
        for seq in self._free_on_release:
            self.kv.free(seq)
        self._free_on_release = []

    # ---- a step --------------------------------------------------------------------------
    @abstractmethod
    def schedule(self, now: float) -> StepPlan:
        """Decide this step's batch."""

    def update(self, plan: StepPlan, sampled: Mapping[str, int], now: float) -> StepResult:
        """Fold a step's results back: advance computed tokens, append samples, finish."""
        result = StepResult()
        for item in plan.scheduled:
            seq = self.seqs.get(item.seq_id)
            if seq is None or seq.is_finished or seq.status != SequenceStatus.RUNNING:
                continue
            seq.num_computed_tokens += item.num_tokens
            self.kv.cache_computed_blocks(seq)
            if not item.sample:
                continue
            token = sampled[item.seq_id]
            seq.output_token_ids.append(token)
            if seq.first_token_time is None:
                seq.first_token_time = now
            seq.last_token_time = now
            self._fork_children(seq)
            status = self._stop_status(seq, token)
            if status is not None:
                self._finish(seq, status)
                result.finished.append(seq)
        return result

    # ---- mechanics policies use ----------------------------------------------------------
    def try_schedule(self, seq: Sequence, max_tokens: int) -> tuple[ScheduledSeq,
                                                                    list[BlockCopy]] | None:
        """Reserve KV for up to ``max_tokens`` of ``seq``'s remaining tokens, or None."""
        if not seq.block_ids and seq.num_computed_tokens == 0:
            self.kv.match_prefix(seq)
        remaining = seq.num_tokens - seq.num_computed_tokens
        n = min(remaining, max_tokens, self.config.long_prefill_chunk if remaining > 1 else 1)
        if n <= 0:
            return None
        copies = self.kv.allocate_slots(seq, n)
        if copies is None:
            return None
        start = seq.num_computed_tokens
        return ScheduledSeq(seq.seq_id, start, n, start + n == seq.num_tokens), copies

    def release_unscheduled(self, seq: Sequence) -> None:
        """Undo ``match_prefix`` for a waiting sequence that could not be scheduled after all."""
        if seq.status == SequenceStatus.WAITING or seq.status == SequenceStatus.PREEMPTED:
            self.kv.free(seq)
            seq.num_computed_tokens = seq.num_cached_tokens = 0

    def preempt(self, seq: Sequence) -> None:
        """Preempt by recompute: free the blocks; the sequence keeps its output and waits."""
        self.kv.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.PREEMPTED
        seq.num_preemptions += 1
        self.num_preemptions += 1
        if seq in self.running:
            self.running.remove(seq)
        self.waiting.insert(0, seq)

    def start_running(self, seq: Sequence, now: float) -> None:
        self.waiting.remove(seq)
        self.running.append(seq)
        seq.status = SequenceStatus.RUNNING
        if seq.first_scheduled_time is None:
            seq.first_scheduled_time = now

    @staticmethod
    def make_plan(items: Iterable[tuple[ScheduledSeq, list[BlockCopy]]],
                  preempted: Iterable[str] = (), **extra) -> StepPlan:
        items = list(items)
        return StepPlan(
            scheduled=tuple(s for s, _ in items),
            block_copies=tuple(c for _, cs in items for c in cs),
            preempted=tuple(preempted),
            num_batched_tokens=sum(s.num_tokens for s, _ in items),
            **extra,
        )

    # ---- internals -----------------------------------------------------------------------
    def _stop_status(self, seq: Sequence, token: int) -> SequenceStatus | None:
        if token in seq.eos_token_ids:
            return SequenceStatus.FINISHED_STOPPED
        if seq.num_output_tokens >= seq.max_tokens or seq.num_tokens >= self.config.max_model_len:
            return SequenceStatus.FINISHED_LENGTH
        return None

    def _fork_children(self, parent: Sequence) -> None:
        children = self._unforked.pop(parent.seq_id, None)
        for child in children or ():
            if child.is_finished:
                continue
            self.kv.fork(parent, child)
            # The child recomputes the last prompt token to get logits of its own.
            child.num_computed_tokens = parent.num_prompt_tokens - 1
            child.status = SequenceStatus.RUNNING
            child.first_scheduled_time = parent.first_scheduled_time
            self.running.append(child)

    def _finish(self, seq: Sequence, status: SequenceStatus) -> None:
        if seq.is_finished:
            return
        seq.status = status
        if seq in self.held:
            self.held.remove(seq)
            self._free_on_release.append(seq)
        else:
            self.kv.free(seq)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.seqs.pop(seq.seq_id, None)
        for child in self._unforked.pop(seq.seq_id, ()):
            # A parent that ends before its prompt is computed takes its children with it;
            # one that ends after has already forked them.
            self._finish(child, status)
