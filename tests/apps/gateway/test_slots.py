"""Callers and their caps: per-key and per-tenant request slots, per-key sockets, the key (or
the user's membership) re-checked at each turn."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.gateway.slots import Caller, Slots, caller_check, caps_for
from laser_platform.errors import APIError

pytestmark = pytest.mark.django_db


def test_caps_come_from_one_function(settings, tenant_factory):
    settings.LASER_KEY_MAX_INFLIGHT, settings.LASER_TENANT_MAX_INFLIGHT = 7, 9
    settings.LASER_KEY_MAX_SOCKETS = 3
    caps = caps_for(tenant_factory())
    assert (caps.key_inflight, caps.tenant_inflight, caps.key_sockets) == (7, 9, 3)


def test_key_and_tenant_slots_refuse_past_their_cap_with_429(settings, contracted,
                                                           api_key_factory):
    settings.LASER_KEY_MAX_INFLIGHT, settings.LASER_TENANT_MAX_INFLIGHT = 2, 3
    tenant, key, _ = contracted()
    other_key, _ = api_key_factory(tenant=tenant)
    slots, mine, other = Slots(), Caller.for_key(key), Caller.for_key(other_key)
    slots.acquire(mine)
    slots.acquire(mine)
    with pytest.raises(APIError) as info:
        slots.acquire(mine)
    assert (info.value.status, info.value.code) == (429, "rate_limit_exceeded")
    assert info.value.headers["Retry-After"] == "1"
    slots.acquire(other)  # the tenant's third
    with pytest.raises(APIError, match="tenant"):
        slots.acquire(other)
    slots.release(mine)
    slots.acquire(other)
    assert slots.held(other) == (2, 3)
    for caller in (mine, other, other):
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
                                                             contracted, settings):
    settings.LASER_KEY_MAX_SOCKETS = 1
    key = contracted()[2]

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

    assert wait_until(lambda: not slots._sockets, timeout=10)  # given back when it closed
    with socket() as again:
        assert json.loads(again.recv(timeout=10))["type"] == "ready"
