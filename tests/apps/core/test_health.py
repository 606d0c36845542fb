"""/health and /ready through the ASGI stack's Django views."""

from __future__ import annotations

import pytest

from apps.core.lifecycle import lifecycle


@pytest.fixture
def clean_lifecycle():
    lifecycle.reset()
    yield lifecycle
    lifecycle.reset()


@pytest.mark.django_db
def test_health_is_always_ok(client, clean_lifecycle) -> None:
    clean_lifecycle.begin_drain()
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_ready_when_nothing_is_pending(client, clean_lifecycle) -> None:
    response = client.get("/ready")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ready"}


@pytest.mark.django_db
def test_ready_is_503_while_a_component_is_not_ready(client, clean_lifecycle) -> None:
    state = {"ready": False}
    clean_lifecycle.register("engine", lambda: None, lambda: None, lambda: state["ready"])
    clean_lifecycle.start_all()
    response = client.get("/ready")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "not_ready"
    assert "engine" in error["message"]
    state["ready"] = True
    assert client.get("/ready").status_code == 200


@pytest.mark.django_db
def test_ready_is_503_while_draining(client, clean_lifecycle) -> None:
    clean_lifecycle.begin_drain()
    response = client.get("/ready")
    assert response.status_code == 503
    assert "draining" in response.json()["error"]["message"]


@pytest.mark.django_db
def test_unknown_api_url_is_an_openai_404(client) -> None:
    response = client.get("/v1/nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "unknown_url"
