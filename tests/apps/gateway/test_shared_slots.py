"""Concurrency caps across web processes (issue 41): slots held in one process count in
another through Redis, and a process that dies holding slots gives them up when their leases
run out. The other process is a real one (``python -c``) with the same settings."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from apps.core.errors import APIError
from apps.gateway.slots import Caller, get_slots
from tests.apps.gateway.live import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[3]
LEASE_S = 1.5
KEY_CAP, TENANT_CAP, SOCKET_CAP = 4, 5, 2

# The other web process: takes ``n`` request slots and every socket slot of key ``k`` of
# tenant ``t`` (the caps above), says so, and holds them until it is killed.
OTHER = """
import os, sys, time, django
django.setup()
from django.conf import settings
settings.DATABASES["default"]["NAME"] = sys.argv[1]
from tests.apps.gateway.test_shared_slots import caller
from apps.gateway.slots import get_slots
slots, me = get_slots(), caller(int(sys.argv[2]), int(sys.argv[3]))
for _ in range(int(sys.argv[4])):
    slots.acquire(me)
for _ in range(%d):
    slots.open_socket(me)
print("held", flush=True)
time.sleep(600)
""" % SOCKET_CAP


def caller(tenant_id: int, key_id: int) -> Caller:
    """A key's caller with its plan loaded (the caps above), built without the database."""
    from apps.tenants.models import ApiKey, Plan, Tenant

    tenant = Tenant(pk=tenant_id, name="t")
    tenant.plan = Plan(pk=1, name="p", max_inflight_per_key=KEY_CAP,
                       max_inflight_per_tenant=TENANT_CAP, max_sockets_per_key=SOCKET_CAP)
    return Caller.for_key(ApiKey(pk=key_id, tenant=tenant, default_tier="hot"))


@pytest.fixture
def shared(settings):
    settings.LASER_RATELIMIT_REDIS_URL = os.environ["REDIS_URL"]
    settings.LASER_SLOT_LEASE_S = LEASE_S
    default = settings.DATABASES["default"]  # the connections' own dict: put the name back
    name, default["NAME"] = default["NAME"], f"slots-{uuid.uuid4().hex[:8]}"  # our names
    yield get_slots()
    default["NAME"] = name


def _other_process(namespace: str, tenant_id: int, key_id: int, n: int) -> subprocess.Popen:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "laser_platform.settings",
           "LASER_RATELIMIT_REDIS_URL": os.environ["REDIS_URL"],
           "LASER_SLOT_LEASE_S": str(LEASE_S), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", OTHER, namespace, str(tenant_id),
                             str(key_id), str(n)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _refused(take) -> str:
    with pytest.raises(APIError) as info:
        take()
    assert (info.value.status, info.value.code) == (429, "rate_limit_exceeded")
    return info.value.message


def test_slots_count_across_processes_and_a_dead_ones_run_out(settings, shared):
    tenant_id = 10_000 + os.getpid()
    mine, other_key = caller(tenant_id, 1), caller(tenant_id, 2)
    proc = _other_process(settings.DATABASES["default"]["NAME"], tenant_id, 1, KEY_CAP - 1)
    try:
        shared.acquire(mine)  # the key's last slot: the other process holds the rest
        assert "for this key" in _refused(lambda: shared.acquire(mine))
        assert shared.held(mine) == (KEY_CAP, KEY_CAP)
        shared.acquire(other_key)  # the tenant's last slot
        assert "for this tenant" in _refused(lambda: shared.acquire(other_key))
        assert "WebSockets" in _refused(lambda: shared.open_socket(mine))
        time.sleep(2 * LEASE_S)  # live processes renew their leases
        assert shared.held(mine) == (KEY_CAP, TENANT_CAP)
    finally:
        proc.kill()
        proc.wait(10)
    # the dead process's leases run out; ours stay
    assert wait_until(lambda: shared.held(mine) == (1, 2), timeout=10 * LEASE_S, interval=0.1)
    shared.open_socket(mine)
    shared.close_socket(mine)
    shared.release(mine)
    shared.release(other_key)
    assert shared.held(mine) == (0, 0)


@pytest.mark.asyncio
async def test_the_serving_paths_async_calls_share_the_same_counts(shared):
    me = caller(20_000 + os.getpid(), 1)
    for _ in range(KEY_CAP):
        await shared.aacquire(me)
    with pytest.raises(APIError):
        await shared.aacquire(me)
    for _ in range(KEY_CAP):
        await shared.arelease(me)
    assert shared.held(me) == (0, 0)


def test_without_redis_the_count_is_the_process_own(settings):
    from apps.gateway.slots import Slots

    settings.LASER_RATELIMIT_REDIS_URL = ""
    assert type(get_slots()) is Slots
