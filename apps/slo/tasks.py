"""Periodic SLO tasks: materialise closed windows (and raise breach alerts), prune records.

Thin and idempotent: both can run twice, or on two workers at once, without double counting
or double alerting (unique constraints on aggregates and alerts).
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from apps.slo import alerts, fulfilment, retention


def materialise_and_alert() -> int:
    rows = fulfilment.materialise()
    alerts.raise_breaches(rows)
    return len(rows)


@shared_task(name="slo.materialise", ignore_result=True)
def materialise_task() -> int:
    return materialise_and_alert()


@shared_task(name="slo.prune", ignore_result=True)
def prune_task() -> dict[str, int]:
    return retention.prune()


@shared_task(name="slo.deliver_alert", bind=True, ignore_result=True)
def deliver_alert_task(self, alert_id: int) -> None:
    """Deliver one breach alert; retry the webhook ``LASER_SLO_WEBHOOK_RETRIES`` times, with
    exponential backoff from ``LASER_SLO_WEBHOOK_BACKOFF_S``, on timeouts, connection errors,
    5xx and 429. Refused destinations, redirects and other 4xx are final."""
    limit = settings.LASER_SLO_WEBHOOK_RETRIES
    attempt = self.request.retries
    if alerts.deliver(alert_id, attempt=attempt, retries_left=limit - attempt):
        raise self.retry(countdown=settings.LASER_SLO_WEBHOOK_BACKOFF_S * 2**attempt,
                         max_retries=limit)


BEAT_SCHEDULE = {
    "slo-materialise": {"task": "slo.materialise", "schedule": 60.0},
    "slo-prune": {"task": "slo.prune", "schedule": 3600.0},
}
