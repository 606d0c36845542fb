"""Admin: platform staff see every batch and file; a tenant's admins see their own only."""

from __future__ import annotations

from django.contrib import admin

from apps.batches.models import Batch, BatchFile
from apps.tenants.admin_mixins import TenantScopedAdmin


@admin.register(Batch)
class BatchAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = ("uid", "tenant", "status", "endpoint", "created_at", "deadline_at",
                    "finished_at")
    list_filter = ("status", "endpoint")
    search_fields = ("uid", "input_file_uid")
    readonly_fields = [f.name for f in Batch._meta.fields]

    def has_add_permission(self, request, *args) -> bool:
        return False  # batches come from the API


@admin.register(BatchFile)
class BatchFileAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = ("uid", "tenant", "filename", "purpose", "bytes", "created_at", "expires_at")
    list_filter = ("purpose",)
    search_fields = ("uid", "filename")
    readonly_fields = ("uid", "tenant", "filename", "purpose", "bytes", "created_at",
                       "expires_at")

    def has_add_permission(self, request, *args) -> bool:
        return False
