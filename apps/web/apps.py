"""The web app."""

from __future__ import annotations

from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "apps.web"
    label = "web"
    verbose_name = "Tenant web app"
