"""OpenAI request bodies -> ``EngineRequest`` plus the response options the views need.

The one place that decides whether a body is acceptable: the REST views, the WebSocket consumer
and the batch validator all call ``parse_chat_request`` / ``parse_completion_request``, so a batch
line is refused exactly when the live endpoint would refuse it. Every problem raises
``BadRequestError`` (400) naming the offending parameter; unknown fields are ignored; OpenAI
features Laser does not implement are refused, never silently dropped.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from apps.core.errors import APIError, BadRequestError, NotFoundError
from apps.core.tiers import TIERS
from apps.gateway import constraints, features, tool_calls
from apps.gateway.constraints import ToolUse
from inference.errors import InvalidParameter
from inference.request import EngineRequest, Profile, SamplingParams, Tier

CHAT = "chat.completions"
COMPLETIONS = "completions"
# OpenAI's `service_tier` values plus Laser's own tier names; everything else is a 400.
SERVICE_TIERS = {"auto": None, "default": None, "priority": Tier.HOT, "flex": Tier.COLD,
                 **{tier.value: tier for tier in TIERS}}
MAX_COMPLETION_LOGPROBS = 5


@dataclass(slots=True)
class ParsedRequest:
    """A validated request: what the engine runs, and how the caller wants the answer.

    ``max_tokens_given`` is False when the client left the length open; the view may then shrink
    ``max_tokens`` to what the context has left instead of refusing the request.
    """

    engine_request: EngineRequest
    endpoint: str
    model: str
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    max_tokens_given: bool = True
    user: str | None = None
    tools: ToolUse | None = None  # the answer is read for tool calls when ``tools.calls``

    @property
    def request_id(self) -> str:
        return self.engine_request.request_id

    @property
    def tier(self) -> Tier:
        return self.engine_request.tier


def served_model_id() -> str:
    """The model id `/v1/models` lists and requests must name."""
    return settings.LASER_SERVED_MODEL_ID


def bad(param: str, message: str, code: str | None = "invalid_value") -> BadRequestError:
    return BadRequestError(message, param=param, code=code)


def parse_chat_request(body: Any, *, tenant: Any, contract: Any,
                       request_id: str | None = None, deadline: float | None = None,
                       session_id: str | None = None) -> ParsedRequest:
    """Validate a `/v1/chat/completions` body; raise ``APIError`` 400 naming the parameter."""
    body = _require_object(body)
    features.refuse_unsupported(body, CHAT)
    messages = _messages(body.get("messages"))
    logprobs = _optional(body, "logprobs", bool, False)
    top_logprobs = _optional(body, "top_logprobs", int, 0)
    if top_logprobs and not logprobs:
        raise bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.")
    max_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    tools = constraints.tool_use(body)
    parsed = _build(body, CHAT, tenant=tenant, contract=contract, messages=messages,
                    request_id=request_id or f"chatcmpl-{uuid.uuid4().hex}", deadline=deadline,
                    session_id=session_id, logprobs=logprobs, top_logprobs=top_logprobs,
                    max_key=max_key)
    constrain(parsed, tools, body.get("response_format"))
    return parsed


def constrain(parsed: ParsedRequest, tools: ToolUse | None, response_format: Any,
              param: str = "response_format") -> None:
    """Set the request's tools and constraint: a required or named tool call's grammar, else
    the response format's; ``tool_choice: none`` shows no tools."""
    request = parsed.engine_request
    parsed.tools = tools
    if tools is not None and tools.calls:
        request.tools = list(tools.tools)
    request.constraint = (tools.constraint() if tools is not None else None) or \
        constraints.response_format(response_format, param)


def parse_completion_request(body: Any, *, tenant: Any, contract: Any,
                             request_id: str | None = None, deadline: float | None = None,
                             session_id: str | None = None) -> ParsedRequest:
    """Validate a `/v1/completions` body; raise ``APIError`` 400 naming the parameter."""
    body = _require_object(body)
    features.refuse_unsupported(body, COMPLETIONS)
    prompt, token_ids = _prompt(body.get("prompt"))
    raw_logprobs = _optional(body, "logprobs", int, None)
    if raw_logprobs is not None and not 0 <= raw_logprobs <= MAX_COMPLETION_LOGPROBS:
        raise bad("logprobs", f"'logprobs' must be between 0 and {MAX_COMPLETION_LOGPROBS}.")
    return _build(body, COMPLETIONS, tenant=tenant, contract=contract, prompt=prompt,
                  prompt_token_ids=token_ids,
                  request_id=request_id or f"cmpl-{uuid.uuid4().hex}", deadline=deadline,
                  session_id=session_id, logprobs=raw_logprobs is not None,
                  top_logprobs=raw_logprobs or 0, max_key="max_tokens")


# ---- shared building ---------------------------------------------------------------------


def _build(body: dict, endpoint: str, *, tenant: Any, contract: Any, request_id: str,
           deadline: float | None, session_id: str | None, logprobs: bool, top_logprobs: int,
           max_key: str, messages: list[dict] | None = None, prompt: str | None = None,
           prompt_token_ids: list[int] | None = None) -> ParsedRequest:
    model = _model(body.get("model"))
    stream = _optional(body, "stream", bool, False)
    include_usage = _stream_options(body.get("stream_options"), stream)
    max_tokens = _optional(body, max_key, int, None)
    sampling = _sampling(body, max_tokens, max_key, logprobs, top_logprobs)
    tier = Tier(_contract_tier(contract))
    try:
        request = EngineRequest(
            request_id=request_id, sampling=sampling, prompt=prompt, messages=messages,
            prompt_token_ids=prompt_token_ids, tier=tier, tenant_id=str(tenant.pk),
            targets=contract.targets, deadline=deadline, session_id=session_id,
            profile=Profile.for_tier(tier, 0, sampling.max_tokens),
        )
    except InvalidParameter as exc:
        raise from_invalid_parameter(exc) from exc
    user = _optional(body, "user", str, None)
    return ParsedRequest(request, endpoint, model, stream, include_usage, logprobs, top_logprobs,
                         max_tokens is not None, user)


def _sampling(body: dict, max_tokens: int | None, max_key: str, logprobs: bool,
              top_logprobs: int) -> SamplingParams:
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list):
        stop = tuple(stop)
    else:
        raise bad("stop", "'stop' must be a string or a list of strings.")
    values: dict[str, Any] = {"stop": stop, "logprobs": logprobs, "top_logprobs": top_logprobs}
    values["max_tokens"] = max_tokens if max_tokens is not None \
        else settings.LASER_DEFAULT_MAX_TOKENS
    for name in ("temperature", "top_p", "n", "seed", "presence_penalty", "frequency_penalty"):
        if body.get(name) is not None:
            values[name] = _integral(body[name]) if name in ("n", "seed") else body[name]
    try:
        return SamplingParams(**values)
    except InvalidParameter as exc:
        if exc.param == "max_tokens":
            exc = InvalidParameter(max_key, exc.message.replace("max_tokens", max_key))
        raise from_invalid_parameter(exc) from exc


def from_invalid_parameter(exc: InvalidParameter) -> APIError:
    """The engine's ``InvalidParameter`` (and ``PromptTooLong``) as a 400 naming the param."""
    from inference.errors import PromptTooLong

    code = "context_length_exceeded" if isinstance(exc, PromptTooLong) else "invalid_value"
    return bad(exc.param, exc.message, code)


def _require_object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise BadRequestError("The request body must be a JSON object.", code="invalid_json")
    return body


def _integral(value: Any) -> Any:
    """1.0 is an integer (JSON and JSON Schema say so): an integral float as an int."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _optional(body: dict, name: str, kind: type, default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if kind is int:
        value = _integral(value)
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise bad(name, f"'{name}' must be of type {kind.__name__}, got {type(value).__name__}.",
                  "invalid_type")
    return value


def _model(value: Any) -> str:
    if value is None:
        raise bad("model", "You must provide a model parameter.", "missing_required_parameter")
    if not isinstance(value, str):
        raise bad("model", "'model' must be a string.", "invalid_type")
    if value != served_model_id():
        raise NotFoundError(f"The model '{value}' does not exist. This server serves "
                            f"'{served_model_id()}'.", param="model", code="model_not_found")
    return value


def _stream_options(value: Any, stream: bool) -> bool:
    if value is None:
        return False
    if not stream:
        raise bad("stream_options", "'stream_options' is only allowed when 'stream' is true.")
    if not isinstance(value, dict):
        raise bad("stream_options", "'stream_options' must be an object.", "invalid_type")
    include = _optional(value, "include_usage", bool, False)
    return include


def service_tier(value: Any) -> Tier | None:
    """The tier a request's ``service_tier`` names (``priority`` = hot, ``flex`` = cold, or a
    tier's own name); ``None`` when absent, ``auto`` or ``default``. Else a 400 naming it.

    The one check of the parameter: admission resolves the tier with it before the body is
    parsed (the parse needs the tier's contract)."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in SERVICE_TIERS:
        raise bad("service_tier", f"'service_tier' must be one of {sorted(SERVICE_TIERS)}.")
    return SERVICE_TIERS[value]


def _contract_tier(contract: Any) -> str:
    return str(getattr(contract, "tier"))


def _messages(value: Any) -> list[dict]:
    if value is None:
        raise bad("messages", "'messages' is required.", "missing_required_parameter")
    if not isinstance(value, list) or not value:
        raise bad("messages", "'messages' must be a non-empty array.")
    return [_message(i, m) for i, m in enumerate(value)]


_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "tool": "tool"}


def _message(i: int, message: Any) -> dict:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise bad(where, f"'{where}' must be an object.", "invalid_type")
    role = message.get("role")
    if role == "function":
        raise bad(f"{where}.role", "'function' messages are not supported: use 'tool'.",
                  "unsupported_parameter")
    if not isinstance(role, str) or role not in _ROLES:
        raise bad(f"{where}.role", f"'{where}.role' must be one of {sorted(_ROLES)}.")
    for key in ("function_call", "audio"):
        if message.get(key) is not None:
            raise bad(f"{where}.{key}", f"'{key}' in messages is not supported.",
                      "unsupported_parameter")
    calls = message.get("tool_calls")
    content = message.get("content")
    if content is None and (calls or role == "assistant"):
        content = ""  # an assistant turn that only called tools
    out: dict[str, Any] = {"role": _ROLES[role], "content": _content(where, content)}
    if calls is not None:
        if role != "assistant":
            raise bad(f"{where}.tool_calls", "only assistant messages carry 'tool_calls'.")
        out["tool_calls"] = tool_calls.message_calls(calls, f"{where}.tool_calls")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise bad(f"{where}.tool_call_id", f"'{where}.tool_call_id' must be a string.",
                      "missing_required_parameter")
        out["tool_call_id"] = call_id
    return out


def _content(where: str, content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"{where}.content", f"'{where}.content' must be a string or an array of "
                  "text parts.", "invalid_type")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise bad(f"{where}.content[{j}].type", f"content part type '{kind}' is not "
                      "supported: this model reads text only.", "unsupported_parameter")
        if not isinstance(part.get("text"), str):
            raise bad(f"{where}.content[{j}].text", "a text part needs a string 'text'.")
        texts.append(part["text"])
    return "".join(texts)


def _prompt(value: Any) -> tuple[str | None, list[int] | None]:
    if value is None:
        raise bad("prompt", "'prompt' is required.", "missing_required_parameter")
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one prompt
    if isinstance(value, str):
        if not value:
            raise bad("prompt", "'prompt' must not be empty.")
        return value, None
    if isinstance(value, list):
        value = [_integral(t) for t in value]
    if isinstance(value, list) and value and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        return None, list(value)
    if isinstance(value, list) and len(value) > 1:
        raise bad("prompt", "Only one prompt per request is supported; send several requests "
                  "or use the Batch API.", "unsupported_parameter")
    raise bad("prompt", "'prompt' must be a string, or an array of token ids.", "invalid_type")
