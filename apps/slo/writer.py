"""Writes buffered reports to the database (called by ``reporting``'s writer thread)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from apps.slo.models import BatchRecord, ContractVersion, RequestRecord
from apps.slo.report_types import BatchReport, RequestReport, to_datetime
from apps.tenants.models import ApiKey, Tenant

logger = logging.getLogger(__name__)


def _record(report: RequestReport) -> RequestRecord:
    return RequestRecord(
        request_id=report.request_id[:128],
        tenant_id=int(report.tenant_id),
        api_key_id=report.api_key_id,
        user_id=report.user_id,
        contract_version_id=report.contract_version_id,
        tier_asked=report.tier_asked,
        tier_served=report.tier_served or report.tier_asked,
        demoted=report.demoted,
        in_contract=report.in_contract,
        endpoint=report.endpoint[:64],
        streamed=report.streamed,
        constraint=report.constraint[:16],
        arrival=to_datetime(report.arrival),
        first_token_at=to_datetime(report.first_token_at),
        finished_at=to_datetime(report.finished_at),
        deadline=to_datetime(report.deadline),
        ttft_s=report.ttft_s,
        queue_s=report.queue_s,
        tbt_p50_s=report.tbt_p50_s,
        tbt_p99_s=report.tbt_p99_s,
        tbt_max_s=report.tbt_max_s,
        prompt_tokens=max(0, int(report.prompt_tokens or 0)),
        completion_tokens=max(0, int(report.completion_tokens or 0)),
        outcome=report.outcome,
        replica=report.replica[:64],
        batch_id=report.batch_id,
        error_code=(report.error_code or "")[:64],
    )


def _existing(model, ids: set) -> set:
    ids.discard(None)
    return set(model.objects.filter(pk__in=ids).values_list("pk", flat=True)) if ids else set()


def _drop_dangling(records: list[RequestRecord]) -> list[RequestRecord]:
    """Drop records of unknown tenants and unlink unknown keys/users/versions.

    Foreign keys are checked only at commit (deferred), too late to tell which row was bad, so
    the references are checked up front: a tenant deleted meanwhile must not sink the batch.
    """
    tenants = _existing(Tenant, {r.tenant_id for r in records})
    keys = _existing(ApiKey, {r.api_key_id for r in records})
    users = _existing(get_user_model(), {r.user_id for r in records})
    versions = _existing(ContractVersion, {r.contract_version_id for r in records})
    kept = []
    for record in records:
        if record.tenant_id not in tenants:
            logger.warning("dropped SLO record %s: unknown tenant", record.request_id)
            continue
        if record.api_key_id not in keys:
            record.api_key_id = None
        if record.user_id not in users:
            record.user_id = None
        if record.contract_version_id not in versions:
            record.contract_version_id = None
        kept.append(record)
    return kept


def _insert_records(records: list[RequestRecord]) -> int:
    records = _drop_dangling(records) if records else records
    if not records:
        return 0
    try:
        with transaction.atomic():
            RequestRecord.objects.bulk_create(records)
        return len(records)
    except IntegrityError:
        pass
    # One bad row (e.g. a tenant deleted meanwhile) must not sink the whole batch.
    written = 0
    for record in records:
        try:
            with transaction.atomic():
                record.save(force_insert=True)
            written += 1
        except IntegrityError:
            logger.warning("dropped SLO record %s: integrity error", record.request_id)
    return written


def _upsert_batch(report: BatchReport) -> None:
    if not Tenant.objects.filter(pk=int(report.tenant_id)).exists():
        logger.warning("dropped SLO batch report %s: unknown tenant", report.batch_id)
        return
    defaults = {
        "tenant_id": int(report.tenant_id),
        "contract_version_id": report.contract_version_id,
        "created_at": to_datetime(report.created_at),
        "deadline": to_datetime(report.deadline),
        "finished_at": to_datetime(report.finished_at),
        "status": report.status[:32],
        "total": report.total,
        "completed": report.completed,
        "failed": report.failed,
    }
    try:
        with transaction.atomic():
            BatchRecord.objects.update_or_create(batch_id=report.batch_id, defaults=defaults)
    except IntegrityError:
        logger.warning("dropped SLO batch report %s: integrity error", report.batch_id)


def write_batch(items: Iterable[RequestReport | BatchReport]) -> int:
    """Persist ``items`` all or nothing; returns how many were written.

    One transaction, so a batch that fails part-way leaves nothing behind and the reporter may
    retry it (or split it to isolate a bad report) without writing a record twice. Prometheus
    metrics are observed after the commit, so a retried batch counts once.
    """
    items = list(items)
    requests = [item for item in items if isinstance(item, RequestReport)]
    with transaction.atomic():
        written = _insert_records([_record(report) for report in requests])
        for item in items:
            if isinstance(item, BatchReport):
                _upsert_batch(item)
                written += 1
    from apps.slo import metrics

    metrics.observe_reports(requests)
    return written
