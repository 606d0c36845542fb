"""The core app (health, readiness, the lifecycle)."""

from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"
    verbose_name = "Laser core"
