"""Admin for plans (platform staff only: plain Django model permissions, which tenant admins
do not hold). It lives with the contracts because a plan's default contracts are checked by the
contract rules: a plan whose defaults the platform cannot honour, or that break the plan's own
bounds, is refused here rather than when the next tenant is created."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from apps.slo.models import ContractTerms
from apps.slo.validation import check_bounds, validate_terms
from apps.tenants.models import Plan, PlanTier
from apps.tenants.plans import BOUND_FIELDS, TierBounds


class PlanTierForm(forms.ModelForm):
    class Meta:
        model = PlanTier
        fields = "__all__"

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        overrides, tier = data.get("default_terms"), data.get("tier")
        if overrides is None or not tier:
            return data
        if not isinstance(overrides, dict):
            raise forms.ValidationError({"default_terms": "A JSON object of contract terms."})
        unknown = sorted(set(overrides) - set(ContractTerms.TERM_FIELDS))
        if unknown:
            raise forms.ValidationError({"default_terms": f"Unknown contract terms: {unknown}."})
        terms = {**ContractTerms.defaults(), **overrides}
        bounds = TierBounds(plan=str(data.get("plan") or "this plan"), tier=tier,
                            **{name: data.get(name) for name in BOUND_FIELDS})
        errors = {**validate_terms(terms), **check_bounds(terms, bounds)}
        if errors:
            raise forms.ValidationError(
                {"default_terms": [f"{name}: {message}" for name, message in errors.items()]}
            )
        return data




class PlanTierInline(admin.StackedInline):
    model = PlanTier
    form = PlanTierForm
    extra = 0
    max_num = 3


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = ("name", "is_default", "burst_factor", "max_inflight_per_key",
                    "max_inflight_per_tenant", "max_sockets_per_key", "max_storage_bytes")
    inlines = [PlanTierInline]
    fieldsets = (
        (None, {"fields": ("name", "is_default")}),
        ("Tenant-wide limits (enforced on the request path)", {"fields": (
            "burst_factor", "max_inflight_per_key", "max_inflight_per_tenant",
            "max_sockets_per_key", "max_storage_bytes")}),
    )
