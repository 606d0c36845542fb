"""The ``laser`` policy's scheduling classes and the sort key it orders sequences by.

Every sequence ranks into one ``SchedClass`` (smaller first); within a class the ``SortKey``
orders it: every tenant's in-contract work before any excess, then triage's late hot requests
after the on-time ones, then ``when`` (what that is depends on the class), and the sequence id
last, so that keys are unique and sort on themselves alone.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class SchedClass(IntEnum):
    """Ranks, most urgent first. ``HOT``: hot, and any request aged past its tier's bound;
    ``PROMOTED``: cold whose deadline slack ran out (served as warm, ahead of it); ``WARM``:
    warm and demoted hot; ``COLD``: cold by least slack."""

    HOT = 0
    PROMOTED = 1
    WARM = 2
    COLD = 3


CLASSES = tuple(SchedClass)


class SortKey(NamedTuple):
    """Smaller first. ``excess``: 1 for traffic above its tenant's contract; ``late``: 1 for a
    hot request triage serves late and for warm or cold work aged into class ``HOT`` (class
    ``HOT`` only: both after hot's on-time work); ``when``: the TTFT deadline in class
    ``HOT``, the cold deadline slack in seconds in ``PROMOTED`` and ``COLD``, the prompt's
    length in ``WARM`` (``WarmOrder``)."""

    cls: SchedClass
    excess: int
    late: int
    when: float
    seq_id: str
