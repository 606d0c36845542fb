"""The Celery app. Configuration comes from Django settings under the ``CELERY_`` namespace
(``laser_platform/settings/celery.py``); tasks are discovered in each app's ``tasks`` module."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "laser_platform.settings")

app = Celery("laser")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
