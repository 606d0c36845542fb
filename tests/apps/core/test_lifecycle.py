"""The component registry: start in order, stop in reverse, roll back a failed start."""

from __future__ import annotations

import pytest

from apps.core.lifecycle import Lifecycle


def _recording(
    lifecycle: Lifecycle,
    log: list[str],
    name: str,
    *,
    fail_start: bool = False,
    fail_stop: bool = False,
    ready: bool | None = None,
) -> None:
    def start() -> None:
        if fail_start:
            raise RuntimeError(f"{name} cannot start")
        log.append(f"start {name}")

    def stop() -> None:
        log.append(f"stop {name}")
        if fail_stop:
            raise RuntimeError(f"{name} cannot stop")

    lifecycle.register(name, start, stop, None if ready is None else (lambda: ready))


def test_start_in_order_and_stop_in_reverse() -> None:
    lifecycle, log = Lifecycle(), []
    for name in ("engine", "worker", "metrics"):
        _recording(lifecycle, log, name)
    lifecycle.start_all()
    assert [c.name for c in lifecycle.started] == ["engine", "worker", "metrics"]
    assert lifecycle.stop_all() == []
    assert log == [
        "start engine",
        "start worker",
        "start metrics",
        "stop metrics",
        "stop worker",
        "stop engine",
    ]
    assert lifecycle.started == ()


def test_failed_start_stops_what_already_started() -> None:
    lifecycle, log = Lifecycle(), []
    _recording(lifecycle, log, "engine")
    _recording(lifecycle, log, "worker", fail_start=True)
    _recording(lifecycle, log, "metrics")
    with pytest.raises(RuntimeError, match="worker cannot start"):
        lifecycle.start_all()
    assert log == ["start engine", "stop engine"]


def test_a_failing_stop_does_not_skip_the_rest() -> None:
    lifecycle, log = Lifecycle(), []
    _recording(lifecycle, log, "engine")
    _recording(lifecycle, log, "worker", fail_stop=True)
    lifecycle.start_all()
    errors = lifecycle.stop_all()
    assert [name for name, _ in errors] == ["worker"]
    assert log == ["start engine", "start worker", "stop worker", "stop engine"]


def test_duplicate_names_are_refused() -> None:
    lifecycle = Lifecycle()
    lifecycle.register("engine", lambda: None, lambda: None)
    with pytest.raises(ValueError, match="already registered"):
        lifecycle.register("engine", lambda: None, lambda: None)


def test_readiness_follows_components_and_draining() -> None:
    lifecycle, log = Lifecycle(), []
    _recording(lifecycle, log, "engine", ready=True)
    _recording(lifecycle, log, "worker", ready=False)
    assert lifecycle.not_ready() == ["engine (not started)", "worker (not started)"]
    lifecycle.start_all()
    assert lifecycle.not_ready() == ["worker"]
    lifecycle.begin_drain()
    assert lifecycle.not_ready() == ["draining", "worker"]
