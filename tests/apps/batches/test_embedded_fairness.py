"""Embedded mode (``manage.py serve``: the real Celery workers as threads, the in-memory broker,
SQLite): a tenant whose cold contract allows 1 request/min starts a batch first; another
tenant's 5-line batch, uploaded after it, is validated, run and completed while the throttled
one still waits for its rate windows. Before the turns, the throttled chunk held the only worker
for its whole soft limit and the second batch sat in ``validating`` behind it."""

from __future__ import annotations

import pytest

from tests.apps.batches.conftest import jsonl
from tests.apps.batches.live import LiveStack, embedded_env, tiny_line, wait_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SLOW_TENANT = """
from apps.slo.models import SLOContract
from apps.slo.services import contract_update
from apps.tenants.services import api_key_create, tenant_create
slow = tenant_create(name="Slow", slug="slow")
contract_update(contract=SLOContract.objects.get(tenant=slow, tier="cold"), requests_per_min=1)
_, raw = api_key_create(tenant=slow, name="slow", default_tier="cold")
print("KEY", raw)
"""


def test_a_throttled_tenant_does_not_hold_another_tenants_batch(tmp_path):
    stack = LiveStack(tmp_path, embedded_env(tmp_path / "var"))
    try:
        stack.manage("migrate", "--noinput")
        stack.manage("bootstrap_demo")
        slow_key = stack.manage("shell", "-c", SLOW_TENANT).split("KEY", 1)[1].strip()
        demo_key = (tmp_path / "var" / "demo_api_key").read_text().strip()
        stack.server()
        slow, demo = stack.client(slow_key), stack.client(demo_key)

        def start(client, n):
            uploaded = client.files.create(file=("in.jsonl", jsonl([tiny_line(i)
                                                                     for i in range(n)])),
                                           purpose="batch")
            return client.batches.create(input_file_id=uploaded.id, completion_window="24h",
                                         endpoint="/v1/completions")

        paced = start(slow, 4)  # one line a minute: three more minutes at least
        wait_batch(slow, paced.id, until=lambda b: b.request_counts.completed >= 1)
        quick = start(demo, 5)
        done = wait_batch(demo, quick.id, timeout=150)
        still = slow.batches.retrieve(paced.id)
    finally:
        stack.close()
    assert done.status == "completed" and done.completed_at <= done.expires_at
    assert (done.request_counts.completed, done.request_counts.failed) == (5, 0)
    # ... while the throttled batch had not finished: it did not go first
    assert still.status == "in_progress" and still.request_counts.completed < 4, still
