"""What the batches app tells the SLO books: every finished line (``report_request``, tier cold,
with its batch id) and every batch state change (``report_batch``)."""

from __future__ import annotations

import logging

from apps.batches.models import Batch, BatchLine
from apps.core.tiers import Tier
from apps.slo.report_types import BatchReport, RequestReport
from apps.slo.reporting import report_batch, report_request

logger = logging.getLogger(__name__)


def report_line(batch: Batch, line: BatchLine, *, outcome: str, error_code: str = "",
                arrival: float | None = None, first_token_at: float | None = None,
                tbt: tuple[float | None, float | None, float | None] = (None, None, None),
                tier_served: str | None = None, demoted: bool = False) -> None:
    """Report one line that reached its final state (call once, after the write won)."""
    finished = line.finished_at.timestamp() if line.finished_at else None
    try:
        report_request(RequestReport(
            request_id=line.request_id, tenant_id=batch.tenant_id, tier_asked=Tier.COLD,
            outcome=outcome, arrival=arrival if arrival is not None else finished,
            finished_at=finished, api_key_id=batch.api_key_id, user_id=batch.created_by_id,
            contract_version_id=batch.contract_version_id, tier_served=tier_served,
            demoted=demoted, endpoint=batch.endpoint, streamed=False,
            first_token_at=first_token_at, tbt_p50_s=tbt[0], tbt_p99_s=tbt[1], tbt_max_s=tbt[2],
            prompt_tokens=line.prompt_tokens, completion_tokens=line.completion_tokens,
            batch_id=batch.uid, error_code=error_code, deadline=batch.deadline_at,
        ))
    except Exception:  # the books must never fail a batch
        logger.exception("could not report line %s", line.request_id)


def report_batch_state(batch: Batch, counts: dict[str, int] | None = None) -> None:
    """Report the batch's current status (the SLO app keeps the latest per batch)."""
    from apps.batches.selectors import request_counts

    counts = counts or request_counts(batch)
    try:
        report_batch(BatchReport(
            batch_id=batch.uid, tenant_id=batch.tenant_id, created_at=batch.created_at,
            deadline=batch.deadline_at, status=batch.status, total=counts["total"],
            completed=counts["completed"], failed=counts["failed"],
            finished_at=batch.finished_at, contract_version_id=batch.contract_version_id,
        ))
    except Exception:
        logger.exception("could not report batch %s", batch.uid)
