"""Validation of a batch input file, as OpenAI does it.

File-level problems (a line that is not a JSON object, a missing or duplicate ``custom_id``, a
``method`` other than POST, a ``url`` other than the batch's endpoint, too many lines) fail the
whole batch with ``errors.data`` entries naming the line. A well-formed line whose *body* the
live endpoint would refuse is line-level: it goes to the error file with the same 4xx response
the endpoint would give, because the gateway's own parser decides (``apps.gateway.params``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from apps.gateway.serving import parse_chat_request, parse_completion_request
from laser_platform.errors import APIError

ENDPOINTS: dict[str, Callable[..., Any]] = {
    "/v1/chat/completions": parse_chat_request,
    "/v1/completions": parse_completion_request,
}
MAX_CUSTOM_ID = 512
# Enough for a person to fix a file; a file with a million bad lines needs no million errors.
MAX_FILE_ERRORS = 100


@dataclass(slots=True)
class InputLine:
    line_no: int
    custom_id: str
    body: dict
    # The 4xx the endpoint answers for this body, or None when the line can run.
    refusal: APIError | None = None


@dataclass(slots=True)
class Validated:
    lines: list[InputLine] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _error(code: str, message: str, line: int | None, param: str | None = None) -> dict:
    return {"code": code, "message": message, "param": param, "line": line}


def _check_envelope(row: Any, line_no: int, endpoint: str) -> dict | None:
    """The file-level error of one parsed line, or None when its envelope is fine."""
    if not isinstance(row, dict):
        return _error("invalid_json_line", "Each line must be a JSON object.", line_no)
    for name in ("custom_id", "method", "url", "body"):
        if name not in row:
            return _error("missing_required_parameter", f"Missing '{name}'.", line_no, name)
    custom_id = row["custom_id"]
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        return _error("invalid_custom_id",
                      f"'custom_id' must be a non-empty string of at most {MAX_CUSTOM_ID} "
                      "characters.", line_no, "custom_id")
    if row["method"] != "POST":
        return _error("invalid_method", "'method' must be 'POST'.", line_no, "method")
    if row["url"] != endpoint:
        return _error("mismatched_endpoint",
                      f"The url '{row['url']}' does not match the batch endpoint '{endpoint}'.",
                      line_no, "url")
    if not isinstance(row["body"], dict):
        return _error("invalid_body", "'body' must be a JSON object.", line_no, "body")
    return None


def _refusal(body: dict, endpoint: str, *, tenant: Any, api_key: Any,
             contract: Any) -> APIError | None:
    try:
        ENDPOINTS[endpoint](body, tenant=tenant, api_key=api_key, contract=contract)
    except APIError as exc:
        return exc
    return None


def validate_input(content: bytes, *, endpoint: str, tenant: Any, api_key: Any,
                   contract: Any) -> Validated:
    """Check every line of ``content`` for ``endpoint``; see the module docstring."""
    result = Validated()
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        result.errors.append(_error("invalid_file", "The file is not UTF-8 text.", None))
        return result
    seen: set[str] = set()
    for line_no, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(result.errors) >= MAX_FILE_ERRORS:
            break
        try:
            row = json.loads(raw)
        except ValueError as exc:
            result.errors.append(_error("invalid_json_line", f"Invalid JSON: {exc}.", line_no))
            continue
        problem = _check_envelope(row, line_no, endpoint)
        if problem is None and row["custom_id"] in seen:
            problem = _error("duplicate_custom_id",
                             f"The custom_id '{row['custom_id']}' appears more than once.",
                             line_no, "custom_id")
        if problem is not None:
            result.errors.append(problem)
            continue
        seen.add(row["custom_id"])
        refusal = _refusal(row["body"], endpoint, tenant=tenant, api_key=api_key,
                           contract=contract)
        result.lines.append(InputLine(line_no, row["custom_id"], row["body"], refusal))
    _check_totals(result)
    return result


def _check_totals(result: Validated) -> None:
    limit = settings.LASER_BATCH_MAX_LINES
    if len(result.lines) > limit:
        result.errors.append(_error("too_many_tasks",
                                    f"The file has {len(result.lines)} requests; the limit is "
                                    f"{limit}.", None))
    if not result.lines and not result.errors:
        result.errors.append(_error("empty_file", "The file contains no requests.", None))
