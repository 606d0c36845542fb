"""What a finished request (``RequestReport``) or a batch's status change (``BatchReport``)
tells the SLO books; ``reporting`` buffers them, ``writer`` stores them."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from apps.core.tiers import TIERS, Tier
from apps.slo.models import Outcome

OUTCOMES = frozenset(Outcome.values)

Timestamp = float | dt.datetime | None


@dataclass(slots=True)
class RequestReport:
    """Everything the platform keeps about one finished request.

    Times are ``time.time()`` floats (or aware datetimes); durations are seconds. ``outcome`` is
    one of ``ok``, ``interrupted``, ``rejected_429``, ``rejected_503``, ``rejected_400``,
    ``error``, ``cancelled``, ``expired``. A request runs as an API key (``api_key_id``) or as a
    signed-in user (``user_id``: web chat, a batch started in the web app). ``deadline`` (cold
    lines) and ``queue_s`` (arrival to first schedule) are optional extras.
    """

    request_id: str
    tenant_id: int | str
    tier_asked: str
    outcome: str
    arrival: Timestamp
    finished_at: Timestamp
    api_key_id: int | None = None
    user_id: int | None = None  # the signed-in user it ran as (then there is no key)
    contract_version_id: int | None = None
    tier_served: str | None = None
    demoted: bool = False
    in_contract: bool = True  # False: admitted as excess (above the contract's rates)
    endpoint: str = ""
    streamed: bool = False
    constraint: str = ""  # json_object, json_schema or tool_calls: its output was held to it
    first_token_at: Timestamp = None
    ttft_s: float | None = None
    tbt_p50_s: float | None = None
    tbt_p99_s: float | None = None
    tbt_max_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    replica: str = ""
    batch_id: str | None = None
    error_code: str = ""
    deadline: Timestamp = None
    queue_s: float | None = None

    def __post_init__(self) -> None:
        # Fail in the caller's tests, not silently in the writer thread.
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}; one of {sorted(OUTCOMES)}")
        if self.tier_asked not in TIERS or (self.tier_served or Tier.HOT) not in TIERS:
            raise ValueError(f"unknown tier {self.tier_asked!r}/{self.tier_served!r}")
        if self.tier_served is None:
            self.tier_served = self.tier_asked
        if self.ttft_s is None and self.first_token_at is not None and self.arrival is not None:
            self.ttft_s = max(0.0, _epoch(self.first_token_at) - _epoch(self.arrival))


@dataclass(slots=True)
class BatchReport:
    """A cold job (one batch) as the batches app sees it; report on every status change.

    The latest report per ``batch_id`` wins. ``finished_at`` is None until the batch is done.
    """

    batch_id: str
    tenant_id: int | str
    created_at: Timestamp
    deadline: Timestamp
    status: str
    total: int
    completed: int = 0
    failed: int = 0
    finished_at: Timestamp = None
    contract_version_id: int | None = None


def _epoch(value: float | dt.datetime) -> float:
    return value.timestamp() if isinstance(value, dt.datetime) else float(value)


def to_datetime(value: Timestamp) -> dt.datetime | None:
    """A report timestamp as an aware UTC datetime."""
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromtimestamp(float(value), tz=dt.UTC)
