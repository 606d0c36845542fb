"""Query parameters of the SLO API: times a float or a date parser accepts but no window can
hold (infinity, year 1, year 10^292) are a 400 naming the parameter, never an OverflowError."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def raw_key(tenant_factory, api_key_factory) -> str:
    _, raw = api_key_factory(tenant=tenant_factory(slug="params"))
    return raw


def _get(client: Client, url: str, key: str, **params):
    return client.get(url, params, HTTP_AUTHORIZATION=f"Bearer {key}")


@pytest.mark.parametrize(("url", "param", "value"), [
    ("/api/slo/fulfilment", "since", "inf"),
    ("/api/slo/fulfilment", "since", "-inf"),
    ("/api/slo/fulfilment", "since", "1e300"),
    ("/api/slo/fulfilment", "until", "0001-01-01"),
    ("/api/slo/fulfilment", "until", "9999-12-31T23:59:59-12:00"),
    ("/api/slo/fulfilment.csv", "since", "inf"),
    ("/api/slo/usage", "until", "0001-01-02"),
    ("/api/slo/usage", "since", "9999-12-31"),
    ("/api/slo/usage.csv", "until", "0001-01-02"),
])
def test_an_unrepresentable_time_is_a_400_naming_it(client, raw_key, url, param, value):
    response = _get(client, url, raw_key, **{param: value})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["param"] == param
    assert "between 1970-01-01 and 9000-01-01" in error["message"]


@pytest.mark.parametrize("value", ["nan", "yesterday"])
def test_a_time_that_is_not_one_says_which_forms_work(client, raw_key, value):
    response = _get(client, "/api/slo/fulfilment", raw_key, since=value)
    assert response.status_code == 400
    assert "ISO 8601" in response.json()["error"]["message"]


def test_times_inside_the_bounds_still_work(client, raw_key):
    response = _get(client, "/api/slo/fulfilment", raw_key, window="day",
                    since="1970-01-01", until="1970-01-03")
    assert response.status_code == 200, response.content
    assert _get(client, "/api/slo/usage", raw_key, until="2026-01-05").status_code == 200
