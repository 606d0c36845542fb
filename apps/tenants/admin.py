"""Admin for tenants, members and API keys, scoped per tenant for tenant admins."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from apps.tenants.admin_mixins import TenantScopedAdmin, admin_scope
from apps.tenants.models import ApiKey, Membership, Tenant
from apps.tenants.services import api_key_issue, api_key_revoke, plan_ensure_default

_NEW_KEY_ATTR = "_laser_new_api_key"


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    """Platform staff manage tenants and their plans; a tenant admin may only look at their own.

    A tenant added here gets its plan's default contracts (``apps.slo.signals``)."""

    list_display = ("name", "slug", "plan", "is_active", "created_at")
    list_filter = ("is_active", "plan")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}

    def get_list_filter(self, request: HttpRequest) -> tuple[Any, ...]:
        # A tenant admin's "By plan" lists its own plan only, not every plan of the platform.
        if admin_scope(request) == "platform":
            return self.list_filter
        return ("is_active", ("plan", admin.RelatedOnlyFieldListFilter))

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        initial.setdefault("plan", plan_ensure_default().pk)
        return initial

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        scope = admin_scope(request)
        queryset = super().get_queryset(request)
        if scope == "platform":
            return queryset
        return queryset.filter(pk=scope.pk) if isinstance(scope, Tenant) else queryset.none()

    def _platform(self, request: HttpRequest) -> bool:
        return admin_scope(request) == "platform"

    def has_module_permission(self, request: HttpRequest) -> bool:
        if isinstance(admin_scope(request), Tenant):
            return True
        return self._platform(request) and super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        scope = admin_scope(request)
        if isinstance(scope, Tenant):
            return obj is None or obj.pk == scope.pk
        return self._platform(request) and super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._platform(request) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._platform(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._platform(request) and super().has_delete_permission(request, obj)


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("user__username", "user__email", "tenant__slug")
    tenant_fk_filters = {"user": "membership__tenant"}

    def get_list_filter(self, request: HttpRequest) -> tuple[str, ...]:
        # The tenant filter would list every tenant's name; only platform staff get it.
        base = tuple(super().get_list_filter(request))
        return base + ("tenant",) if admin_scope(request) == "platform" else base


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin, admin.ModelAdmin):
    """Creating a key shows its plaintext once on a dedicated page; the hash is never shown."""

    list_display = (
        "__str__",
        "tenant",
        "default_tier",
        "status",
        "created_at",
        "last_used_at",
        "expires_at",
    )
    list_filter = ("default_tier",)
    search_fields = ("name", "prefix")
    actions = ("revoke_selected",)
    tenant_fk_filters: dict[str, str] = {}
    readonly_fields = ("prefix", "status", "created_at", "created_by", "last_used_at", "revoked_at")

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        editable = ["tenant", "name", "default_tier", "expires_at"]
        return editable if obj is None else editable + list(self.readonly_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple:
        # The tenant of an existing key never changes: it would move its traffic and records.
        return ("tenant", *self.readonly_fields) if obj is not None else ()

    def get_list_filter(self, request: HttpRequest) -> tuple[str, ...]:
        base = tuple(super().get_list_filter(request))
        return base + ("tenant",) if admin_scope(request) == "platform" else base

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        self.enforce_tenant(request, obj)
        obj.created_by = request.user
        setattr(request, _NEW_KEY_ATTR, api_key_issue(api_key=obj))

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: Any = None):
        plaintext = getattr(request, _NEW_KEY_ATTR, None)
        if plaintext is None:
            return super().response_add(request, obj, post_url_continue)
        info = (self.opts.app_label, self.opts.model_name)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "API key created",
            "api_key": obj,
            "plaintext": plaintext,
            "change_url": reverse("admin:%s_%s_change" % info, args=[obj.pk]),
            "changelist_url": reverse("admin:%s_%s_changelist" % info),
        }
        response: HttpResponse = TemplateResponse(
            request, "admin/tenants/apikey/created.html", context
        )
        response["Cache-Control"] = "no-store"  # the page holds a secret
        return response

    @admin.action(description="Revoke selected API keys", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = 0
        for api_key in queryset.filter(revoked_at__isnull=True):
            api_key_revoke(api_key=api_key)
            count += 1
        self.message_user(request, f"Revoked {count} API key(s).", messages.SUCCESS)
