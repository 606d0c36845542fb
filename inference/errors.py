"""Typed errors the engine raises before or instead of doing work.

The gateway maps each to an HTTP status in one place; nothing here knows about HTTP.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class InvalidParameter(EngineError, ValueError):
    """A request field has a value the engine refuses; ``param`` names the field."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


class PromptTooLong(InvalidParameter):
    """Prompt tokens plus ``max_tokens`` do not fit the model's context."""

    def __init__(self, param: str, prompt_tokens: int, max_tokens: int, max_model_len: int):
        super().__init__(
            param,
            f"This model's maximum context length is {max_model_len} tokens; the request has "
            f"{prompt_tokens} prompt tokens and asks for {max_tokens} more.",
        )
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.max_model_len = max_model_len


class AdmissionRefused(EngineError):
    """The scheduler will not take the request now (full queue, deadline it cannot meet...).

    ``retry_after_s`` is the scheduler's estimate of when trying again could succeed, or None
    when retrying will not help (e.g. a deadline that is already impossible).
    """

    def __init__(self, reason: str, *, tier: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tier = tier
        self.retry_after_s = retry_after_s


class EngineOverloaded(AdmissionRefused):
    """The engine is saturated past its queue bound; refuse fast instead of queueing."""


class EngineUnavailable(EngineError):
    """The engine is not loaded, is shutting down, or its worker died mid-request."""
