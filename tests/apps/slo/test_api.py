"""REST + CSV: contracts and fulfilment by API key or session; tenants see only their own."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import Client

from apps.slo.services import contract_create, flush_reports, report_request
from tests.apps.slo.conftest import T0

pytestmark = pytest.mark.django_db
SPAN = {"window": "minute", "since": "2026-01-05T10:00:00Z", "until": "2026-01-05T10:05:00Z"}


@pytest.fixture
def world(tenant_factory, api_key_factory, make_report):
    a, b = tenant_factory(slug="alpha"), tenant_factory(slug="beta")
    for tenant in (a, b):
        contract_create(tenant=tenant, tier="hot")
    contract_create(tenant=a, tier="warm", warm_rate_tps=40.0)
    key_a, raw_a = api_key_factory(tenant=a)
    _, raw_b = api_key_factory(tenant=b)
    report_request(make_report(a, at=1, ttft=0.1, api_key_id=key_a.pk))
    report_request(make_report(a, at=2, ttft=0.5, api_key_id=key_a.pk))
    report_request(make_report(b, at=3, ttft=0.1))
    flush_reports()
    return {"a": a, "b": b, "raw_a": raw_a, "raw_b": raw_b, "key_a": key_a}


def _get(client: Client, url: str, key: str | None = None, **params):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}
    return client.get(url, params, **headers)


def test_contracts_by_api_key_are_the_tenants_own(world, client):
    body = _get(client, "/api/slo/contracts", world["raw_a"]).json()
    assert [(c["tenant"], c["tier"]) for c in body["data"]] == [("alpha", "hot"),
                                                                ("alpha", "warm")]
    assert body["data"][1]["targets"]["warm_rate_tps"] == 40.0
    assert body["data"][0]["version"] == 1 and body["data"][0]["requests_per_min"] == 600


def test_fulfilment_json_for_a_tenant(world, client):
    body = _get(client, "/api/slo/fulfilment", world["raw_a"], tier="hot", **SPAN).json()
    assert [r["tenant"] for r in body["data"]] == ["alpha"]
    row = body["data"][0]
    assert row["stats"]["requests"] == 2 and row["terms"]["ttft_p99"]["kept"] is False
    assert row["start"].startswith("2026-01-05T10:00:00")
    assert body["summary"]["hot"]["attainment"] == 0.0


def test_a_tenant_cannot_read_another(world, client):
    response = _get(client, "/api/slo/fulfilment", world["raw_b"], tenant="alpha", **SPAN)
    assert response.status_code == 403
    assert response.json()["error"]["param"] == "tenant"
    body = _get(client, "/api/slo/fulfilment", world["raw_b"], **SPAN).json()
    assert {r["tenant"] for r in body["data"]} == {"beta"}


def test_staff_read_all_or_one_tenant_by_session(world, user_factory):
    client = Client()
    client.force_login(user_factory(is_staff=True))
    everyone = _get(client, "/api/slo/fulfilment", **SPAN).json()
    assert {r["tenant"] for r in everyone["data"]} == {"alpha", "beta"}
    only_b = _get(client, "/api/slo/fulfilment", tenant="beta", **SPAN).json()
    assert {r["tenant"] for r in only_b["data"]} == {"beta"}
    assert _get(client, "/api/slo/fulfilment", tenant="nope", **SPAN).status_code == 404


def test_member_session_sees_own_tenant(world, user_factory):
    client = Client()
    client.force_login(user_factory(tenant=world["b"]))
    body = _get(client, "/api/slo/contracts").json()
    assert {c["tenant"] for c in body["data"]} == {"beta"}


@pytest.mark.parametrize(("params", "param"), [
    ({"window": "week"}, "window"), ({"tier": "lukewarm"}, "tier"),
    ({"since": "yesterday-ish"}, "since"),
    ({"since": "2026-01-05T10:00:00Z", "until": "2026-01-05T09:00:00Z"}, "since"),
    ({"window": "minute", "since": "2020-01-01", "until": "2026-01-01"}, "since"),
])
def test_bad_filters_are_400_naming_the_parameter(world, client, params, param):
    response = _get(client, "/api/slo/fulfilment", world["raw_a"], **params)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_unauthenticated_is_401(client):
    response = client.get("/api/slo/fulfilment")
    assert response.status_code == 401 and "error" in response.json()


def test_fulfilment_csv(world, client):
    response = _get(client, "/api/slo/fulfilment.csv", world["raw_a"], **SPAN)
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["tenant"], r["tier"], r["requests"]) for r in rows] == [("alpha", "hot", "2")]
    assert rows[0]["ttft_p99_kept"] == "no" and float(rows[0]["ttft_p99_actual"]) == 0.5
    assert rows[0]["warm_floor_kept"] == ""


def test_usage_per_key_tier_day_json_and_csv(world, client):
    params = {"since": "2026-01-05", "until": "2026-01-06"}
    body = _get(client, "/api/slo/usage", world["raw_a"], **params).json()
    assert body["data"] == [{"tenant": "alpha", "key_prefix": world["key_a"].prefix,
                             "tier": "hot", "day": "2026-01-05", "requests": 2,
                             "prompt_tokens": 20, "completion_tokens": 40}]
    text = _get(client, "/api/slo/usage.csv", world["raw_a"], **params).content.decode()
    assert text.splitlines()[1].startswith("alpha,2026-01-05,hot,")
    assert T0.date().isoformat() in text
