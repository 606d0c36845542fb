"""Engine component of the embedded process: started before traffic, stopped after draining.

``manage.py serve`` sets ``LASER_EMBEDDED``; then ``/ready`` includes the engine's readiness
(the model loaded and the step loop running, or, in remote mode, at least one live worker).
"""

from __future__ import annotations

from django.conf import settings


def _start() -> None:
    from apps.gateway.engine_client import get_engine_client

    get_engine_client(start=True)


def _stop() -> None:
    from apps.gateway.engine_client import stop_engine_client

    stop_engine_client()


def _ready() -> bool:
    from apps.gateway.engine_client import get_engine_client

    return get_engine_client(start=False).ready


def _reason() -> str | None:
    """Why the engine is not ready, when it says (a failed step loop waiting to restart)."""
    from apps.gateway.engine_client import get_engine_client

    return get_engine_client(start=False).not_ready_reason


def install() -> None:
    """Register the engine with ``apps.core.lifecycle`` (embedded serving process only)."""
    if not getattr(settings, "LASER_EMBEDDED", False):
        return
    from apps.core.lifecycle import register_component

    register_component("engine", start=_start, stop=_stop, ready=_ready, reason=_reason)
