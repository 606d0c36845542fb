"""Periodic SLO tasks: materialise closed windows (and raise breach alerts), prune records.

Thin and idempotent: both can run twice, or on two workers at once, without double counting
or double alerting (unique constraints on aggregates and alerts).
"""

from __future__ import annotations

from celery import shared_task

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


BEAT_SCHEDULE = {
    "slo-materialise": {"task": "slo.materialise", "schedule": 60.0},
    "slo-prune": {"task": "slo.prune", "schedule": 3600.0},
}
