"""``response_format``, ``tools`` and ``tool_choice`` -> the engine's ``Constraint``.

The engine compiles a constraint into a token mask (``inference.engine.grammar``); a schema it
cannot compile is refused there, as a 400 naming ``response_format`` (or ``tools``). Here only
the shape of the parameters is checked, so a batch line is refused exactly as the live
endpoint would refuse it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from apps.core.errors import BadRequestError
from inference.request import Constraint

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_TOOLS = 128
NONE, AUTO, REQUIRED, NAMED = "none", "auto", "required", "named"


def bad(param: str, message: str, code: str = "invalid_value") -> BadRequestError:
    return BadRequestError(message, param=param, code=code)


def _canonical(schema: Any) -> str:
    """One text per schema whatever the key order: the compiled-grammar cache's key."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def response_format(value: Any, param: str = "response_format") -> Constraint | None:
    """The constraint ``response_format`` asks for; None for ``text`` (or absent)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise bad(param, f"'{param}' must be an object with a 'type'.", "invalid_type")
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return Constraint("json_object", param=param)
    if kind != "json_schema":
        raise bad(f"{param}.type", f"'{param}.type' must be one of 'text', 'json_object', "
                  f"'json_schema', got '{kind}'.")
    # chat nests the schema under json_schema, the Responses API's text.format does not
    spec = value.get("json_schema", value)
    where = f"{param}.json_schema" if "json_schema" in value else param
    return json_schema(spec, where, param)


def json_schema(spec: Any, where: str, param: str) -> Constraint:
    if not isinstance(spec, dict):
        raise bad(where, f"'{where}' must be an object.", "invalid_type")
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise bad(f"{where}.name", f"'{where}.name' must be 1 to 64 letters, digits, '_' or "
                  "'-'.")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise bad(f"{where}.schema", f"'{where}.schema' must be a JSON schema object.",
                  "invalid_type")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise bad(f"{where}.strict", f"'{where}.strict' must be a boolean.", "invalid_type")
    return Constraint("json_schema", _canonical(schema), strict=bool(strict), param=param)


@dataclass(frozen=True, slots=True)
class ToolUse:
    """What a request with ``tools`` asks: ``choice`` (none/auto/required/named), the tools
    (OpenAI function objects: name, description, parameters) the prompt shows, and whether
    several calls may come at once."""

    choice: str
    tools: tuple[dict, ...]
    parallel: bool = True

    @property
    def calls(self) -> bool:
        """Whether the answer is read for tool calls."""
        return self.choice != NONE

    def constraint(self) -> Constraint | None:
        """The call grammar for ``required`` and a named function; None for ``auto``."""
        if self.choice not in (REQUIRED, NAMED):
            return None
        tools = [{"name": t["name"], "parameters": t.get("parameters") or {"type": "object"}}
                 for t in self.tools]
        return Constraint("tool_calls", _canonical(tools), parallel=self.parallel,
                          param="tools")


def tool_use(body: dict) -> ToolUse | None:
    """``tools`` / ``tool_choice`` / ``parallel_tool_calls`` of a chat body; None without
    tools (then a ``tool_choice`` other than ``none`` is a 400)."""
    tools = _tools(body.get("tools"))
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean.",
                  "invalid_type")
    if not tools:
        if choice is not None and choice != NONE:
            raise bad("tool_choice", "'tool_choice' is only allowed when 'tools' are given.")
        return None
    if choice is None:
        return ToolUse(AUTO, tools, parallel is not False)
    if choice in (NONE, AUTO, REQUIRED):
        return ToolUse(choice, tools, parallel is not False)
    name = _named(choice)
    picked = tuple(t for t in tools if t["name"] == name)
    if not picked:
        raise bad("tool_choice", f"'tool_choice' names '{name}', which is not in 'tools'.")
    return ToolUse(NAMED, picked, False)


def _named(choice: Any) -> str:
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else choice.get("name")
        if isinstance(name, str):
            return name
    raise bad("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
              "{\"type\": \"function\", \"function\": {\"name\": ...}}.")


def _tools(value: Any) -> tuple[dict, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise bad("tools", f"'tools' must be an array of at most {MAX_TOOLS} tools.",
                  "invalid_type")
    return tuple(function_tool(tool, f"tools[{i}]") for i, tool in enumerate(value))


def function_tool(tool: Any, where: str) -> dict:
    """One ``{"type": "function", "function": {...}}`` (or the Responses API's flat
    ``{"type": "function", "name": ...}``) -> ``{"name", "description", "parameters"}``."""
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise bad(f"{where}.type", f"tool type '{kind}' is not supported: only 'function'.",
                  "unsupported_parameter")
    fn = tool.get("function", tool)
    where = f"{where}.function" if "function" in tool else where
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or \
            not _NAME.match(fn["name"]):
        raise bad(f"{where}.name", f"'{where}.name' must be 1 to 64 letters, digits, '_' or "
                  "'-'.")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise bad(f"{where}.parameters", f"'{where}.parameters' must be a JSON schema object.",
                  "invalid_type")
    description = fn.get("description")
    if description is not None and not isinstance(description, str):
        raise bad(f"{where}.description", f"'{where}.description' must be a string.",
                  "invalid_type")
    out = {"name": fn["name"], "parameters": params or {"type": "object", "properties": {}}}
    if description:
        out["description"] = description
    return out
