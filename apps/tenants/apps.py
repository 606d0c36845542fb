"""The tenants app."""

from __future__ import annotations

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    label = "tenants"
    verbose_name = "Tenants and API keys"
