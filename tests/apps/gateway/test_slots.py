"""Callers and their caps: per-key and per-tenant request slots, per-key sockets, the key (or
the user's membership) re-checked at each turn."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.core.errors import APIError
from apps.gateway.slots import Caller, Caps, Slots, caller_check, caps_for
from apps.tenants.models import Tenant

pytestmark = pytest.mark.django_db


def test_caps_come_from_the_tenants_plan(settings, tenant_factory, plan_for):
    settings.LASER_KEY_MAX_INFLIGHT, settings.LASER_TENANT_MAX_INFLIGHT = 70, 90
    settings.LASER_KEY_MAX_SOCKETS = 30
    tenant = tenant_factory()
    plan_for(tenant, max_inflight_per_key=7, max_inflight_per_tenant=9, max_sockets_per_key=3)
    caps = caps_for(Tenant.objects.get(pk=tenant.pk))  # plan not loaded: looked up (off loop)
    assert (caps.key_inflight, caps.tenant_inflight, caps.key_sockets) == (7, 9, 3)


def test_on_the_event_loop_caps_read_the_loaded_plan_without_a_query(contracted, plan_for,
                                                                     user_factory):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.tenants.selectors import api_key_resolve, membership_for_user

    tenant, _, raw = contracted()
    plan_for(tenant, max_inflight_per_key=5, max_inflight_per_tenant=6, max_sockets_per_key=2)
    by_key = api_key_resolve(raw).tenant
    by_user = membership_for_user(user_factory(tenant=tenant)).tenant
    bare = Tenant.objects.get(pk=tenant.pk)  # no plan loaded

    async def on_loop():
        return caps_for(by_key), caps_for(by_user), caps_for(bare)

    with CaptureQueriesContext(connection) as queries:
        key_caps, user_caps, bare_caps = async_to_sync(on_loop)()
    assert len(queries) == 0  # (a query on the loop would raise SynchronousOnlyOperation)
    assert key_caps == user_caps == Caps(5, 6, 2)
    assert bare_caps == Caps(settings.LASER_KEY_MAX_INFLIGHT, settings.LASER_TENANT_MAX_INFLIGHT,
                             settings.LASER_KEY_MAX_SOCKETS)  # the pre-plan caps, with a warning


@pytest.mark.parametrize(("per_key", "per_tenant"), [(1, 1), (2, 3)])
def test_key_and_tenant_slots_refuse_past_their_plans_cap_with_429(per_key, per_tenant,
                                                                    contracted, plan_for,
                                                                    api_key_factory):
    tenant, key, _ = contracted()
    plan_for(tenant, max_inflight_per_key=per_key, max_inflight_per_tenant=per_tenant)
    other_key, _ = api_key_factory(tenant=tenant)
    slots, mine, other = Slots(), Caller.for_key(key), Caller.for_key(other_key)
    for _ in range(per_key):
        slots.acquire(mine)
    with pytest.raises(APIError) as info:  # the key's next concurrent request
        slots.acquire(mine)
    assert (info.value.status, info.value.code) == (429, "rate_limit_exceeded")
    assert info.value.headers["Retry-After"] == "1"
    for _ in range(per_tenant - per_key):  # the rest of the tenant's slots
        slots.acquire(other)
    with pytest.raises(APIError, match="tenant"):
        slots.acquire(other)
    slots.release(mine)
    slots.acquire(other)
    assert slots.held(other) == (per_tenant - per_key + 1, per_tenant)
    for caller in [mine] * (per_key - 1) + [other] * (per_tenant - per_key + 1):
        slots.release(caller)
    assert slots.held(mine) == (0, 0)


def test_a_revoked_key_or_a_departed_user_fails_the_next_check(contracted, user_factory):
    from apps.tenants.models import Membership
    from apps.tenants.services import api_key_revoke

    tenant, key, _ = contracted()
    caller = Caller.for_key(key)
    async_to_sync(caller_check)(caller)
    api_key_revoke(api_key=key)
    async_to_sync(caller_check)(caller, max_age_s=60)  # checked just now: trusted
    with pytest.raises(APIError) as info:
        async_to_sync(caller_check)(caller)
    assert (info.value.status, info.value.code) == (401, "invalid_api_key")
    user = user_factory(tenant=tenant)
    member = Caller.for_user(user, tenant)
    async_to_sync(caller_check)(member)
    assert member.kind == "user" and member.api_key_id is None
    Membership.objects.filter(user=user).delete()
    with pytest.raises(APIError) as info:
        async_to_sync(caller_check)(member)
    assert info.value.status == 401


@pytest.mark.django_db(transaction=True)
def test_past_the_socket_cap_a_websocket_gets_429_and_closes(laser_server, tiny_engine,
                                                             contracted, plan_for):
    tenant, api_key, key = contracted()
    plan_for(tenant, max_sockets_per_key=1)

    def socket():
        return connect(f"{laser_server.ws_url}/ws/chat/", origin=laser_server.url,
                       subprotocols=["laser.v1", f"key.{key}"], open_timeout=10)

    with socket() as first:
        assert json.loads(first.recv(timeout=10))["type"] == "ready"
        with socket() as second:
            error = json.loads(second.recv(timeout=10))
            assert error["error"]["code"] == "rate_limit_exceeded"
            with pytest.raises(ConnectionClosed) as closed:
                second.recv(timeout=10)
            assert closed.value.rcvd.code == 4429
    from apps.gateway.slots import slots
    from tests.apps.gateway.live import wait_until

    # given back when it closed (this key's: another test's socket may still be closing)
    mine = Caller.for_key(api_key).slot_key
    assert wait_until(lambda: mine not in slots._sockets, timeout=10), dict(slots._sockets)
    with socket() as again:
        assert json.loads(again.recv(timeout=10))["type"] == "ready"
