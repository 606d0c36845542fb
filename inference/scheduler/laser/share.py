"""Sharing a step with hot streams: which of the other decodes fit under hot's TBT cap.

Every running sequence decodes one token a step, so a step carries every stream's row, and on
a slow machine (the CPU engine) the rows alone can take longer than the strictest hot TBT
target: an in-contract hot stream then misses its TBT because of everyone else's streams.
The in-contract hot decodes always run; the others (warm, demoted, cold, and hot traffic above
its tenant's contract) run as far as the step, priced by the engine's measured step cost
(rows to seconds), stays within the cap, the ones that waited longest since their last token
first, so they take turns and each advances less often instead of some not at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Seqs

from inference.request import Tier
from inference.scheduler.cost import CostEstimator
from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.sequence import Sequence

Keyed = tuple[SortKey, Sequence]
_C_HOT, _HOT = SchedClass.HOT, Tier.HOT  # (an enum member read off its class is slow)


def protected(key: SortKey, seq: Sequence) -> bool:
    """An in-contract hot decode (class ``HOT``, not aged into it): its TBT is what the cap
    keeps."""
    return key.cls is _C_HOT and not key.excess and seq.tier is _HOT


def decodes_within(decodes: Seqs[Keyed], cap_s: float, cost: CostEstimator) -> list[Keyed]:
    """The decodes to run (in their given order): every protected one, then the others,
    least recently served first, while the estimated step stays within ``cap_s``. All of them
    when they fit."""
    context = sum(q.num_computed_tokens for _, q in decodes)
    if cost.step_time(len(decodes), context) <= cap_s:
        return list(decodes)
    keep = [kq for kq in decodes if protected(*kq)]
    rows, context = len(keep), sum(q.num_computed_tokens for _, q in keep)
    others = sorted((kq for kq in decodes if not protected(*kq)),
                    key=lambda kq: (kq[1].last_token_time or -math.inf, kq[1].seq_id))
    chosen: set[str] = set()
    for _, q in others:
        if cost.step_time(rows + 1, context + q.num_computed_tokens) > cap_s:
            break
        rows += 1
        context += q.num_computed_tokens
        chosen.add(q.seq_id)
    return [kq for kq in decodes if protected(*kq) or kq[1].seq_id in chosen]
