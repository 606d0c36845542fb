"""A tenant made with ``create_tenant`` works at once: its first key answers a chat (live
server, the official SDK, the tiny test model), because the tenant starts with its plan's
default contracts."""

from __future__ import annotations

import io

import openai
import pytest
from django.core.management import call_command

from tests.apps.gateway.conftest import (  # noqa: F401 (fixtures)
    _tiny_engine,
    laser_server,
    tiny_engine,
    tiny_model_path,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _reports_flushed_here(settings):
    """Records are written by this test, not by the writer thread once the database is gone."""
    from apps.slo.services import flush_reports

    settings.LASER_SLO_AUTOFLUSH = False
    yield
    flush_reports()


def test_a_new_tenants_first_key_answers_a_chat(request):
    server = request.getfixturevalue("laser_server")  # the gateway tests' live server
    request.getfixturevalue("tiny_engine")  # ... serving the tiny model
    call_command("create_tenant", "--name", "Newco", "--slug", "newco", stdout=io.StringIO())
    out = io.StringIO()
    call_command("create_api_key", "--tenant", "newco", stdout=out, stderr=io.StringIO())
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=out.getvalue().strip(),
                           max_retries=0, timeout=60)
    for tier in (None, "priority", "warm"):
        extra = {} if tier is None else {"service_tier": tier}
        reply = client.chat.completions.create(
            model="smollm2-135m-instruct", messages=[{"role": "user", "content": "hi"}],
            max_tokens=4, temperature=0, **extra)
        assert reply.usage.completion_tokens == 4 and reply.choices[0].message.content
