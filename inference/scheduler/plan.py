"""The scheduler's decisions, as values: the engine executes a plan, the simulator replays it."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.kv.block_manager import BlockCopy
from inference.request import TierChange


@dataclass(frozen=True, slots=True)
class ScheduledSeq:
    """Compute tokens ``start .. start + num_tokens`` of a sequence this step.

    ``sample`` is True when the chunk ends at the sequence's last known token, so the step
    yields its next token.
    """

    seq_id: str
    start: int
    num_tokens: int
    sample: bool


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One step. Layer pause (only a policy that asks for it sets these): ``pause_until``,
    when not None, lets the executor stop this plan's forward between two layers once that
    wall time has passed or an urgent request arrived, hold its sequences and resume it after
    later steps; ``finish_paused`` asks it to complete a paused forward now (urgent work needs
    the blocks it holds)."""

    scheduled: tuple[ScheduledSeq, ...] = ()
    block_copies: tuple[BlockCopy, ...] = ()
    preempted: tuple[str, ...] = ()
    tier_changes: tuple[tuple[str, TierChange], ...] = ()
    refused: tuple[tuple[str, str], ...] = ()  # (seq id, reason) dropped by the scheduler
    num_batched_tokens: int = 0
    pause_until: float | None = None
    finish_paused: bool = False

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    @property
    def num_prompt_tokens(self) -> int:
        """Tokens in prompt chunks (items of more than one token; the rest are decode rows,
        and a step without such chunks runs as a decode-only step)."""
        return sum(i.num_tokens for i in self.scheduled if i.num_tokens > 1)


@dataclass(slots=True)
class StepResult:
    """What ``Scheduler.update`` folds back: sequences that finished this step."""

    finished: list = field(default_factory=list)
