"""The batches app: its embedded worker, and its live job view handed to the SLO dashboard."""

from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class BatchesConfig(AppConfig):
    name = "apps.batches"
    label = "batches"
    verbose_name = "Batches (cold tier)"

    def ready(self) -> None:
        from apps.batches.selectors import batches_for_dashboard
        from apps.slo import dashboard_data

        dashboard_data.job_source(lambda tenant: batches_for_dashboard(tenant=tenant))
        # The embedded process (`manage.py serve`) runs a Celery worker thread beside the ASGI
        # server; a plain web front end or a `celery worker` process does not.
        if settings.LASER_EMBEDDED and settings.LASER_BATCH_EMBEDDED_WORKER:
            from apps.batches import worker
            from apps.core.lifecycle import register_component

            embedded = worker.EmbeddedWorker()
            register_component("batch-worker", start=embedded.start, stop=embedded.stop,
                               ready=embedded.is_ready)
