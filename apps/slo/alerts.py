"""Breach alerts: a term missed over a window sends a webhook (optional, per tenant) and an
email through Django's mail backend, at most once per term and window.

"At most once" is the unique constraint on ``BreachAlert``: whoever creates the row enqueues
its delivery; a re-run, or a second worker racing on the same window, finds the row and sends
nothing. Delivery is a Celery task (``tasks.deliver_alert_task``) enqueued after commit: the
email once, the webhook through ``webhooks.post`` with a timeout and bounded retries.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import current_app
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction

from apps.slo import webhooks
from apps.slo.fulfilment import WindowRow
from apps.slo.models import AlertSettings, BreachAlert
from apps.tenants.models import Membership, Tenant

logger = logging.getLogger(__name__)


def alert_windows() -> set[str]:
    return set(getattr(settings, "LASER_SLO_ALERT_WINDOWS", ["hour", "day"]))


def raise_breaches(rows: Iterable[WindowRow]) -> list[BreachAlert]:
    """Create (and deliver after commit) an alert for each missed term of final ``rows``."""
    created: list[BreachAlert] = []
    windows = alert_windows()
    for row in rows:
        if not row.get("final") or row["window"] not in windows:
            continue
        for term, verdict in row["terms"].items():
            if verdict.get("kept") is not False:
                continue
            alert, new = BreachAlert.objects.get_or_create(
                tenant_id=row["tenant_id"], tier=row["tier"], window=row["window"],
                window_start=row["start"], term=term,
                defaults={"target": verdict.get("target"), "actual": verdict.get("actual")},
            )
            if new:
                created.append(alert)
                transaction.on_commit(lambda pk=alert.pk: _enqueue(pk))
    return created


def _payload(alert: BreachAlert, tenant: Tenant) -> dict:
    return {
        "type": "slo.breach", "tenant": tenant.slug, "tier": alert.tier, "term": alert.term,
        "window": alert.window, "window_start": alert.window_start.isoformat(),
        "target": alert.target, "actual": alert.actual,
    }


def _enqueue(alert_id: int) -> None:
    try:  # by the task's name: the task module imports this one
        current_app.signature("slo.deliver_alert", args=(alert_id,)).delay()
    except Exception:  # a broker outage must not fail the aggregation that raised the alert
        logger.exception("could not enqueue delivery of SLO alert %s", alert_id)
        BreachAlert.objects.filter(pk=alert_id).update(webhook_status="failed: not enqueued")


def _recipients(tenant: Tenant, config: AlertSettings | None) -> list[str]:
    if config is not None and config.emails.strip():
        return [e.strip() for e in config.emails.split(",") if e.strip()]
    admins = Membership.objects.filter(tenant=tenant, role=Membership.Role.ADMIN)
    return [m.user.email for m in admins.select_related("user") if m.user.email]


def _email(alert: BreachAlert, config: AlertSettings | None, payload: dict) -> None:
    tenant = alert.tenant
    recipients = _recipients(tenant, config)
    if alert.emailed or not recipients:
        return
    subject = (f"[Laser] {tenant.name}: {alert.tier} {alert.term} missed "
               f"({alert.window} from {alert.window_start:%Y-%m-%d %H:%M} UTC)")
    body = "\n".join(f"{k}: {v}" for k, v in payload.items())
    sender = getattr(settings, "LASER_SLO_ALERT_FROM", "laser@localhost")
    try:
        send_mail(subject, body, sender, recipients)
    except Exception:  # a broken mail server must not stop the webhook
        logger.exception("SLO alert email failed for %s", alert)
        return
    alert.emailed = True
    BreachAlert.objects.filter(pk=alert.pk).update(emailed=True)


def deliver(alert_id: int, *, attempt: int = 0, retries_left: int = 0) -> bool:
    """Send one alert's email (once) and webhook; True when the webhook should be retried.

    The webhook's outcome goes to ``webhook_status`` (what the tenant reads): ``delivered:
    HTTP nnn``, ``failed: HTTP nnn`` / ``failed: <fixed reason>``, or ``retrying (...)``
    while attempts remain.
    """
    alert = BreachAlert.objects.select_related("tenant").filter(pk=alert_id).first()
    if alert is None:
        return False
    config = AlertSettings.objects.filter(tenant=alert.tenant).first()
    if config is not None and not config.enabled:
        return False
    payload = _payload(alert, alert.tenant)
    _email(alert, config, payload)
    if config is None or not config.webhook_url or alert.webhook_status.startswith("delivered"):
        return False
    result = webhooks.post(config.webhook_url, payload)
    retry = result.retry and retries_left > 0
    status = f"retrying after attempt {attempt + 1} ({result.status})" if retry else result.status
    BreachAlert.objects.filter(pk=alert.pk).update(webhook_status=status[:64])
    return retry
