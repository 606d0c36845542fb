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

    @property
    def renders_tools(self) -> bool:
        """Whether the template itself shows ``tools`` and tool calls (HF's convention)."""
        return "tools" in self.source and "tool_calls" in self.source

    def render(self, messages: Sequence[Mapping[str, Any]], *,
               add_generation_prompt: bool = True, tools: Sequence[Mapping] | None = None,
               **extra: Any) -> str:
        """Messages (`{"role", "content"}`, assistant `tool_calls`, `tool` results) -> prompt
        text, ending with the assistant header when `add_generation_prompt`. `tools`
        (function definitions) go to a template that renders them, else into the system
        message in the Hermes `<tool_call>` convention (`hermes_messages`)."""
        for i, m in enumerate(messages):
            if "role" not in m:
                raise ChatTemplateError(f"message {i} has no role")
        if self.renders_tools:
            extra = {**extra, "tools": list(tools) if tools else None}
        elif tools or any(m.get("tool_calls") or m["role"] == "tool" for m in messages):
            messages = hermes_messages(messages, tools or ())
        context = {"messages": [dict(m) for m in messages],
                   "add_generation_prompt": add_generation_prompt,
                   "bos_token": self.bos_token, "eos_token": self.eos_token, **extra}
        try:
            return self._template.render(**context)
        except ChatTemplateError:
            raise
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {exc}") from exc


HERMES_SYSTEM = (
    "You can call functions. Their signatures are listed, one JSON object per line, between "
    "<tools> and </tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call one, answer with its name and arguments as a JSON object between <tool_call> and "
    "</tool_call>, one block per call:\n<tool_call>\n"
    '{{"name": "<function name>", "arguments": {{<arguments as JSON>}}}}\n</tool_call>')


def hermes_messages(messages: Sequence[Mapping[str, Any]],
                    tools: Sequence[Mapping]) -> list[dict[str, Any]]:
    """Messages with tools written as plain text for a template that renders only role and
    content: the tools in the system message, an assistant's calls as `<tool_call>` blocks,
    a tool's result as a `<tool_response>` block (its role kept, as Hermes models read it)."""
    out = [_plain(m) for m in messages]
    if tools:
        listing = "\n".join(json.dumps({"type": "function", "function": dict(t)})
                            for t in tools)
        preamble = HERMES_SYSTEM.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{preamble}"
        else:
            out.insert(0, {"role": "system", "content": preamble})
    return out


def _plain(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content") or ""
    if message["role"] == "tool":
        return {"role": "tool", "content": f"<tool_response>\n{content}\n</tool_response>"}
    blocks = [content] if content else []
    for call in message.get("tool_calls") or ():
        fn = call["function"]
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            args = fn.get("arguments")
        blocks.append("<tool_call>\n" + json.dumps({"name": fn["name"], "arguments": args})
                      + "\n</tool_call>")
    return {"role": message["role"], "content": "\n".join(blocks)}


__all__ = ["CHATML", "ChatTemplate", "ChatTemplateError", "hermes_messages"]
