"""Admin for SLO contracts and the SLO evidence: staff see all, a tenant's admins only theirs.

Saving a contract goes through ``services.contract_save``, which freezes changed terms as a new
``ContractVersion``; the history is shown read-only below the form. A tenant admin signs within
the plan's bounds; platform staff may sign anything.

Evidence (request records, usage, breach alerts, contract versions) is read-only for everyone
here; tenant admins never delete it nor a contract (whose versions it would cascade to). Platform
staff may delete with their Django permissions, and the admin logs each deletion (``LogEntry``).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from apps.slo import webhooks
from apps.slo.models import (
    AlertSettings,
    BreachAlert,
    ContractTerms,
    ContractVersion,
    RequestRecord,
    SLOContract,
    UsageDaily,
)
from apps.slo.services import contract_save, default_terms
from apps.tenants.admin_mixins import TenantScopedAdmin, admin_scope
from apps.tenants.models import Tenant
from apps.tenants.plans import BOUND_FIELDS, tier_bounds

_HOT = ("ttft_p99_s", "tbt_p99_s", "interruption_budget", "demotable", "demotion_budget",
        "priority_weight")
_WARM = ("warm_rate_tps", "warm_band", "warm_mean_ttft_s")
_COLD = ("cold_deadline_s", "cold_percentile")
_LIMITS = ("requests_per_min", "tokens_per_min", "daily_token_budget")


class ReadOnlyInlineMixin:
    """Visible to whoever may see the parent; never added to, edited or deleted."""

    can_delete = False
    extra = 0

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return True  # the parent admin has already decided who sees the parent

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ContractVersionInline(ReadOnlyInlineMixin, admin.TabularInline):
    model = ContractVersion
    verbose_name_plural = "History (read-only: requests point at the version in force)"
    fields = ("number", "created_at", "created_by", *_HOT, *_WARM, *_COLD, *_LIMITS)
    readonly_fields = fields
    ordering = ("-number",)


def _platform(request: HttpRequest) -> bool:
    return admin_scope(request) == "platform"


class ContractForm(forms.ModelForm):
    """Runs the model's validation with the plan's bounds, unless platform staff sign."""

    beyond_plan = False

    def clean(self) -> dict[str, Any]:
        self.instance.sign_beyond_plan = self.beyond_plan
        return super().clean()


class EvidenceAdmin(TenantScopedAdmin, admin.ModelAdmin):
    """Evidence: viewed, never added or edited; deleted by platform staff only (logged)."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _platform(request) and super().has_delete_permission(request, obj)


@admin.register(SLOContract)
class SLOContractAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = ("tenant", "tier", "version", "ttft_p99_s", "tbt_p99_s", "warm_rate_tps",
                    "cold_deadline_s", "requests_per_min", "updated_at")
    list_filter = ("tier",)
    search_fields = ("tenant__name", "tenant__slug")
    inlines = [ContractVersionInline]
    form = ContractForm
    readonly_fields = ("plan",)
    fieldsets = (
        (None, {"fields": ("tenant", "tier", "plan")}),
        ("Hot: interactive chat", {"fields": _HOT}),
        ("Warm: analysis and agents", {"fields": _WARM}),
        ("Cold: batch jobs", {"fields": _COLD}),
        ("Limits (every tier)", {"fields": _LIMITS}),
    )

    @admin.display(description="version")
    def version(self, obj: SLOContract) -> str:
        return f"v{obj.current_version.number}" if obj.current_version_id else "–"

    @admin.display(description="plan's bounds")
    def plan(self, obj: SLOContract | None) -> str:
        if obj is None or not obj.tenant_id:
            return "–"
        bounds = tier_bounds(obj.tenant_id, obj.tier)
        if bounds is None:
            return "no bounds"
        parts = [f"{name} {getattr(bounds, name):g}" for name in BOUND_FIELDS
                 if getattr(bounds, name) is not None]
        return f"{bounds.plan}: " + ", ".join(parts)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # A contract's tenant and tier are its identity: change terms, not what they apply to.
        return ("tenant", "tier", "plan") if obj is not None else ("plan",)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> type[forms.ModelForm]:
        form = super().get_form(request, obj, change=change, **kwargs)
        form.beyond_plan = _platform(request)  # a subclass per request: safe to set
        return form

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        tier = initial.get("tier")
        if tier:
            asked = str(initial.get("tenant") or "")
            tenant = self.scoped_tenant(request) or (
                Tenant.objects.filter(pk=int(asked)).first() if asked.isdigit() else None)
            initial.update(default_terms(tenant=tenant, tier=tier) if tenant is not None
                           else ContractTerms.defaults())
        return initial

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting a contract would cascade to its versions, the evidence: staff only.
        return _platform(request) and super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: SLOContract, form: Any, change: bool) -> None:
        self.enforce_tenant(request, obj)
        try:
            contract_save(contract=obj, created_by=request.user.get_username(),
                          beyond_plan=_platform(request))
        except ValidationError as exc:  # the form's clean() already ran; this is a race
            form.add_error(None, exc)
            raise


class AlertSettingsForm(forms.ModelForm):
    webhook_url = forms.URLField(required=False, assume_scheme="https",
                                 help_text="POSTed a JSON body per breach.")

    def clean_webhook_url(self) -> str:
        """Refuse at once what delivery would refuse anyway (checked again at each delivery:
        where a name points can change)."""
        url = self.cleaned_data.get("webhook_url") or ""
        if url:
            try:
                webhooks.resolve(url)
            except webhooks.Refused as refused:
                if refused.reason != webhooks.NOT_RESOLVED:
                    raise forms.ValidationError(f"This webhook cannot be used: {refused.reason}.")
        return url


@admin.register(AlertSettings)
class AlertSettingsAdmin(TenantScopedAdmin, admin.ModelAdmin):
    form = AlertSettingsForm
    list_display = ("tenant", "enabled", "webhook_url", "emails")


@admin.register(ContractVersion)
class ContractVersionAdmin(EvidenceAdmin):
    tenant_field = "contract__tenant"
    list_display = ("contract", "number", "created_at", "created_by", "ttft_p99_s", "tbt_p99_s",
                    "priority_weight", "requests_per_min", "daily_token_budget")
    list_filter = ("contract__tier",)


@admin.register(BreachAlert)
class BreachAlertAdmin(EvidenceAdmin):
    list_display = ("window_start", "tenant", "tier", "window", "term", "target", "actual",
                    "webhook_status", "emailed")
    list_filter = ("tier", "window", "term")


@admin.register(RequestRecord)
class RequestRecordAdmin(EvidenceAdmin):
    list_display = ("finished_at", "request_id", "tenant", "api_key", "user", "tier_asked",
                    "tier_served", "outcome", "ttft_s", "tbt_p99_s", "prompt_tokens",
                    "completion_tokens")
    list_filter = ("tier_asked", "outcome", "demoted", "in_contract")
    list_select_related = ("tenant", "api_key", "user")
    search_fields = ("request_id",)
    date_hierarchy = "finished_at"


@admin.register(UsageDaily)
class UsageDailyAdmin(EvidenceAdmin):
    list_display = ("day", "tenant", "key_prefix", "tier", "requests", "prompt_tokens",
                    "completion_tokens")
    list_filter = ("tier",)
    date_hierarchy = "day"


from apps.slo import admin_plans  # noqa: E402, F401  (registers the plan admin)
