"""Project-wide fixtures. Keep this small: app-specific fixtures live beside their tests."""

from __future__ import annotations

import itertools
import os

# Triton reads its interpreter switch when first imported, and other tests' imports (torch's
# dynamo, the engine) may import it before tests/kernels/conftest.py runs; `make test` sets it too.
os.environ.setdefault("TRITON_INTERPRET", "1")
from collections.abc import Callable
from typing import Any

import pytest

_counter = itertools.count(1)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing(reason: str) -> None:
    """Under CI a missing service is a failure; on a laptop, a skip with the reason."""
    if _in_ci():
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def postgres_problem() -> str | None:
    from django.db import connection

    if connection.vendor != "postgresql":
        return "needs PostgreSQL: set DATABASE_URL=postgres://..."
    return None


def redis_problem() -> str | None:
    url = os.environ.get("REDIS_URL", "")
    if not url:
        return "needs Redis: set REDIS_URL=redis://..."
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        return f"Redis at {url} does not answer: {exc}"
    return None


@pytest.fixture
def require_postgres() -> None:
    if (problem := postgres_problem()) is not None:
        _missing(problem)


@pytest.fixture
def require_redis() -> None:
    if (problem := redis_problem()) is not None:
        _missing(problem)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # The `postgres` / `redis` markers (pyproject.toml) apply the same rule as the fixtures.
    if item.get_closest_marker("postgres") and (problem := postgres_problem()):
        _missing(problem)
    if item.get_closest_marker("redis") and (problem := redis_problem()):
        _missing(problem)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Give each test run its own PostgreSQL test database, so runs sharing one server (the
    team's machine, CI retries) never collide on ``test_<name>``."""
    from django.conf import settings

    for db in settings.DATABASES.values():
        if db["ENGINE"].endswith("sqlite3"):
            continue  # in-memory test databases are private already
        test = db.setdefault("TEST", {})
        test["NAME"] = f"{test.get('NAME') or 'test_' + db['NAME']}_{os.getpid()}"


@pytest.fixture
def tenant_factory(db: None) -> Callable[..., Any]:
    from apps.tenants.services import tenant_create

    def make(*, name: str | None = None, slug: str | None = None, **kwargs: Any) -> Any:
        # Bare by default: tests make the contracts they need. ``default_contracts=True`` gives
        # the plan's default contracts, as every tenant created outside tests gets.
        kwargs.setdefault("default_contracts", False)
        n = next(_counter)
        return tenant_create(name=name or f"Tenant {n}", slug=slug or f"tenant-{n}", **kwargs)

    return make


@pytest.fixture
def plan_for(db: None) -> Callable[..., Any]:
    """``plan_for(tenant, max_inflight_per_key=1, ...)``: put ``tenant`` on a plan of its own
    with these limits (the model's defaults for the rest); returns the plan."""
    from apps.tenants.models import Plan, Tenant

    def put(tenant: Any, **limits: Any) -> Any:
        plan = Plan.objects.create(name=f"Plan {next(_counter)}", **limits)
        Tenant.objects.filter(pk=tenant.pk).update(plan=plan)
        tenant.plan = plan
        return plan

    return put


@pytest.fixture
def user_factory(db: None) -> Callable[..., Any]:
    """``user_factory(tenant=..., role="admin", is_staff=True)``. No usable password unless
    ``password=`` is given (hashing one costs ~0.3 s; tests log in with ``force_login``)."""
    from django.contrib.auth import get_user_model

    from apps.tenants.services import member_add

    def make(
        *,
        username: str | None = None,
        tenant: Any = None,
        role: str = "member",
        password: str | None = None,
        **fields: Any,
    ) -> Any:
        user = get_user_model().objects.create_user(
            username=username or f"user{next(_counter)}", password=password, **fields
        )
        if tenant is not None:
            member_add(tenant=tenant, user=user, role=role)
        return user

    return make


@pytest.fixture
def api_key_factory(tenant_factory: Callable[..., Any]) -> Callable[..., tuple[Any, str]]:
    """``api_key_factory(tenant=None, **kw) -> (ApiKey, plaintext)``; makes a tenant if needed."""
    from apps.tenants.services import api_key_create

    def make(*, tenant: Any = None, **kwargs: Any) -> tuple[Any, str]:
        return api_key_create(tenant=tenant or tenant_factory(), **kwargs)

    return make
