"""``TenantScopedAdmin``: a ModelAdmin mixin that confines tenant admins to their own tenant.

Who sees what (DESIGN.md, "Who edits what"):
- superusers and staff without a membership are platform staff: everything, subject to the
  usual Django model permissions;
- staff whose membership role is ``admin`` see and edit only rows of their tenant, without
  needing model permissions (the role is the grant);
- any other member (or a tenant admin without ``is_staff``) gets no admin access to the model.

A bulk action the user may not run (e.g. ``delete_selected`` without delete permission) is
refused with 403.

Set ``tenant_field`` to the lookup path from the model to its Tenant (``"tenant"`` or e.g.
``"contract__tenant"``). ``tenant_fk_filters`` limits other foreign-key choices:
``{"created_by": "membership__tenant"}`` means "users whose membership__tenant is mine".
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from apps.tenants.models import Membership, Tenant

_SCOPE_CACHE = "_laser_admin_scope"
_PLATFORM = "platform"
_NONE = "none"


def admin_scope(request: HttpRequest) -> Tenant | str:
    """``"platform"``, ``"none"`` or the tenant a request's admin user is confined to."""
    cached = getattr(request, _SCOPE_CACHE, None)
    if cached is not None:
        return cached
    user = request.user
    membership = (
        Membership.objects.select_related("tenant").filter(user_id=user.pk).first()
        if user.is_authenticated
        else None
    )
    if user.is_superuser or (user.is_staff and membership is None):
        scope: Tenant | str = _PLATFORM
    elif user.is_staff and membership.role == Membership.Role.ADMIN:
        scope = membership.tenant
    else:
        scope = _NONE
    setattr(request, _SCOPE_CACHE, scope)
    return scope


class TenantScopedAdmin:
    """Mix into a ``ModelAdmin`` (before it in the bases)."""

    tenant_field: str = "tenant"
    tenant_fk_filters: dict[str, str] = {}

    # --- scope helpers -------------------------------------------------------------------

    def scoped_tenant(self, request: HttpRequest) -> Tenant | None:
        """The tenant the user is confined to, or ``None`` for platform staff."""
        scope = admin_scope(request)
        if scope == _NONE:
            raise PermissionDenied
        return None if scope == _PLATFORM else scope

    def tenant_of(self, obj: Model) -> Tenant | None:
        value: Any = obj
        for part in self.tenant_field.split("__"):
            value = getattr(value, part, None)
            if value is None:
                return None
        return value

    def _role_allows(self, request: HttpRequest, obj: Model | None) -> bool | None:
        """True/False for tenant admins and outsiders; ``None`` to defer to Django perms."""
        scope = admin_scope(request)
        if scope == _PLATFORM:
            return None
        if scope == _NONE:
            return False
        return obj is None or self.tenant_of(obj) == scope

    # --- ModelAdmin overrides ------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        scope = admin_scope(request)
        if scope == _PLATFORM:
            return queryset
        if scope == _NONE:
            return queryset.none()
        return queryset.filter(**{self.tenant_field: scope})

    def has_module_permission(self, request: HttpRequest) -> bool:
        allowed = self._role_allows(request, None)
        return super().has_module_permission(request) if allowed is None else allowed

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        allowed = self._role_allows(request, obj)
        return super().has_view_permission(request, obj) if allowed is None else allowed

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        allowed = self._role_allows(request, None)
        return super().has_add_permission(request, *args) if allowed is None else allowed

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        allowed = self._role_allows(request, obj)
        return super().has_change_permission(request, obj) if allowed is None else allowed

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        allowed = self._role_allows(request, obj)
        return super().has_delete_permission(request, obj) if allowed is None else allowed

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        tenant = self.scoped_tenant(request)
        if tenant is not None:
            if db_field.related_model is Tenant:
                kwargs["queryset"] = Tenant.objects.filter(pk=tenant.pk)
                kwargs["initial"] = tenant.pk
            elif db_field.name in self.tenant_fk_filters:
                lookup = self.tenant_fk_filters[db_field.name]
                kwargs["queryset"] = db_field.related_model._default_manager.filter(
                    **{lookup: tenant}
                )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def enforce_tenant(self, request: HttpRequest, obj: Model) -> None:
        """Pin ``obj`` to the tenant admin's tenant; never trust a posted tenant."""
        tenant = self.scoped_tenant(request)
        if tenant is None:
            return
        if "__" not in self.tenant_field:
            setattr(obj, self.tenant_field, tenant)
        elif self.tenant_of(obj) != tenant:
            raise PermissionDenied

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        self.enforce_tenant(request, obj)
        super().save_model(request, obj, form, change)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # Django answers a bulk action the user may not run with "No action selected" and a
        # redirect; say plainly that it is refused.
        action = request.POST.get("action") if request.method == "POST" else None
        if action and action not in self.get_actions(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)
