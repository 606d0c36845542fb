"""SLO API: contracts, fulfilment per window (JSON or CSV), usage per key/tier/day.

Authenticated by API key (scripts) or by session (the dashboard). A tenant sees only its own;
platform staff see all and may pass ``tenant=<slug>``. Everything is read-only except changing
a contract's terms (``PATCH /api/slo/contracts/<tier>``), which a tenant admin's session may do
within the plan's bounds (a new contract version, never an edit of history) and platform staff
may do for any tenant beyond them. Records, usage, alerts and versions have no write or delete
endpoint.
"""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.utils import timezone
from rest_framework import authentication, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import BadRequestError, NotFoundError, PermissionDeniedError
from apps.core.tiers import CHOICES, TIERS
from apps.slo import csv_export, fulfilment, usage, windows
from apps.slo.access import is_platform_staff, tenant_ids, tenant_scope
from apps.slo.models import ContractTerms, SLOContract
from apps.slo.selectors import contract_for, contracts_for_tenant
from apps.slo.services import contract_update
from apps.tenants.authentication import ApiKeyAuthentication
from apps.tenants.models import Tenant
from apps.tenants.selectors import user_is_tenant_admin

MAX_WINDOWS = 5000
DEFAULT_SPAN = {"minute": dt.timedelta(hours=1), "hour": dt.timedelta(days=1),
                "day": dt.timedelta(days=30)}


# Times outside these bounds are refused (400): spans and windows are added to them, and a
# datetime near year 1 or 9999 would overflow there (a 500).
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)
OUT_OF_RANGE = "must be between 1970-01-01 and 9000-01-01."


def _in_range(value: dt.datetime) -> dt.datetime:
    try:
        if EARLIEST <= value <= LATEST:
            return value
    except OverflowError:
        pass
    raise serializers.ValidationError(OUT_OF_RANGE)


class TimeField(serializers.Field):
    """An ISO 8601 datetime or date (UTC if naive), or Unix seconds, within the bounds above."""

    def to_internal_value(self, data: object) -> dt.datetime:
        text = str(data).strip()
        try:
            value = dt.datetime.fromtimestamp(float(text), tz=dt.UTC)
        except (OverflowError, OSError):  # inf, 1e300: a number, but no time
            raise serializers.ValidationError(OUT_OF_RANGE) from None
        except ValueError:
            try:
                value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise serializers.ValidationError(
                    "use an ISO 8601 time (2026-01-05T10:00:00Z), a date or Unix seconds."
                ) from None
        return _in_range(value if value.tzinfo else value.replace(tzinfo=dt.UTC))


class DayField(serializers.DateField):
    """A date within the bounds above."""

    def to_internal_value(self, value: object) -> dt.date:
        day = super().to_internal_value(value)
        _in_range(dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC))
        return day


class _SloApi(APIView):
    authentication_classes = [ApiKeyAuthentication, authentication.SessionAuthentication]

    def slugs(self, ids: set[int]) -> dict[int, str]:
        return dict(Tenant.objects.filter(pk__in=ids).values_list("pk", "slug"))


class ContractListApi(_SloApi):
    def get(self, request: Request) -> Response:
        scope = tenant_scope(request.user, request.query_params.get("tenant"))
        tenants = scope if scope is not None else list(Tenant.objects.all())
        data = []
        for tenant in tenants:
            for snap in contracts_for_tenant(tenant=tenant):
                data.append({"object": "slo.contract", "tenant": tenant.slug, **snap.as_dict()})
        return Response({"object": "list", "data": data})


class ContractUpdateApi(_SloApi):
    """``PATCH /api/slo/contracts/<tier>`` with some terms: a new version of the contract."""

    def patch(self, request: Request, tier: str) -> Response:
        if getattr(request.user, "api_key", None) is not None:
            raise PermissionDeniedError("Contracts are changed by a tenant admin or platform "
                                        "staff, not with an API key.")
        staff = is_platform_staff(request.user)
        if not staff and not user_is_tenant_admin(request.user):
            raise PermissionDeniedError("Only a tenant admin may change its contracts.")
        body = dict(request.data) if isinstance(request.data, dict) else {}
        requested = body.pop("tenant", None)
        scope = tenant_scope(request.user, str(requested) if requested else None)
        if scope is None:
            raise BadRequestError("Platform staff name the tenant: 'tenant': '<slug>'.",
                                  param="tenant")
        tenant = scope[0]
        contract = SLOContract.objects.filter(tenant=tenant, tier=tier).first()
        if contract is None:
            raise NotFoundError(f"No {tier!r} contract for tenant '{tenant.slug}'.",
                                param="tier")
        terms = body
        unknown = sorted(set(terms) - set(ContractTerms.TERM_FIELDS))
        if unknown:
            raise BadRequestError(f"Unknown contract terms: {unknown}.", param=unknown[0])
        try:
            contract_update(contract=contract, created_by=request.user.get_username(),
                            beyond_plan=staff, **terms)
        except (ValidationError, TypeError, ValueError) as exc:
            raise _bad_terms(exc) from None
        snap = contract_for(tenant=tenant, tier=tier)
        return Response({"object": "slo.contract", "tenant": tenant.slug, **snap.as_dict()})


def _bad_terms(exc: Exception) -> BadRequestError:
    if isinstance(exc, ValidationError) and hasattr(exc, "message_dict"):
        errors = exc.message_dict
        param = next(iter(errors))
        return BadRequestError(" ".join(m for ms in errors.values() for m in ms), param=param,
                               code="contract_out_of_bounds")
    return BadRequestError("Contract terms must be numbers (and 'demotable' a boolean).")


class FulfilmentApi(_SloApi):
    class FilterSerializer(serializers.Serializer):
        tier = serializers.ChoiceField(choices=CHOICES, required=False)
        window = serializers.ChoiceField(choices=list(windows.WINDOWS), default="hour")
        since = TimeField(required=False)
        until = TimeField(required=False)
        tenant = serializers.SlugField(required=False)

    def rows(self, request: Request) -> tuple[list[dict], dict]:
        query = self.FilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        scope = tenant_scope(request.user, q.get("tenant"))
        window, until = q["window"], q.get("until") or timezone.now()
        since = q.get("since") or until - DEFAULT_SPAN[window]
        if since >= until:
            raise BadRequestError("'since' must be before 'until'.", param="since")
        if (until - since) / windows.LENGTH[window] > MAX_WINDOWS:
            raise BadRequestError(f"At most {MAX_WINDOWS} {window} windows per request; "
                                  f"narrow 'since' or use a longer window.", param="since")
        tiers = [q["tier"]] if q.get("tier") else list(TIERS)
        rows = fulfilment.series(window, since, until, tenant_ids=tenant_ids(scope), tiers=tiers)
        slugs = self.slugs({r["tenant_id"] for r in rows})
        for row in rows:
            row["tenant"] = slugs.get(row.pop("tenant_id"), "")
        summary = {tier: fulfilment.attainment([r for r in rows if r["tier"] == tier], tier)
                   for tier in tiers}
        return rows, {"window": window, "since": since, "until": until, "summary": summary}

    def get(self, request: Request) -> Response:
        rows, meta = self.rows(request)
        return Response({"object": "list", **meta, "data": rows})


class FulfilmentCsvApi(FulfilmentApi):
    def get(self, request: Request) -> HttpResponse:
        rows, _ = self.rows(request)
        return csv_export.response("fulfilment.csv", csv_export.fulfilment_table(rows))


class UsageApi(_SloApi):
    class FilterSerializer(serializers.Serializer):
        since = DayField(required=False)
        until = DayField(required=False)
        tenant = serializers.SlugField(required=False)

    def rows(self, request: Request) -> list[dict]:
        query = self.FilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        scope = tenant_scope(request.user, q.get("tenant"))
        until = q.get("until") or timezone.now().date() + dt.timedelta(days=1)
        since = q.get("since") or until - dt.timedelta(days=30)
        if since >= until:
            raise BadRequestError("'since' must be before 'until'.", param="since")
        rows = usage.usage(since, until, tenant_ids=tenant_ids(scope))
        slugs = self.slugs({r["tenant_id"] for r in rows})
        for row in rows:
            row["tenant"] = slugs.get(row.pop("tenant_id"), "")
        return rows

    def get(self, request: Request) -> Response:
        return Response({"object": "list", "data": self.rows(request)})


class UsageCsvApi(UsageApi):
    def get(self, request: Request) -> HttpResponse:
        return csv_export.response("usage.csv", csv_export.usage_table(self.rows(request)))
