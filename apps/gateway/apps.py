"""The gateway app: registers the engine component and the engine gauges on ``/metrics``."""

from __future__ import annotations

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "apps.gateway"
    label = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        from apps.gateway import engine_component, metrics

        engine_component.install()
        metrics.install()
