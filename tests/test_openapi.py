"""The published schema (``/v1/openapi.json``) against what the server really does: every API
route is in it, and the hand-written request schemas of the plain async views agree with the
parsers in ``apps.gateway.params`` (the fields they read, what they accept, what they refuse).
The live side, schemathesis against a running server, is ``tests/test_openapi_fuzz.py``."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, assume, given, settings

from apps.core.errors import APIError
from apps.gateway.params import parse_chat_request, parse_completion_request, service_tier
from inference.request import ContractTargets

PARSERS = {"ChatCompletionRequest": parse_chat_request,
           "CompletionRequest": parse_completion_request}
MINIMAL = {"ChatCompletionRequest": {"messages": [{"role": "user", "content": "hi"}]},
           "CompletionRequest": {"prompt": "hi"}}
CONTRACT = SimpleNamespace(tier="hot", targets=ContractTargets(), version_id=1)
TENANT = SimpleNamespace(pk=1)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    response = Client(HTTP_HOST="localhost").get("/v1/openapi.json")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/vnd.oai.openapi+json"
    return response.json()


def _api_routes(resolver: URLResolver, prefix: str = "") -> set[str]:
    routes: set[str] = set()
    for entry in resolver.url_patterns:
        pattern = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            routes |= _api_routes(entry, pattern)
        elif isinstance(entry, URLPattern) and pattern.startswith(("v1/", "api/")):
            routes.add("/" + pattern.replace("<str:", "{").replace("<path:", "{")
                       .replace(">", "}"))
    return routes - {"/v1/openapi.json"}


def test_every_api_route_is_published(schema):
    assert schema["openapi"].startswith("3.1")
    assert _api_routes(get_resolver()) == set(schema["paths"])
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert operation["responses"]["200"], (method, path)
            errors = {code for code in operation["responses"] if code >= "400"}
            assert "401" in errors, f"{method} {path} documents no 401"


def _model() -> str:
    from django.conf import settings as django_settings

    return django_settings.LASER_SERVED_MODEL_ID


class Recording(dict):
    """A body that remembers every key the parser looked up."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: Any) -> bool:
        self.read.add(key)
        return super().__contains__(key)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)


@pytest.mark.parametrize("name", list(PARSERS))
def test_every_field_the_parser_reads_is_documented_and_nothing_else(schema, name):
    body = Recording({"model": _model(), **MINIMAL[name]})
    _parse(name, body)
    documented = set(schema["components"]["schemas"][name]["properties"])
    assert body.read == documented


def _parse(name: str, body: Any) -> Any:
    """What the serving path reads of a body before the engine: ``service_tier`` (admission
    resolves the tier first), then the rest (the parser)."""
    service_tier(body.get("service_tier"))
    return PARSERS[name](body, tenant=TENANT, contract=CONTRACT)


def _strategy(schema: dict[str, Any], path: str):
    import schemathesis

    loaded = schemathesis.openapi.from_dict(json.loads(json.dumps(schema)))
    return loaded[path]["POST"].as_strategy()


@pytest.mark.parametrize(("name", "path"), [("ChatCompletionRequest", "/v1/chat/completions"),
                                            ("CompletionRequest", "/v1/completions")])
def test_bodies_the_schema_allows_are_bodies_the_parser_accepts(schema, name, path):
    @settings(max_examples=30, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=_strategy(schema, path))
    def check(case: Any) -> None:
        body = _as_ints(case.body)  # 1.0 -> 1: test_an_integral_float_is_an_integer
        assume(_names_a_given_tool(body))
        try:
            _parse(name, body)
        except APIError as exc:
            raise AssertionError(f"{body!r} refused: {exc!r}") from exc

    check()


def _names_a_given_tool(body: Any) -> bool:
    """A named ``tool_choice`` must name one of ``tools``: JSON Schema cannot say it."""
    choice = body.get("tool_choice") if isinstance(body, dict) else None
    if not isinstance(choice, dict):
        return True
    names = {t["function"]["name"] for t in body.get("tools") or ()}
    return choice["function"]["name"] in names


def _as_ints(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_ints(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


# JSON Schema and JSON itself call 1.0 an integer: the gateway accepts it where it reads one.
@pytest.mark.parametrize(("name", "field", "value"), [
    ("ChatCompletionRequest", "n", 1.0),
    ("ChatCompletionRequest", "max_tokens", 16.0),
    ("CompletionRequest", "prompt", [1.0, 2.0]),
])
def test_an_integral_float_is_an_integer(name, field, value):
    _parse(name, {"model": _model(), **MINIMAL[name], field: value})


# (JSON type, a value of that type), tried in this order for a type the field does not allow.
WRONG = [("object", {"a": 1}), ("array", [1]), ("string", "twelve"), ("boolean", True),
         ("number", 1.5)]


def _types(spec: dict[str, Any]) -> set[str]:
    found = set()
    for option in spec.get("anyOf", [spec]):
        kind = option.get("type")
        found |= {kind} if isinstance(kind, str) else set(kind or ())
        if "const" in option or "enum" in option:
            found.add("literal")
    return found


def _wrong_value(spec: dict[str, Any]) -> Any:
    """A JSON value of a type ``spec`` does not allow (a string for a literal)."""
    allowed = _types(spec)
    for kind, value in WRONG:
        if kind not in allowed:
            return value
    raise AssertionError(f"no wrong type for {spec}")


@pytest.mark.parametrize("name", list(PARSERS))
def test_a_value_outside_the_schema_is_refused_naming_the_field(schema, name):
    mismatches = []
    for field, spec in schema["components"]["schemas"][name]["properties"].items():
        wrong = "not-" + field if field == "model" else _wrong_value(spec)
        try:
            _parse(name, {"model": _model(), **MINIMAL[name], field: wrong})
        except APIError as exc:
            if exc.status in (400, 404) and (exc.param or "").split("[")[0] == field:
                continue
            mismatches.append((field, wrong, exc.status, exc.param))
        else:
            mismatches.append((field, wrong, "accepted"))
    assert not mismatches
