"""create_tenant / create_api_key, including the exit status a script sees."""

from __future__ import annotations

import io

import pytest
from django.core.management import base, call_command, load_command_class

from apps.tenants.models import ApiKey, Tenant
from apps.tenants.selectors import api_key_resolve

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _keep_test_connection(monkeypatch) -> None:
    # run_from_argv closes every DB connection when it ends, which would drop the test
    # transaction on PostgreSQL; the exit-status path is what these tests are about.
    monkeypatch.setattr(base.connections, "close_all", lambda: None)


def _run(name: str, *argv: str) -> tuple[int, str, str]:
    """Run a command the way manage.py does (run_from_argv), returning (status, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    command = load_command_class("apps.tenants", name)
    command.stdout._out, command.stderr._out = out, err  # OutputWrapper targets
    try:
        command.run_from_argv(["manage.py", name, *argv])
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    return status, out.getvalue(), err.getvalue()


def test_create_tenant() -> None:
    status, out, _ = _run("create_tenant", "--name", "Acme Corp", "--slug", "acme")
    assert status == 0 and "acme" in out
    assert Tenant.objects.get(slug="acme").name == "Acme Corp"


def test_create_tenant_duplicate_and_invalid_slug_exit_2(tenant_factory) -> None:
    tenant_factory(slug="taken")
    status, _, err = _run("create_tenant", "--name", "X", "--slug", "taken")
    assert status == 2 and "already exists" in err
    status, _, err = _run("create_tenant", "--name", "X", "--slug", "not a slug!")
    assert status == 2 and "slug" in err.lower()


def test_create_api_key_prints_a_working_key_once(tenant_factory) -> None:
    tenant = tenant_factory(slug="acme")
    status, out, err = _run(
        "create_api_key",
        "--tenant",
        "acme",
        "--name",
        "ci",
        "--tier",
        "warm",
        "--expires-days",
        "3",
    )
    assert status == 0
    plaintext = out.strip()
    api_key = api_key_resolve(plaintext, touch=False)
    assert api_key.tenant == tenant and api_key.default_tier == "warm" and api_key.name == "ci"
    assert api_key.expires_at is not None
    assert plaintext not in err  # the secret is on stdout only, once


def test_create_api_key_unknown_tenant_exits_2() -> None:
    status, out, err = _run("create_api_key", "--tenant", "nope")
    assert status == 2
    assert "Unknown tenant 'nope'" in err and out == ""
    assert not ApiKey.objects.exists()


def test_call_command_raises_with_returncode_2() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as excinfo:
        call_command("create_api_key", "--tenant", "missing")
    assert excinfo.value.returncode == 2
