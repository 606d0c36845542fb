from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class SloConfig(AppConfig):
    name = "apps.slo"
    label = "slo"
    verbose_name = "SLO contracts and fulfilment"

    def ready(self) -> None:
        from apps.slo import reporting, signals, tasks

        reporting.install()
        signals.install()
        try:
            from laser_platform.celery import app

            for name, entry in tasks.BEAT_SCHEDULE.items():
                app.conf.beat_schedule.setdefault(name, entry)
        except ImportError:  # pragma: no cover - celery is a hard dependency
            pass
        if getattr(settings, "LASER_EMBEDDED", False):
            from apps.core.lifecycle import register_component
            from apps.slo.background import housekeeper

            register_component("slo-housekeeping", start=housekeeper.start,
                               stop=housekeeper.stop)
