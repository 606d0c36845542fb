"""Admin for SLO contracts: staff see all, a tenant's admins edit only their tenant's.

Saving a contract goes through ``services.contract_save``, which freezes changed terms as a new
``ContractVersion``; the history is shown read-only below the form.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from apps.slo.models import AlertSettings, BreachAlert, ContractVersion, RequestRecord, SLOContract
from apps.slo.services import DEFAULT_TERMS, contract_save
from apps.tenants.admin_mixins import TenantScopedAdmin

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


@admin.register(SLOContract)
class SLOContractAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = ("tenant", "tier", "version", "ttft_p99_s", "tbt_p99_s", "warm_rate_tps",
                    "cold_deadline_s", "requests_per_min", "updated_at")
    list_filter = ("tier",)
    search_fields = ("tenant__name", "tenant__slug")
    inlines = [ContractVersionInline]
    fieldsets = (
        (None, {"fields": ("tenant", "tier")}),
        ("Hot: interactive chat", {"fields": _HOT}),
        ("Warm: analysis and agents", {"fields": _WARM}),
        ("Cold: batch jobs", {"fields": _COLD}),
        ("Limits (every tier)", {"fields": _LIMITS}),
    )

    @admin.display(description="version")
    def version(self, obj: SLOContract) -> str:
        return f"v{obj.current_version.number}" if obj.current_version_id else "–"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # A contract's tenant and tier are its identity: change terms, not what they apply to.
        return ("tenant", "tier") if obj is not None else ()

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        initial.update(DEFAULT_TERMS.get(initial.get("tier"), {}))
        return initial

    def save_model(self, request: HttpRequest, obj: SLOContract, form: Any, change: bool) -> None:
        self.enforce_tenant(request, obj)
        try:
            contract_save(contract=obj, created_by=request.user.get_username())
        except ValidationError as exc:  # the form's clean() already ran; this is a race
            form.add_error(None, exc)
            raise


@admin.register(AlertSettings)
class AlertSettingsAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = ("tenant", "enabled", "webhook_url", "emails")


@admin.register(BreachAlert)
class BreachAlertAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = ("window_start", "tenant", "tier", "window", "term", "target", "actual",
                    "webhook_status", "emailed")
    list_filter = ("tier", "window", "term")

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(RequestRecord)
class RequestRecordAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = ("finished_at", "request_id", "tenant", "tier_asked", "tier_served",
                    "outcome", "ttft_s", "tbt_p99_s", "prompt_tokens", "completion_tokens")
    list_filter = ("tier_asked", "outcome", "demoted")
    search_fields = ("request_id",)
    date_hierarchy = "finished_at"

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
