"""The usage page and its CSV: per day, tier, key and user, from the request records, against
the contract's and plan's limits; a key's limits on the keys page; tenant isolation."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools

import pytest
from django.utils import timezone

from apps.slo.report_types import RequestReport
from apps.slo.services import flush_reports, report_request

pytestmark = pytest.mark.django_db
_ids = itertools.count()


def _record(tenant, *, at: dt.datetime, tier: str = "hot", outcome: str = "ok", key=None,
            user=None, prompt: int = 10, completion: int = 20, in_contract: bool = True) -> None:
    t = at.timestamp()
    report_request(RequestReport(
        request_id=f"u-{next(_ids)}", tenant_id=tenant.pk, tier_asked=tier, outcome=outcome,
        arrival=t - 1, finished_at=t, first_token_at=t - 0.9, ttft_s=0.1,
        api_key_id=key.pk if key else None, user_id=user.pk if user else None,
        prompt_tokens=prompt, completion_tokens=completion, in_contract=in_contract))


@pytest.fixture
def used(world, api_key_factory, user_factory):
    """Alpha: today 3 hot requests with its key (one excess), a 429 and a warm chat turn of a
    user; yesterday one hot request; Beta: one request (never shown to Alpha)."""
    from apps.slo.models import SLOContract
    from apps.slo.services import contract_update

    contract_update(contract=SLOContract.objects.get(tenant=world.a, tier="hot"),
                    daily_token_budget=1000, requests_per_min=5, beyond_plan=True)
    now = timezone.now()
    key, _ = api_key_factory(tenant=world.a, name="ci")
    user = user_factory(tenant=world.a, username="carol")
    for i in range(3):
        _record(world.a, at=now - dt.timedelta(seconds=5 + i), key=key, in_contract=i != 2)
    _record(world.a, at=now - dt.timedelta(seconds=9), key=key, outcome="rejected_429",
            prompt=0, completion=0)
    _record(world.a, at=now - dt.timedelta(seconds=9), tier="warm", user=user, prompt=7,
            completion=3)
    _record(world.a, at=now - dt.timedelta(days=1), key=key, prompt=100, completion=100)
    beta_key, _ = api_key_factory(tenant=world.b)
    _record(world.b, at=now, key=beta_key, prompt=5000)
    flush_reports()
    return key


def test_the_usage_page_adds_up_the_records_against_the_limits(world, used):
    from apps.slo.usage_report import usage_report

    report = usage_report(tenant=world.a, days=7)
    assert report.totals == {"requests": 5, "tokens": 90 + 10 + 200, "prompt_tokens": 137,
                             "completion_tokens": 163, "rejected_429": 1, "excess": 1}
    assert report.by_day["hot"]["tokens"][-2:] == [200, 90]
    assert report.by_day["warm"]["requests"][-1] == 1
    assert [(k["prefix"], k["requests"], k["tokens"], k["rejected_429"]) for k in
            report.by_key] == [(used.prefix, 4, 290, 1)]
    assert [(u["user"], u["tokens"]) for u in report.by_user] == [("carol", 10)]
    hot = next(limit for limit in report.limits if limit.tier == "hot")
    assert (hot.daily_token_budget, hot.tokens_today, hot.budget_left) == (1000, 90, 910)
    assert (hot.requests_per_min, hot.ceiling_requests_per_min) == (5, 10)  # burst 2.0
    assert hot.peak_requests_per_min in (2, 3)  # the minute may turn between the records
    assert (hot.excess_today, hot.rejected_429_today) == (1, 1)
    page = world.member.get("/usage/").content.decode()
    assert 'data-total="requests">5<' in page and 'data-total="tokens">300<' in page
    assert f'data-key="{used.prefix}"' in page and 'data-col="budget-left">910<' in page
    assert 'id="chart-tokens"' in page and "chart.umd.min.js" in page
    today = world.member.get("/usage/?days=1").content.decode()
    assert 'data-total="tokens">100<' in today


def test_the_csv_has_a_row_per_day_tier_key_and_user(world, used):
    reply = world.admin.get("/usage.csv?days=7")
    assert reply["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(reply.content.decode())))
    assert sum(int(r["tokens"]) for r in rows) == 300
    assert {(r["tier"], r["key_prefix"], r["user"]) for r in rows} == {
        ("hot", used.prefix, ""), ("warm", "", "carol")}
    assert sum(int(r["rejected_429"]) for r in rows) == 1


def test_another_tenant_sees_only_its_own_usage(world, used):
    page = world.b_admin.get("/usage/").content.decode()
    assert used.prefix not in page and 'data-total="tokens">5020<' in page
    assert used.prefix not in world.b_admin.get("/usage.csv").content.decode()
    assert world.member.get("/usage/?days=abc").status_code == 200  # a bad period: the default


def test_the_keys_page_shows_each_keys_limits(world, used):
    page = world.member.get("/keys/").content.decode()
    assert "5 req/min" in page and "1000 tokens/day" in page and "in flight" in page
