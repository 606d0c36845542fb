"""Laser's Django project package."""

from __future__ import annotations

import os

# before anything imports torch: see inference/__init__.py for why the engine's OpenMP threads
# sleep instead of spinning
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from laser_platform.celery import app as celery_app  # noqa: E402

__all__ = ["celery_app"]
