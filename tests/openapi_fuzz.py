"""schemathesis against a live Laser, shared by ``tests/test_openapi_fuzz.py`` (a bounded run in
``make test``) and ``bench/fuzz_api.py`` (a longer one).

Every operation of the published schema (``/v1/openapi.json``) gets ``examples`` positive
requests (bodies and parameters the schema allows) and ``examples`` negative ones (that it does
not), sent with a valid API key. Each response must pass: no 5xx, the documented status codes,
the documented response schema, and OpenAI's error object on every 4xx. Failures are collected
(not raised at the first one) so one run lists them all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

# Generated completions stay short: the check is about the HTTP contract, not about tokens.
MAX_GENERATED_TOKENS = 8


def openai_error_shape(ctx: Any, response: Any, case: Any) -> None:
    """Every 4xx/5xx body is ``{"error": {"message": str, "type": str, "param", "code"}}``."""
    if response.status_code < 400:
        return None
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError) as exc:
        raise AssertionError(f"{response.status_code} without an OpenAI error body: "
                             f"{response.content[:200]!r}") from exc
    missing = {"message", "type", "param", "code"} - set(error)
    if missing or not isinstance(error["message"], str) or not isinstance(error["type"], str):
        raise AssertionError(f"malformed error object {error!r}")
    return None


CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance,
          openai_error_shape]


@dataclass
class Report:
    requests: int = 0
    statuses: dict[str, dict[int, int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def count(self, label: str, status: int) -> None:
        self.requests += 1
        per_op = self.statuses.setdefault(label, {})
        per_op[status] = per_op.get(status, 0) + 1


def _shorten(case: Any, known: dict[str, str]) -> None:
    """Cap the tokens a generated completion asks for, and name the real input file in a batch
    (a body the schema allows stays one)."""
    body = case.body if isinstance(case.body, dict) else None
    if body is not None and "input_file_id" in body and "file_id" in known:
        body["input_file_id"] = known["file_id"]
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if body is not None and isinstance(body.get(name), int) and not isinstance(
                body.get(name), bool) and body[name] > MAX_GENERATED_TOKENS:
            body[name] = MAX_GENERATED_TOKENS


def _failure(case: Any, response: Any, exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    summary = " | ".join(line for line in text[:6] if line.strip())
    return (f"{case.operation.label} -> {response.status_code}: {summary}\n"
            f"    {case.as_curl_command()[:600]}")


def fuzz_operation(operation: Any, *, base_url: str, headers: dict[str, str], examples: int,
                   mode: GenerationMode, report: Report, derandomize: bool = False,
                   path_parameters: dict[str, str] | None = None,
                   known: dict[str, str] | None = None) -> None:
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

    @settings(max_examples=examples, deadline=None, database=None, derandomize=derandomize,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def one(case: Any) -> None:
        if mode is GenerationMode.POSITIVE:
            _shorten(case, known or {})
        response = case.call(base_url=base_url, headers=headers, timeout=60)
        report.count(operation.label, response.status_code)
        try:
            case.validate_response(response, checks=CHECKS, headers=headers)
        except (Exception, BaseExceptionGroup) as exc:  # a group of check failures
            report.failures.append(_failure(case, response, exc))

    one()


def make_world(tenant: Any, api_key: Any, raw_key: str) -> dict[str, str]:
    """Contracts for every tier, an uploaded file and a batch for ``tenant``: what positive
    cases name in their paths. Batch tasks are not enqueued (call with dispatch patched)."""
    from django.conf import settings

    from apps.batches.files import file_create
    from apps.batches.services import batch_create
    from apps.slo.services import contract_create

    for tier in ("hot", "warm", "cold"):
        contract_create(tenant=tenant, tier=tier)
    line = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    uploaded = file_create(tenant=tenant, filename="in.jsonl", content=line, purpose="batch")
    batch = batch_create(tenant=tenant, api_key=api_key, input_file_id=uploaded.uid,
                         endpoint="/v1/chat/completions", completion_window="24h")
    return {"key": raw_key, "file_id": uploaded.uid, "batch_id": batch.uid,
            "model_id": settings.LASER_SERVED_MODEL_ID}


PATH_PARAMETERS = ("file_id", "batch_id", "model_id")


def fuzz(base_url: str, api_key: str, *, examples: int, path_parameters: dict[str, str],
         paths: Iterable[str] | None = None, skip: Iterable[str] = (),
         derandomize: bool = False) -> Report:
    """Run every operation (only those on ``paths`` when given, none on ``skip``) both ways;
    ``derandomize``: the same examples on every run (a reproducible test)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/v1/openapi.json")
    headers = {"Authorization": f"Bearer {api_key}"}
    report = Report()
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in sorted(operations, key=lambda op: op.method.upper() == "DELETE"):
        if (paths is not None and operation.path not in paths) or operation.path in skip:
            continue
        # Positive cases name real objects; negative ones get generated (unknown) ids.
        known = {k: v for k, v in path_parameters.items() if f"{{{k}}}" in operation.path}
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            params = (known or None) if mode is GenerationMode.POSITIVE else None
            fuzz_operation(operation, base_url=base_url, headers=headers, examples=examples,
                           mode=mode, report=report, path_parameters=params,
                           derandomize=derandomize, known=path_parameters)
    return report


def fuzz_links(base_url: str, api_key: str, *, scenarios: int, steps: int) -> Report:
    """schemathesis's stateful run over the Files and Batches operations, following the
    schema's links (upload -> content, upload -> batch -> retrieve / cancel) with the same
    checks. Random, not derandomized: the steps draw from earlier responses, which
    Hypothesis cannot replay; it sometimes stops a run with ``FlakyStrategyDefinition`` for
    that reason, so this runs in ``bench/fuzz_api.py --links``, not in ``make test``.
    Failures are collected in the report."""
    from hypothesis import settings as hypothesis_settings

    schema = schemathesis.openapi.from_url(f"{base_url}/v1/openapi.json")
    schema = schema.include(path_regex="^/v1/(files|batches)")
    headers = {"Authorization": f"Bearer {api_key}"}
    report = Report()

    class Scenario(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": base_url, "headers": headers, "timeout": 60}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None,
                              **kwargs: Any) -> None:
            report.count(case.operation.label, response.status_code)
            try:
                case.validate_response(response, checks=CHECKS, headers=headers)
            except (Exception, BaseExceptionGroup) as exc:  # collected, not replayed
                report.failures.append(_failure(case, response, exc))

    Scenario.run(settings=hypothesis_settings(
        max_examples=scenarios, stateful_step_count=steps, deadline=None, database=None,
        phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
    return report
