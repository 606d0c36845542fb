"""Chat templates (the Jinja2 strings shipped with models), rendered in a sandbox."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import Template, TemplateError, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Used when a model ships none: ChatML, which SmolLM2 and many others speak.
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


class ChatTemplateError(ValueError):
    """The template failed to render (or raised via `raise_exception`)."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False) -> str:
    # HF templates expect tojson not to HTML-escape (jinja's default filter does).
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


@lru_cache(maxsize=16)
def _compile(source: str) -> Template:
    # trim_blocks/lstrip_blocks match how transformers renders, so whitespace is identical.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"],
                                        undefined=Undefined)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


class ChatTemplate:
    """A compiled chat template plus the special tokens it may reference."""

    def __init__(self, source: str | None, *, bos_token: str | None = None,
                 eos_token: str | None = None) -> None:
        self.source = source or CHATML
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        try:
            self._template = _compile(self.source)
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template does not compile: {exc}") from exc

    def render(self, messages: Sequence[Mapping[str, Any]], *,
               add_generation_prompt: bool = True, **extra: Any) -> str:
        """Messages (`{"role", "content"}`) -> prompt text, ending with the assistant header
        when `add_generation_prompt`."""
        for i, m in enumerate(messages):
            if "role" not in m:
                raise ChatTemplateError(f"message {i} has no role")
        context = {"messages": [dict(m) for m in messages],
                   "add_generation_prompt": add_generation_prompt,
                   "bos_token": self.bos_token, "eos_token": self.eos_token, **extra}
        try:
            return self._template.render(**context)
        except ChatTemplateError:
            raise
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {exc}") from exc


__all__ = ["CHATML", "ChatTemplate", "ChatTemplateError"]
