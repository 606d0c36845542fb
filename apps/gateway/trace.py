"""One ``RequestReport`` per request that reached a tenant, whatever its outcome.

``Trace`` is created as soon as the API key resolved (before that there is no tenant to book
the request against) and ``finish`` is called exactly once, from a ``finally``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from apps.core.errors import APIError
from apps.gateway.collect import Completion

logger = logging.getLogger(__name__)

REPLICA = os.environ.get("LASER_REPLICA_ID") or f"{socket.gethostname()}:{os.getpid()}"

OK, INTERRUPTED, CANCELLED, ERROR = "ok", "interrupted", "cancelled", "error"


def outcome_for_error(exc: BaseException) -> str:
    """``rejected_4xx``/``rejected_503`` for refusals, ``error`` for our own faults."""
    if isinstance(exc, APIError):
        if exc.status == 429:
            return "rejected_429"
        if exc.status == 503:
            return "rejected_503"
        if exc.status < 500:
            return "rejected_400"
    return ERROR


def error_code(exc: BaseException) -> str:
    if isinstance(exc, APIError):
        return exc.code or exc.type
    return type(exc).__name__


@dataclass(slots=True)
class Trace:
    """What is known about a request so far; ``finish`` turns it into the SLO report."""

    request_id: str
    tenant_id: Any
    api_key_id: Any
    tier_asked: str
    endpoint: str
    arrival: float = field(default_factory=time.time)
    streamed: bool = False
    contract_version_id: int | None = None
    replica: str = REPLICA
    batch_id: str | None = None
    deadline: float | None = None
    user_id: int | None = None  # a signed-in user's turn (web chat, a web-app batch)
    in_contract: bool = True  # admitted within the contract's rates (False: excess)
    constraint: str = ""  # the kind of grammar its output was held to ("" = free text)
    done: bool = False

    def discard(self) -> None:
        """Report nothing (a batch line refused for now runs again later, as a new attempt)."""
        self.done = True

    def finish(self, outcome: str, result: Completion | None = None, *, code: str = "") -> None:
        """Report once; never raises (reporting must not turn a served request into a 500)."""
        if self.done:
            return
        self.done = True
        try:
            from apps.slo.services import RequestReport, report_request, tbt_stats

            p50 = p99 = tmax = None
            if result is not None:
                p50, p99, tmax = tbt_stats([c.token_times for c in result.choices
                                            if c.token_times] or [[]])
            tier_served = str(result.tier_served) if result is not None else self.tier_asked
            report_request(RequestReport(
                request_id=self.request_id, tenant_id=self.tenant_id,
                api_key_id=self.api_key_id, user_id=self.user_id,
                contract_version_id=self.contract_version_id,
                tier_asked=self.tier_asked, tier_served=tier_served,
                demoted=bool(result and result.demoted), in_contract=self.in_contract,
                endpoint=self.endpoint,
                streamed=self.streamed, constraint=self.constraint, arrival=self.arrival,
                first_token_at=result.first_token_at if result else None,
                finished_at=time.time(), ttft_s=result.ttft_s if result else None,
                tbt_p50_s=p50, tbt_p99_s=p99, tbt_max_s=tmax,
                prompt_tokens=result.prompt_tokens if result else 0,
                completion_tokens=result.completion_tokens if result else 0,
                outcome=outcome, replica=self.replica, batch_id=self.batch_id, error_code=code,
                deadline=self.deadline,
            ))
        except Exception:
            logger.exception("could not report request %s", self.request_id)
