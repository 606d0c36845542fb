"""The SLO app: starts the report writer, the signals, the beat schedule and housekeeping."""

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
        from celery import current_app  # the project's app (laser_platform/celery.py)

        for name, entry in tasks.BEAT_SCHEDULE.items():
            current_app.conf.beat_schedule.setdefault(name, entry)
        if getattr(settings, "LASER_EMBEDDED", False):
            from apps.core.lifecycle import register_component
            from apps.slo.background import housekeeper

            register_component("slo-housekeeping", start=housekeeper.start,
                               stop=housekeeper.stop)
