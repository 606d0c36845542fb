"""Breach alerts: a term missed over a window sends a webhook (optional, per tenant) and an
email through Django's mail backend, at most once per term and window.

"At most once" is the unique constraint on ``BreachAlert``: whoever creates the row delivers;
a re-run, or a second worker racing on the same window, finds the row and sends nothing.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction

from apps.slo.models import AlertSettings, BreachAlert
from apps.tenants.models import Membership, Tenant

logger = logging.getLogger(__name__)


def alert_windows() -> set[str]:
    return set(getattr(settings, "LASER_SLO_ALERT_WINDOWS", ["hour", "day"]))


def raise_breaches(rows: Iterable[dict]) -> list[BreachAlert]:
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
                transaction.on_commit(lambda pk=alert.pk: deliver(pk))
    return created


def _payload(alert: BreachAlert, tenant: Tenant) -> dict:
    return {
        "type": "slo.breach", "tenant": tenant.slug, "tier": alert.tier, "term": alert.term,
        "window": alert.window, "window_start": alert.window_start.isoformat(),
        "target": alert.target, "actual": alert.actual,
    }


def _post_webhook(url: str, payload: dict) -> str:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "laser-slo"},
    )
    timeout = getattr(settings, "LASER_SLO_WEBHOOK_TIMEOUT_S", 5.0)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return f"{response.status}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"failed: {exc}"[:64]


def _recipients(tenant: Tenant, config: AlertSettings | None) -> list[str]:
    if config is not None and config.emails.strip():
        return [e.strip() for e in config.emails.split(",") if e.strip()]
    admins = Membership.objects.filter(tenant=tenant, role=Membership.Role.ADMIN)
    return [m.user.email for m in admins.select_related("user") if m.user.email]


def deliver(alert_id: int) -> None:
    """Send one alert's webhook and email; failures are recorded on the row, not retried."""
    alert = BreachAlert.objects.select_related("tenant").filter(pk=alert_id).first()
    if alert is None:
        return
    tenant = alert.tenant
    config = AlertSettings.objects.filter(tenant=tenant).first()
    if config is not None and not config.enabled:
        return
    payload = _payload(alert, tenant)
    if config is not None and config.webhook_url:
        alert.webhook_status = _post_webhook(config.webhook_url, payload)
    recipients = _recipients(tenant, config)
    if recipients:
        subject = (f"[Laser] {tenant.name}: {alert.tier} {alert.term} missed "
                   f"({alert.window} from {alert.window_start:%Y-%m-%d %H:%M} UTC)")
        body = "\n".join(f"{k}: {v}" for k, v in payload.items())
        sender = getattr(settings, "LASER_SLO_ALERT_FROM", "laser@localhost")
        try:
            send_mail(subject, body, sender, recipients)
            alert.emailed = True
        except Exception:  # a broken mail server must not stop the aggregation
            logger.exception("SLO alert email failed for %s", alert)
    alert.save(update_fields=["webhook_status", "emailed"])
