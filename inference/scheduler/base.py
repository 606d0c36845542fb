"""The mechanics every policy shares (the interface is ``interface.SchedulingPolicy``).

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
        # request id -> its sequences in ``seqs`` order, while any of them is in ``seqs``
        self.by_request: dict[str, list[Sequence]] = {}
        self.num_preemptions = 0

    # ---- requests in and out -------------------------------------------------------------
    def add(self, seqs: list[Sequence], now: float) -> None:
        """Queue a request's sequences, or raise ``AdmissionRefused`` with a reason."""
        self.admit(seqs, now)
        for seq in seqs:
            self.seqs[seq.seq_id] = seq
            self.by_request.setdefault(seq.request_id, []).append(seq)
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
        dropped = [s for s in self.by_request.get(request_id, ()) if s.seq_id in self.seqs]
        for seq in dropped:
            self._finish(seq, SequenceStatus.FINISHED_ABORTED)
        return dropped

    def finish(self, seq_id: str, status: SequenceStatus) -> None:
        """Finish a sequence for a reason found outside the scheduler (e.g. a stop string)."""
        seq = self.seqs.get(seq_id)
        if seq is not None:
            self._finish(seq, status)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def in_flight(self) -> list[Sequence]:
        """Sequences that hold KV blocks for work in progress (a policy that pauses forwards
        adds the paused forward's)."""
        return self.running

    def observe_step(self, num_tokens: int, seconds: float, prompt_tokens: int = 0,
                     token_s: float | None = None) -> None:
        """The engine reports each measured step (``seconds``: its forward); policies that
        estimate step time learn. ``token_s``: the step from its plan to its sampled tokens
        (planning, the forward, sampling), what a stream waits between two tokens."""

    def observe_contention(self, factor: float) -> None:
        """The engine reports how many times longer its threads take than with the cores to
        themselves (``inference.engine.contention``); a policy that refuses on its estimate
        of the queue's wait prices it at the machine's own speed."""

    def reserved_idle_blocks(self) -> int:
        """Free KV blocks this policy keeps from some tier (fragmentation accounting)."""
        return 0

    def kept_out(self) -> bool:
        """Whether, in the last step, those blocks kept waiting work out that the shared
        pool had room for (the simulator's "KV idle while work waits")."""
        return False

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
        self.requeue_preempted(seq)

    def requeue_preempted(self, seq: Sequence) -> None:
        """The queue side of ``preempt``, for a sequence whose blocks are already freed."""
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

    def _free_blocks(self, seq: Sequence) -> None:
        """A finished sequence's blocks go back to the pool (``_finish``)."""
        self.kv.free(seq)

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
        self._free_blocks(seq)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.seqs.pop(seq.seq_id, None)
        mine = self.by_request.get(seq.request_id, ())
        if not any(s.seq_id in self.seqs for s in mine):
            self.by_request.pop(seq.request_id, None)
        for child in self._unforked.pop(seq.seq_id, ()):
            # A parent that ends before its prompt is computed takes its children with it;
            # one that ends after has already forked them.
            self._finish(child, status)
