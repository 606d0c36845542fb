"""What the ``laser`` policy remembers between steps, as plain values.

One ``LaserState`` holds it all, grouped by tier; the policy's methods read and update it, the
step fill only reads it (through ``FillView``). The layer pause keeps its own
(``pause.LayerPause``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from inference.sequence import Sequence


@dataclass(slots=True)
class LaserState:
    # ---- hot ------------------------------------------------------------------------------
    hot_late: set[str] = field(default_factory=set)  # seq ids triage serves after the rest
    demoted: set[str] = field(default_factory=set)  # request ids moved to warm by pressure
    hot_admitted: int = 0
    triage_demotions: int = 0
    num_demotions: int = 0
    overload_demotions: int = 0  # late hot requests served as warm (any contract)
    hot_seen: tuple[float, float] | None = None  # last hot admission: time, TBT target
    hot_refused: bool = False  # a hot request was refused since the last step
    hot_min_slack: float = math.inf  # least hot slack (fraction of target) in the last step
    hot_step_tokens: int = 0  # hot's token allowance in the last step with hot work
    # (warm's bound, seq id, seq) of the sequences that asked for hot; popped into
    # ``hot_due`` once the bound may have passed (``HotTriage._refuse_overdue``)
    hot_watch: list[tuple[float, str, Sequence]] = field(default_factory=list)
    hot_due: dict[str, Sequence] = field(default_factory=dict)
    # ---- warm and cold --------------------------------------------------------------------
    promoted: set[str] = field(default_factory=set)  # cold seq ids promoted to warm
    aged: set[str] = field(default_factory=set)  # waiting seq ids past their tier's bound
    cold_slack: dict[str, float] = field(default_factory=dict)  # seq id -> seconds
    cold_need: float = 0.0  # prefill tokens per step cold needs for its deadlines
    num_promotions: int = 0
    refreshed: float = -math.inf  # time of the last cold slack refresh
    new_cold: list[Sequence] = field(default_factory=list)  # admitted since that refresh
    # ---- the machine ----------------------------------------------------------------------
    last_tokens: int = 1  # tokens of the last step (the speeds' typical step)
    context: int = 0  # context tokens the last step read
    other_load: float = 0.0  # EWMA: fraction of the token budget hot and warm used
    contention: float = 1.0  # CPU contention factor the engine measured (1: none)

    def forget(self, seq: Sequence) -> None:
        """A finished sequence leaves every per-sequence mark."""
        self.hot_late.discard(seq.seq_id)
        self.hot_due.pop(seq.seq_id, None)
        self.promoted.discard(seq.seq_id)
        self.aged.discard(seq.seq_id)
        self.cold_slack.pop(seq.seq_id, None)
