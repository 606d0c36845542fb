"""Webhook destinations: which are refused, which allowed, and what the tenant reads.

Addresses are checked as the delivery resolves them. URLs with literal addresses go through
the real resolver; for host names a stand-in resolver answers with the addresses a hostile DNS
server could return (no DNS server is reachable in CI), and ``localhost`` uses the real one.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.utils import timezone

from apps.slo import webhooks
from apps.slo.models import AlertSettings, BreachAlert
from apps.slo.tasks import deliver_alert_task

REFUSED = [
    "http://127.0.0.1/hook", "http://127.1/", "http://2130706433/", "http://0x7f000001/",
    "http://10.0.0.1/", "http://172.16.0.1/", "http://192.168.1.1/", "http://100.64.0.1/",
    "http://169.254.169.254/latest/meta-data/", "http://0.0.0.0/", "http://224.0.0.1/",
    "http://240.0.0.1/", "http://255.255.255.255/", "http://192.0.2.1/",
    "http://[::1]/", "http://[::]/", "http://[fe80::1]/", "http://[fc00::1]/", "http://[fd00::1]/",
    "http://[ff02::1]/", "http://[2001:db8::1]/", "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:169.254.169.254]/", "http://[::ffff:10.0.0.1]/", "http://[::127.0.0.1]/",
    "http://[64:ff9b::a9fe:a9fe]/", "http://[2002:7f00:1::]/", "http://[2002:a00:1::]/",
    "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/",  # Teredo, client 10.0.0.1
    "http://localhost:8000/", "http://private.test/", "http://mapped.test/",
    "http://mixed.test/", "http://v6private.test/",
]
ALLOWED = ["http://93.184.215.14/hook", "https://[2606:4700:4700::1111]/x?y=1",
           "https://public.test:8443/hook"]
INVALID = ["ftp://93.184.215.14/", "file:///etc/passwd", "http:///nohost", "http://[::1/",
           "gopher://public.test/"]
# What the stand-in resolver answers for each test name.
DNS = {"private.test": ["10.1.2.3"], "mapped.test": ["::ffff:192.168.0.1"],
       "mixed.test": ["93.184.215.14", "127.0.0.1"], "v6private.test": ["fd12::1"],
       "public.test": ["93.184.215.14", "2606:4700:4700::1111"]}


@pytest.fixture(autouse=True)
def stand_in_dns(monkeypatch):
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in DNS:
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6,
                     "", (a, port)) for a in DNS[host]]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(webhooks.socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("url", REFUSED)
def test_refused_destinations(url):
    with pytest.raises(webhooks.Refused) as info:
        webhooks.resolve(url)
    assert info.value.reason == webhooks.REFUSED
    result = webhooks.post(url, {"x": 1})
    assert not result.delivered and result.status == f"failed: {webhooks.REFUSED}"


@pytest.mark.parametrize("url", ALLOWED)
def test_allowed_destinations_connect_to_the_address_that_was_checked(url):
    dest = webhooks.resolve(url)
    assert webhooks.is_public(webhooks.ipaddress.ip_address(dest.address))
    assert dest.host in url and dest.target.startswith("/")


@pytest.mark.parametrize("url", INVALID)
def test_invalid_urls(url):
    assert webhooks.post(url, {}).status == f"failed: {webhooks.INVALID_URL}"


def test_the_staff_allowlist_admits_named_hosts(settings):
    settings.LASER_SLO_WEBHOOK_ALLOWED_HOSTS = ["private.test", "localhost"]
    assert webhooks.resolve("http://private.test/").address == "10.1.2.3"
    assert webhooks.resolve("http://localhost:9/").address in ("127.0.0.1", "::1")
    with pytest.raises(webhooks.Refused):
        webhooks.resolve("http://mapped.test/")


class _Server:
    """A local HTTP server answering each POST with the next status of ``replies``."""

    def __init__(self, replies: list[int], delay: float = 0.0) -> None:
        self.replies, self.hits = list(replies), 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                outer.hits += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(delay)
                code = outer.replies.pop(0) if len(outer.replies) > 1 else outer.replies[0]
                self.send_response(code)
                if 300 <= code < 400:
                    self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve(settings):
    settings.LASER_SLO_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    servers: list[_Server] = []

    def make(replies: list[int], delay: float = 0.0) -> _Server:
        servers.append(_Server(replies, delay))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_redirects_are_not_followed(serve):
    server = serve([302])
    result = webhooks.post(server.url, {"x": 1})
    assert result.status == "failed: redirect not followed (HTTP 302)" and not result.retry
    assert server.hits == 1


def test_statuses_are_fixed_texts_never_exception_text(serve):
    assert webhooks.post(serve([204]).url, {}).status == "delivered: HTTP 204"
    assert webhooks.post(serve([404]).url, {}).status == "failed: HTTP 404"
    assert webhooks.post(serve([503]).url, {}).retry
    slow = serve([200], delay=1.0)
    assert webhooks.post(slow.url, {}, timeout=0.2).status == "failed: timed out"
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    result = webhooks.post(f"http://127.0.0.1:{port}/", {})
    assert result.status == "failed: connection failed" and result.retry
    assert webhooks.post("http://no-such-host.invalid/", {}).status == \
        "failed: host name not resolved"


@pytest.mark.django_db
def test_the_task_retries_a_bounded_number_of_times(serve, settings, tenant_factory,
                                                    eager_celery):
    settings.LASER_SLO_WEBHOOK_RETRIES, settings.LASER_SLO_WEBHOOK_BACKOFF_S = 2, 0
    server = serve([503])
    tenant = tenant_factory()
    AlertSettings.objects.create(tenant=tenant, webhook_url=server.url, emails="ops@x.test")
    alert = BreachAlert.objects.create(tenant=tenant, tier="hot", window="hour",
                                       window_start=timezone.now(), term="ttft_p99")
    deliver_alert_task.delay(alert.pk)
    alert.refresh_from_db()
    assert server.hits == 3  # the first attempt and two retries
    assert alert.webhook_status == "failed: HTTP 503" and alert.emailed
    # A transient failure then success: delivered on the retry, the email sent once.
    flaky = serve([500, 204])
    AlertSettings.objects.filter(tenant=tenant).update(webhook_url=flaky.url)
    BreachAlert.objects.filter(pk=alert.pk).update(webhook_status="")
    deliver_alert_task.delay(alert.pk)
    alert.refresh_from_db()
    assert (flaky.hits, alert.webhook_status) == (2, "delivered: HTTP 204")


@pytest.mark.django_db
def test_a_refused_destination_is_final_and_the_tenant_reads_a_fixed_reason(
        tenant_factory, eager_celery):
    tenant = tenant_factory()
    AlertSettings.objects.create(tenant=tenant, webhook_url="http://169.254.169.254/latest/")
    alert = BreachAlert.objects.create(tenant=tenant, tier="hot", window="hour",
                                       window_start=timezone.now(), term="ttft_p99")
    deliver_alert_task.delay(alert.pk)
    alert.refresh_from_db()
    assert alert.webhook_status == "failed: destination not allowed (private or reserved address)"


@pytest.mark.django_db(transaction=True)
def test_a_breach_is_delivered_by_a_real_celery_worker(serve, tenant_factory):
    """Raised after commit, carried by the broker (Redis in CI), run by a worker thread."""
    from celery.contrib.testing.worker import start_worker

    from apps.slo.alerts import raise_breaches
    from laser_platform.celery import app

    server = serve([204])
    tenant = tenant_factory()
    AlertSettings.objects.create(tenant=tenant, webhook_url=server.url)
    row = {"final": True, "window": "hour", "tenant_id": tenant.pk, "tier": "hot",
           "start": timezone.now().replace(minute=0, second=0, microsecond=0),
           "terms": {"ttft_p99": {"kept": False, "target": 0.2, "actual": 0.9}}}
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        (alert,) = raise_breaches([row])  # autocommit: enqueued at once
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not alert.webhook_status:
            time.sleep(0.1)
            alert.refresh_from_db()
    assert alert.webhook_status == "delivered: HTTP 204" and server.hits == 1


@pytest.mark.django_db
def test_the_admin_refuses_an_internal_webhook_when_it_is_saved(tenant_factory, user_factory):
    from django.test import Client

    tenant = tenant_factory()
    client = Client()
    client.force_login(user_factory(tenant=tenant, role="admin", is_staff=True))
    form = {"tenant": tenant.pk, "enabled": "on", "emails": ""}
    response = client.post("/admin/slo/alertsettings/add/",
                           {**form, "webhook_url": "http://169.254.169.254/latest/meta-data/"})
    assert response.status_code == 200
    assert "destination not allowed" in response.content.decode()
    response = client.post("/admin/slo/alertsettings/add/",
                           {**form, "webhook_url": "https://public.test/hook"})
    assert response.status_code == 302
    assert AlertSettings.objects.get(tenant=tenant).webhook_url == "https://public.test/hook"


def test_an_allowlisted_ipv6_literal_is_delivered_with_its_host_header(settings):
    settings.LASER_SLO_WEBHOOK_ALLOWED_HOSTS = ["::1"]
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.headers["Host"])
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    class Server6(HTTPServer):
        address_family = socket.AF_INET6

    try:
        httpd = Server6(("::1", 0), Handler)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        url = f"http://[::1]:{httpd.server_port}/hook?x=1"
        assert webhooks.post(url, {"a": 1}).status == "delivered: HTTP 201"
        assert seen == [f"[::1]:{httpd.server_port}"]
    finally:
        httpd.shutdown()
        httpd.server_close()
