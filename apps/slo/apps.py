from __future__ import annotations

from django.apps import AppConfig


class SloConfig(AppConfig):
    name = "apps.slo"
    label = "slo"
    verbose_name = "SLO contracts and fulfilment"

    def ready(self) -> None:
        from apps.slo import reporting

        reporting.install()
