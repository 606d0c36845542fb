"""Components of the serving process, started in order and stopped in reverse.

In embedded mode one process holds the ASGI server, the engine and a Celery worker thread.
Apps register their component from ``AppConfig.ready()`` when ``settings.LASER_EMBEDDED`` is
true; ``manage.py serve`` starts them before accepting traffic and stops them after draining::

    from apps.core.lifecycle import register_component
    register_component("engine", start=engine.start, stop=engine.stop, ready=engine.is_ready)

``/ready`` answers 200 only while every component reports ready and the process is not draining
(SIGTERM sets draining, so load balancers and the gateway stop sending new work).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    start: Callable[[], None]
    stop: Callable[[], None]
    ready: Callable[[], bool] | None = None
    reason: Callable[[], str | None] | None = None  # why it is not ready, when it can say


class Lifecycle:
    """A registry of components plus the process-wide draining flag."""

    def __init__(self) -> None:
        self._components: list[Component] = []
        self._started: list[Component] = []
        self._lock = threading.Lock()
        self._draining = threading.Event()

    def register(
        self,
        name: str,
        start: Callable[[], None],
        stop: Callable[[], None],
        ready: Callable[[], bool] | None = None,
        reason: Callable[[], str | None] | None = None,
    ) -> Component:
        with self._lock:
            if any(c.name == name for c in self._components):
                raise ValueError(f"component {name!r} is already registered")
            component = Component(name, start, stop, ready, reason)
            self._components.append(component)
            return component

    @property
    def components(self) -> tuple[Component, ...]:
        return tuple(self._components)

    @property
    def started(self) -> tuple[Component, ...]:
        return tuple(self._started)

    def start_all(self) -> None:
        """Start every component in registration order. If one fails, the ones already started
        are stopped (in reverse) and the error is re-raised: never half a process."""
        for component in self._components:
            if component in self._started:
                continue
            logger.info("starting component %s", component.name)
            try:
                component.start()
            except BaseException:
                logger.exception("component %s failed to start", component.name)
                self.stop_all()
                raise
            self._started.append(component)

    def stop_all(self) -> list[tuple[str, BaseException]]:
        """Stop started components in reverse order; a failing stop does not skip the others.
        Returns the (name, error) pairs of stops that raised."""
        errors: list[tuple[str, BaseException]] = []
        while self._started:
            component = self._started.pop()
            logger.info("stopping component %s", component.name)
            try:
                component.stop()
            except Exception as exc:  # keep stopping the rest
                logger.exception("component %s failed to stop", component.name)
                errors.append((component.name, exc))
        return errors

    def begin_drain(self) -> None:
        self._draining.set()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def not_ready(self) -> list[str]:
        """Names of the reasons the process is not ready; empty when ready."""
        reasons = ["draining"] if self.draining else []
        for component in self._components:
            if component not in self._started:
                reasons.append(f"{component.name} (not started)")
            elif component.ready is not None and not _safe_ready(component):
                why = component.reason() if component.reason is not None else None
                reasons.append(f"{component.name} ({why})" if why else component.name)
        return reasons

    def reset(self) -> None:
        """Forget everything (tests only)."""
        self.stop_all()
        self._components.clear()
        self._draining.clear()


def _safe_ready(component: Component) -> bool:
    try:
        return bool(component.ready())
    except Exception:
        logger.exception("readiness check of %s raised", component.name)
        return False


lifecycle = Lifecycle()


def register_component(
    name: str,
    start: Callable[[], None],
    stop: Callable[[], None],
    ready: Callable[[], bool] | None = None,
    reason: Callable[[], str | None] | None = None,
) -> Component:
    """Register a component of the embedded process (call from ``AppConfig.ready()``)."""
    return lifecycle.register(name, start, stop, ready, reason)


def is_draining() -> bool:
    return lifecycle.draining
