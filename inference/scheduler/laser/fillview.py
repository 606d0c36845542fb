"""What one step of the ``laser`` fill reads and what it decides: ``FillMode`` (which work
the step takes), ``FillView`` (the queues, keys, estimates and numbers the policy hands it) and
``FillResult`` (the decisions the policy applies). ``inference.scheduler.laser.fill`` runs it."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seqs
from dataclasses import dataclass
from enum import Enum, auto

from inference.kv.block_manager import BlockCopy, BlockManager
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.cost import CostEstimator
from inference.scheduler.laser.keys import SortKey
from inference.scheduler.laser.parts import FillRules
from inference.scheduler.laser.queue import WaitingIndex
from inference.scheduler.laser.slack import Speeds
from inference.scheduler.plan import ScheduledSeq
from inference.sequence import Sequence

Chunk = tuple[ScheduledSeq, list[BlockCopy]]


class FillMode(Enum):
    """Which work a step's fill takes: ``HOT`` only class 0 (hot and aged: while a paused
    forward holds the rest), ``ALL`` every class."""

    HOT = auto()
    ALL = auto()


@dataclass(frozen=True, slots=True)
class FillView:
    """What one step's fill reads (the queues are the policy's own lists: the fill only
    reads them). ``key`` is the policy's sort key (class first), ``queue`` the waiting
    sequences listed under it;
    ``pause_cap_s`` the longest step a fill may take when no hot stream decodes in it, so
    that it may pause soon (None: no cap);
    ``hold_tokens``/``hold_blocks`` the hot reserve, ``lent`` the sequences that borrow its
    blocks; ``has_held`` whether a paused forward holds sequences (and blocks)."""

    now: float
    running: Seqs[Sequence]
    waiting: Seqs[Sequence]
    key: Callable[[Sequence], SortKey]
    config: SchedulerConfig
    rules: FillRules
    cost: CostEstimator
    speeds: Speeds
    tbt_safety: float
    pause_cap_s: float | None
    hold_tokens: int
    hold_blocks: int
    lent: frozenset[str]
    cold_need: float
    has_held: bool
    kv: BlockManager
    try_schedule: Callable[[Sequence, int], Chunk | None]
    release_unscheduled: Callable[[Sequence], None]
    queue: WaitingIndex | None = None  # ``waiting`` by class in key order (None: built here)
    pausing: bool = False  # the executor may pause forwards: steps need not follow each other


@dataclass(frozen=True, slots=True)
class FillResult:
    """A step's decisions: ``items`` to run, ``started`` waiting sequences that now run,
    ``preempted`` running ones (their blocks already freed) to requeue, ``finish_paused``
    when class-0 work needs the paused forward's blocks, ``lent`` the running sequences that
    borrow the hot block reserve after the step; and what the policy learns from the step."""

    mode: FillMode
    items: tuple[Chunk, ...]
    started: tuple[Sequence, ...]
    preempted: tuple[Sequence, ...]
    finish_paused: bool
    lent: frozenset[str]
    used_by_class: tuple[int, ...]
    hot_blocks: int
    hot_min_slack: float
    hot_cap: int
    context: int
    estimate_s: float
