"""Validation of a batch input file, as OpenAI does it.

File-level problems (a line that is not a JSON object, a missing or duplicate ``custom_id``, a
``method`` other than POST, a ``url`` other than the batch's endpoint, too many lines) fail the
whole batch with ``errors.data`` entries naming the line. A well-formed line whose *body* the
live endpoint would refuse is line-level: it goes to the error file with the same 4xx response
the endpoint would give, because the gateway's own parser decides (``apps.gateway.params``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from apps.core.errors import APIError
from apps.core.jsonbody import BadText, loads_bounded
from apps.gateway.serving import parse_chat_request, parse_completion_request

ENDPOINTS: dict[str, Callable[..., Any]] = {
    "/v1/chat/completions": parse_chat_request,
    "/v1/completions": parse_completion_request,
}
MAX_CUSTOM_ID = 512
# Enough for a person to fix a file; a file with a million bad lines needs no million errors.
MAX_FILE_ERRORS = 100
PROGRESS_EVERY = 200  # requests checked between two progress reports


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


def _refusal(body: dict, endpoint: str, *, tenant: Any, contract: Any) -> APIError | None:
    try:
        ENDPOINTS[endpoint](body, tenant=tenant, contract=contract)
    except APIError as exc:
        return exc
    return None


def _parse_line(raw: bytes, line_no: int) -> tuple[Any, dict | None]:
    """The JSON value of one line, or the file-level error saying why it has none. Lines are
    stored (PostgreSQL's jsonb): a lone surrogate or a NUL anywhere fails the file, naming
    the field."""
    try:
        return loads_bounded(raw.decode("utf-8"), nul_ok=False), None
    except BadText as exc:
        field = exc.param.split(".", 1)[0].split("[", 1)[0]
        code = {"custom_id": "invalid_custom_id", "body": "invalid_body"}.get(field,
                                                                             "invalid_json_line")
        return None, _error(code, f"{exc}.", line_no, exc.param)
    except UnicodeDecodeError:
        return None, _error("invalid_file", "The file is not UTF-8 text.", line_no)
    except ValueError as exc:  # malformed, or nested past LASER_MAX_JSON_DEPTH
        return None, _error("invalid_json_line", f"Invalid JSON: {exc}.", line_no)


def validate_input(content: bytes | Iterable[bytes], *, endpoint: str, tenant: Any,
                   contract: Any, progress: Callable[[int], None] | None = None) -> Validated:
    """Check every line of ``content`` (the file, or its lines) for ``endpoint``; see the
    module docstring. Lines end at ``\n`` only: U+2028 and friends are valid inside JSON
    strings, so ``str.splitlines`` would cut a good line in two. ``progress(n)`` is called
    every ``PROGRESS_EVERY`` requests checked."""
    result = Validated()
    lines = content.split(b"\n") if isinstance(content, bytes) else content
    seen: set[str] = set()
    checked = 0
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        checked += 1
        if progress is not None and checked % PROGRESS_EVERY == 0:
            progress(checked)
        if len(result.errors) >= MAX_FILE_ERRORS:
            break
        row, problem = _parse_line(raw, line_no)
        if problem is None:
            problem = _check_envelope(row, line_no, endpoint)
        if problem is None and row["custom_id"] in seen:
            problem = _error("duplicate_custom_id",
                             f"The custom_id '{row['custom_id']}' appears more than once.",
                             line_no, "custom_id")
        if problem is not None:
            result.errors.append(problem)
            if problem["code"] == "invalid_file":
                break
            continue
        seen.add(row["custom_id"])
        refusal = _refusal(row["body"], endpoint, tenant=tenant, contract=contract)
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
