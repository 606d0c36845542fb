"""The engine's typed errors as API errors: the one mapping, used by REST, SSE, WebSocket and
batch lines. Anything else is a fault of ours: a 500, logged with its traceback and request id
(``apps.core.errors.server_error``)."""

from __future__ import annotations

from apps.core.errors import APIError, EngineOverloadedError, server_error
from inference.errors import (
    AdmissionRefused,
    EngineError,
    EngineOverloaded,
    EngineUnavailable,
    InvalidParameter,
)


class AbortedByServer(APIError):
    """The engine ended a choice with ``abort``: not a natural finish."""

    status, type, code = 503, "server_error", "aborted"

    def __init__(self) -> None:
        super().__init__("The request was aborted by the server.", headers={"Retry-After": "1"})


class RefusedByServer(EngineOverloadedError):
    """The engine refused a request it had admitted, before its first token (overload: it was
    demoted, then waited past warm's bound): a refusal, booked as ``rejected_503``."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"The engine is saturated ({reason}); retry shortly.", retry_after=2.0)


def ended_early(refusal: str | None) -> APIError:
    """The error for a choice the engine ended with ``abort``: ``RefusedByServer`` when the
    engine refused it (``refusal`` says why), else ``AbortedByServer``."""
    return AbortedByServer() if refusal is None else RefusedByServer(refusal)


def api_error(exc: BaseException, *, max_tokens_param: str = "max_tokens") -> APIError:
    """``APIError`` for any exception: engine errors mapped, anything else a 500."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, InvalidParameter):
        from apps.gateway.params import from_invalid_parameter

        if exc.param == "max_tokens" and max_tokens_param != "max_tokens":
            exc.param = max_tokens_param
        return from_invalid_parameter(exc)
    if isinstance(exc, EngineOverloaded):
        return EngineOverloadedError(f"The engine is saturated ({exc.reason}); retry shortly.",
                                     retry_after=exc.retry_after_s or 1.0)
    if isinstance(exc, AdmissionRefused):
        return EngineOverloadedError(f"The engine refused the request: {exc.reason}.",
                                     retry_after=exc.retry_after_s, code="admission_refused")
    if isinstance(exc, EngineUnavailable):
        return EngineOverloadedError(f"The engine is unavailable: {exc}.", retry_after=1.0,
                                     code="engine_unavailable")
    if isinstance(exc, EngineError):
        return server_error(exc, where="the engine", message=f"The engine failed: {exc}",
                            code="engine_error")
    return server_error(exc, where="the serving path")
