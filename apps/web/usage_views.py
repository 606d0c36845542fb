"""The usage page: the tenant's tokens and requests per day and tier, per key and per user,
against its contracts' and plan's limits (``apps.slo.usage_report``), with a CSV export."""

from __future__ import annotations

import datetime as dt

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.core import tiers
from apps.slo import csv_export
from apps.slo.usage_report import COLUMNS, max_days, usage_report, usage_rows
from apps.web.access import tenant_page

CSV_COLUMNS = ("day", "tier", "key_prefix", "key_name", "user", *COLUMNS)


def _days(request: HttpRequest) -> int:
    raw = request.GET.get("days", "7")
    return min(int(raw), max_days()) if raw.isdigit() and int(raw) > 0 else 7


@never_cache
@require_GET
@tenant_page
def usage(request: HttpRequest) -> HttpResponse:
    days = _days(request)
    report = usage_report(tenant=request.tenant, days=days)
    chart = {"labels": [d.isoformat() for d in report.days], "tiers": tiers.NAMES,
             "by_day": report.by_day}
    return render(request, "web/usage.html", {
        "section": "usage", "report": report, "chart": chart, "days": days,
        "day_choices": [d for d in (1, 7, 30) if d <= max_days()] or [max_days()],
        "max_days": max_days()})


@never_cache
@require_GET
@tenant_page
def usage_csv(request: HttpRequest) -> HttpResponse:
    days = _days(request)
    today = timezone.now().astimezone(dt.UTC).date()
    since = dt.datetime.combine(today - dt.timedelta(days=days - 1), dt.time(), tzinfo=dt.UTC)
    rows = usage_rows(request.tenant, since, since + dt.timedelta(days=days))
    table = (CSV_COLUMNS, [[row[c] for c in CSV_COLUMNS] for row in rows])
    return csv_export.response(f"usage-{request.tenant.slug}-{today.isoformat()}.csv", table)
