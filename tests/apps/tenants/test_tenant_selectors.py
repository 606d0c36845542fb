"""Selectors other apps build on: tenant of a user, admin role, async key resolution."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from apps.core.errors import AuthenticationError
from apps.tenants.authentication import ApiPrincipal
from apps.tenants.selectors import aapi_key_resolve, tenant_for_user, user_is_tenant_admin
from apps.tenants.services import api_key_create, member_add


@pytest.mark.django_db
def test_tenant_for_user_and_admin_role(tenant_factory, user_factory) -> None:
    a, b = tenant_factory(), tenant_factory()
    admin, member, staff = (
        user_factory(tenant=a, role="admin"),
        user_factory(tenant=a),
        user_factory(is_staff=True),
    )
    assert tenant_for_user(admin) == a and tenant_for_user(member) == a
    assert tenant_for_user(staff) is None and tenant_for_user(AnonymousUser()) is None
    assert user_is_tenant_admin(admin) and not user_is_tenant_admin(member)
    assert not user_is_tenant_admin(staff)
    member_add(tenant=b, user=member, role="admin")  # one tenant per user: moving re-homes
    assert tenant_for_user(member) == b and user_is_tenant_admin(member)


@pytest.mark.django_db
def test_principal_exposes_tenant_and_key(api_key_factory) -> None:
    api_key, _ = api_key_factory(default_tier="cold")
    principal = ApiPrincipal(api_key)
    assert principal.is_authenticated and not principal.is_staff
    assert principal.tenant == api_key.tenant and principal.default_tier == "cold"
    assert tenant_for_user(principal) == api_key.tenant
    assert not user_is_tenant_admin(principal)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_async_resolve(tenant_factory) -> None:
    from asgiref.sync import sync_to_async

    tenant = await sync_to_async(tenant_factory)()
    api_key, plaintext = await sync_to_async(api_key_create)(tenant=tenant)
    resolved = await aapi_key_resolve(plaintext)
    assert resolved.pk == api_key.pk and resolved.tenant.pk == tenant.pk
    with pytest.raises(AuthenticationError, match="Malformed"):
        await aapi_key_resolve("nope")


def test_unknown_tier_is_refused(db, tenant_factory) -> None:
    with pytest.raises(ValueError, match="tier"):
        api_key_create(tenant=tenant_factory(), default_tier="lukewarm")
