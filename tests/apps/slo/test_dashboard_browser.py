"""The dashboard in headless Chromium: log in, see the cards and non-empty charts fed by real
requests through the engine (plus an hour of reported history), see a value change live, and
save ``docs/img/dashboard.png``.

Needs Debian's ``chromium`` (``apt-get install -y chromium``) and Playwright's Python API; it
skips without them on a laptop and fails under ``CI=true``.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import threading
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from apps.slo.report_types import RequestReport
from apps.slo.selectors import contract_for
from apps.slo.services import BatchReport, flush_reports, report_batch, report_request

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOT = Path(__file__).resolve().parents[3] / "docs" / "img" / "dashboard.png"
PASSWORD = "correct-horse-battery"


def _browser_or_skip():
    problem = None
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        problem = "Debian's chromium is not installed (apt-get install -y chromium)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        problem = "playwright is not installed"
    if problem:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true but {problem}", pytrace=False)
        pytest.skip(problem)
    return sync_playwright


def _history(tenant, snaps, now: dt.datetime, rng: random.Random) -> None:
    """40 minutes of plausible traffic for every tier, reported like the gateway does."""
    for minute in range(40, 0, -1):
        base = now.timestamp() - minute * 60
        slow = 25 <= minute <= 28  # a short congestion episode the charts should show
        for i in range(rng.randint(4, 9)):
            ttft = rng.uniform(0.05, 0.15) * (3 if slow and i % 2 else 1)
            report_request(RequestReport(
                request_id=f"hist-hot-{minute}-{i}", tenant_id=tenant.pk, tier_asked="hot",
                outcome="ok", arrival=base + i, first_token_at=base + i + ttft,
                finished_at=base + i + 2, ttft_s=ttft, tbt_p99_s=rng.uniform(0.02, 0.06),
                tbt_max_s=0.08, streamed=True, prompt_tokens=40, completion_tokens=60,
                demoted=slow and i == 0, tier_served="warm" if slow and i == 0 else "hot",
                contract_version_id=snaps["hot"].version_id))
        for i in range(rng.randint(1, 3)):
            ttft = rng.uniform(0.4, 1.2)
            report_request(RequestReport(
                request_id=f"hist-warm-{minute}-{i}", tenant_id=tenant.pk, tier_asked="warm",
                outcome="ok", arrival=base + 10 + i, first_token_at=base + 10 + i + ttft,
                finished_at=base + 16 + i + ttft, ttft_s=ttft, prompt_tokens=300,
                completion_tokens=rng.randint(110, 140),
                contract_version_id=snaps["warm"].version_id))
        report_request(RequestReport(
            request_id=f"hist-cold-{minute}", tenant_id=tenant.pk, tier_asked="cold",
            outcome="ok", arrival=base + 20, finished_at=base + 40, prompt_tokens=800,
            completion_tokens=200, batch_id="batch_demo_1",
            contract_version_id=snaps["cold"].version_id))
    t = now.timestamp()
    report_batch(BatchReport("batch_demo_1", tenant.pk, created_at=t - 2400, deadline=t + 3 * 3600,
                             status="in_progress", total=1000, completed=640, failed=3))
    report_batch(BatchReport("batch_demo_2", tenant.pk, created_at=t - 600, deadline=t + 5400,
                             status="in_progress", total=200, completed=35))


def _chat(base_url: str, key: str, text: str) -> dict:
    response = httpx.post(
        f"{base_url}/v1/chat/completions", timeout=300,
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "smollm2-135m-instruct", "max_tokens": 8, "temperature": 0,
              "messages": [{"role": "user", "content": text}]},
    )
    assert response.status_code == 200, response.text
    return response.json()


def _hot_requests(page) -> int:
    return int(page.locator('.card[data-tier="hot"] dd').first.inner_text())


def test_dashboard_live_in_chromium(live_server, tenant_factory, user_factory, api_key_factory,
                                    settings):
    sync_playwright = _browser_or_skip()
    from apps.gateway.engine_client import stop_engine_client
    from apps.slo.services import contracts_ensure_defaults

    settings.LASER_SLO_AUTOFLUSH = False
    tenant = tenant_factory(name="Acme Research", slug="acme")
    contracts_ensure_defaults(tenant=tenant)
    snaps = {tier: contract_for(tenant=tenant, tier=tier) for tier in ("hot", "warm", "cold")}
    user_factory(username="ada", tenant=tenant, password=PASSWORD)
    _, key = api_key_factory(tenant=tenant)
    _history(tenant, snaps, timezone.now(), random.Random(7))
    try:
        # Real requests through the gateway and the bundled model.
        for prompt in ("Say hello.", "Name a colour."):
            assert _chat(live_server.url, key, prompt)["usage"]["completion_tokens"] > 0
        flush_reports()

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{live_server.url}/dashboard/")
            page.fill("#id_username", "ada")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_selector('.card[data-tier="hot"]')
            assert page.locator(".card").count() == 3
            for chart in ("chart-ttft", "chart-attainment", "chart-tps", "chart-demotions"):
                points = page.evaluate(
                    "id => Chart.getChart(id).data.datasets[0].data"
                    ".filter(v => v !== null && v !== 0).length", chart)
                assert points > 0, chart
            assert page.locator("#jobs tr[data-batch]").count() == 2
            assert page.locator("#violations tr").count() >= 1

            before = _hot_requests(page)
            _chat(live_server.url, key, "One more, please.")
            # Playwright's sync API keeps an event loop on this thread: flush from another.
            flusher = threading.Thread(target=flush_reports)
            flusher.start()
            flusher.join()
            # Polling every 2 s: the new request must show up without a reload.
            page.wait_for_function(
                "n => Number(document.querySelector('.card[data-tier=hot] dd').innerText) > n",
                arg=before, timeout=6000)
            assert _hot_requests(page) == before + 1
            if os.environ.get("LASER_SCREENSHOTS") == "1":  # CI never writes into the tree
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOT), full_page=True)
            browser.close()
    finally:
        stop_engine_client()
