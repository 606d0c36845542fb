"""Settings entry point: ``LASER_ENV=production`` selects the production profile, anything
else (unset, ``development``) the base profile used for development and embedded mode."""

from __future__ import annotations

from laser_platform.settings._env import env

LASER_ENV: str = env("LASER_ENV", "development", choices=("development", "production"))

if LASER_ENV == "production":
    from laser_platform.settings.production import *  # noqa: F403
else:
    from laser_platform.settings.base import *  # noqa: F403
