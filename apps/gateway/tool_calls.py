"""Tool calls in and out: the Hermes ``<tool_call>`` convention the prompt asks for, parsed
incrementally from the model's text into OpenAI's ``tool_calls``.

A call is ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (the engine's call
grammar writes exactly that; a free ``auto`` answer is parsed the same way). ``CallParser``
turns text, piece by piece, into events: content, the start of a call (index, id, name) and
pieces of its arguments, so a stream sends ``delta.tool_calls`` as OpenAI does and a whole
answer gets the same calls.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from apps.core.errors import BadRequestError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(slots=True)
class Call:
    index: int
    id: str
    name: str
    arguments: str = ""

    def openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(slots=True)
class Events:
    """What one piece of text added: content, new calls, and argument pieces per call."""

    content: str = ""
    started: list[Call] = field(default_factory=list)
    arguments: list[tuple[int, str]] = field(default_factory=list)

    def stream_entries(self) -> list[dict[str, Any]]:
        """OpenAI's ``delta.tool_calls`` entries for these events."""
        entries: dict[int, dict[str, Any]] = {}
        for call in self.started:
            entries[call.index] = {"index": call.index, "id": call.id, "type": "function",
                                   "function": {"name": call.name, "arguments": ""}}
        for index, piece in self.arguments:
            entry = entries.setdefault(index, {"index": index, "function": {"arguments": ""}})
            entry["function"]["arguments"] += piece
        return [entries[i] for i in sorted(entries)]


class CallParser:
    """Incremental: ``feed`` text as it comes, ``finish`` at the end; ``calls`` and
    ``content`` hold everything parsed so far."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.content = ""
        self._buf = ""
        self._mode = "text"  # text -> head -> args -> tail -> text
        self._depth, self._in_string, self._escape = 0, False, False
        self._held_ws = ""

    def feed(self, text: str) -> Events:
        self._buf += text
        events = Events()
        while self._step(events):
            pass
        self.content += events.content
        return events

    def finish(self) -> Events:
        """Flush what is held: text that only looked like the start of a call is content;
        whitespace before the end is dropped once calls were made."""
        events = Events()
        if self._mode == "text":
            rest = self._held_ws + self._buf
            events.content = rest if not self.calls else rest.rstrip()
        elif self._mode == "args":  # cut off mid-arguments (length): keep what came
            self._args(events, self._buf)
        elif self._mode == "head" and not self.calls:
            events.content = self._held_ws + OPEN + self._buf
        self._buf, self._held_ws = "", ""
        self.content += events.content
        return events

    # ---- the state machine -------------------------------------------------------------
    def _step(self, events: Events) -> bool:
        return getattr(self, f"_on_{self._mode}")(events)

    def _on_text(self, events: Events) -> bool:
        at = self._buf.find(OPEN)
        if at >= 0:
            self._emit_text(events, self._buf[:at], final=True)
            self._buf, self._mode = self._buf[at + len(OPEN):], "head"
            return True
        keep = _partial_suffix(self._buf, OPEN)
        self._emit_text(events, self._buf[:len(self._buf) - keep], final=False)
        self._buf = self._buf[len(self._buf) - keep:]
        return False

    def _emit_text(self, events: Events, text: str, final: bool) -> None:
        """Content, except whitespace that may only separate calls (held until text
        follows it)."""
        text = self._held_ws + text
        stripped = text.rstrip()
        self._held_ws = "" if final else text[len(stripped):]
        if not final:
            text = stripped
        if self.calls and not text.strip():
            return  # newlines between calls
        events.content += text

    def _on_head(self, events: Events) -> bool:
        match = _HEAD.match(self._buf)
        if match is None:
            if CLOSE in self._buf:  # not the name-first shape: parse the whole object
                body, _, self._buf = self._buf.partition(CLOSE)
                self._whole(events, body)
                self._mode = "text"
                return True
            return False
        call = Call(len(self.calls), call_id(), json.loads(f'"{match.group(1)}"'))
        self.calls.append(call)
        events.started.append(call)
        self._buf, self._mode = self._buf[match.end():], "args"
        self._depth, self._in_string, self._escape = 0, False, False
        return True

    def _whole(self, events: Events, body: str) -> None:
        try:
            obj = json.loads(body)
            name, args = obj["name"], obj.get("arguments", {})
            assert isinstance(name, str)
        except (ValueError, KeyError, TypeError, AssertionError):
            events.content += OPEN + body + CLOSE  # not a call after all
            return
        call = Call(len(self.calls), call_id(), name)
        self.calls.append(call)
        events.started.append(call)
        self._args(events, args if isinstance(args, str) else json.dumps(args))

    def _on_args(self, events: Events) -> bool:
        if not self.calls[-1].arguments:  # the blank after "arguments": may come late
            self._buf = self._buf.lstrip()
        end = self._scan(self._buf)
        if end is None:
            self._args(events, self._buf)
            self._buf = ""
            return False
        self._args(events, self._buf[:end])
        self._buf, self._mode = self._buf[end:], "tail"
        return True

    def _args(self, events: Events, piece: str) -> None:
        if piece:
            self.calls[-1].arguments += piece
            events.arguments.append((self.calls[-1].index, piece))

    def _scan(self, text: str) -> int | None:
        """Where the arguments' JSON value ends in ``text`` (None: not yet)."""
        for i, ch in enumerate(text):
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return i + 1
        return None

    def _on_tail(self, events: Events) -> bool:
        at = self._buf.find(CLOSE)
        if at < 0:
            return False
        self._buf, self._mode = self._buf[at + len(CLOSE):], "text"
        return True


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest suffix of ``text`` that begins ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def parse(text: str) -> CallParser:
    """A whole answer parsed."""
    parser = CallParser()
    parser.feed(text)
    parser.finish()
    return parser


# ---- tool calls in the request's messages ------------------------------------------------


def message_calls(calls: Any, where: str) -> list[dict]:
    """An assistant message's ``tool_calls`` checked: ``[{"id", "type", "function": {"name",
    "arguments" (a JSON string)}}]``."""
    if not isinstance(calls, list):
        raise BadRequestError(f"'{where}' must be an array.", param=where, code="invalid_type")
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or \
                not isinstance(fn.get("arguments", ""), str):
            raise BadRequestError(f"'{where}[{i}]' must be a function call with a 'name' and "
                                  "'arguments' (a JSON string).", param=f"{where}[{i}]",
                                  code="invalid_value")
        out.append({"id": str(call.get("id") or call_id()), "type": "function",
                    "function": {"name": fn["name"], "arguments": fn.get("arguments") or "{}"}})
    return out
