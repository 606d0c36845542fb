"""Sustained hot pressure: when to demote demotable hot sessions to warm, and when to bring
them back. The tracker only decides *when*; ``pick_demotions`` decides *whom*."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Literal

from inference.sequence import Sequence

Action = Literal["demote", "restore"] | None


class PressureTracker:
    """Pressure must hold for ``window`` seconds to demote; calm for ``restore`` to restore.

    After each demotion the clock restarts, so demotions come at most one window apart.
    """

    def __init__(self, window: float, restore: float) -> None:
        self.window, self.restore = window, restore
        self._since: float | None = None  # start of the current pressured stretch
        self._calm_since: float | None = None

    def update(self, now: float, pressured: bool, have_demoted: bool) -> Action:
        if pressured:
            self._calm_since = None
            if self._since is None:
                self._since = now
            if now - self._since >= self.window:
                self._since = now
                return "demote"
            return None
        self._since = None
        if self._calm_since is None:
            self._calm_since = now
        if have_demoted and now - self._calm_since >= self.restore:
            self._calm_since = now
            return "restore"
        return None


def _not_in_contract(seq: Sequence) -> int:
    return int(not seq.in_contract)


def pick_demotions(hot: Iterable[Sequence], fraction: float, *,
                   excess: Callable[[Sequence], int] = _not_in_contract) -> list[str]:
    """Request ids to demote: traffic above its tenant's contract first (``excess``, the
    policy's ``Contract.excess``; such traffic may be
    demoted whatever the contract says), then demotable ones; lowest priority weight first,
    then the newest.

    Takes ``fraction`` of the hot requests (at least one when any is a candidate).
    """
    by_request: dict[str, Sequence] = {}
    for seq in hot:
        by_request.setdefault(seq.request_id, seq)
    candidates = [s for s in by_request.values() if s.targets.demotable or excess(s)]
    if not candidates:
        return []
    count = max(1, math.floor(fraction * len(by_request)))
    candidates.sort(key=lambda s: (not excess(s), s.targets.priority_weight, -s.arrival_time,
                                   s.request_id))
    return [s.request_id for s in candidates[:count]]
