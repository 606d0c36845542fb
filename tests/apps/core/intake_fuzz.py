"""Hypothesis strategies for the intake fuzz on every door (issue 41, item 6): JSON documents
with arbitrary Unicode (lone surrogates, NUL and other control characters, line separators),
deep and wide nesting and huge numbers, as whole documents and as one field of an otherwise
valid request. The doors' tests (``test_intake_fuzz.py`` beside the gateway, web and batches
tests) send them and assert the intake's contract: a 4xx in the OpenAI shape (or an ``error``
message, or a batch-line error), never a 500, and nothing that reaches a tokeniser or a database
that it cannot take."""

from __future__ import annotations

import json
import logging
from typing import Any

from asgiref.sync import async_to_sync
from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis import strategies as st

MODEL = "smollm2-135m-instruct"
_FUZZ = hsettings(deadline=None, database=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture,
                                         HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz(examples: int) -> hsettings:
    """Hypothesis settings for one door: ``examples`` per run (each door's count keeps the
    whole fuzz within about a minute of ``make test``); fixtures are shared by the examples."""
    return hsettings(_FUZZ, max_examples=examples)

# Any code point, surrogates (category Cs) and controls included, plus the ones that broke things.
ANY_CHAR = st.characters(exclude_categories=())
HARD_CHAR = st.sampled_from(["\ud800", "\udfff", "\ud83d", "\x00", "\u2028", "\x85", "\ufeff",
                             "\U0001F600", "\x1b", "\r", "\\", '"'])
# Strings: half of them hold one of the hard characters somewhere.
HARD_TEXT = st.tuples(st.text(ANY_CHAR, max_size=6), HARD_CHAR, st.text(ANY_CHAR, max_size=6))
TEXT = st.one_of(HARD_TEXT.map("".join), st.text(ANY_CHAR, max_size=16),
                 st.sampled_from(["", "hi", "\ud83d\ude00"]))
HUGE = st.sampled_from(["1" * 5000, "1e999", "-1e400", "1e-400", "9" * 400, "0.0e99999",
                        "-0", "123456789012345678901234567890"])


def _nested(depth: int, inner: str = "") -> str:
    return "[" * depth + inner + "]" * depth


DEEP = st.one_of(
    st.integers(1, 3000).map(_nested),
    st.integers(1, 3000).map(lambda d: '{"a": ' * d + "1" + "}" * d),
    st.integers(60, 70).map(_nested),  # around the limit (64)
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), TEXT)
VALUES = st.recursive(SCALARS, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(TEXT, kids, max_size=4)), max_leaves=10)
WIDE = st.integers(100, 5000).map(lambda n: "[" + ",".join(["0"] * n) + "]")


def _dump(value: Any) -> str:
    """JSON text of ``value``: surrogates and controls written as ``\\u`` escapes."""
    return json.dumps(value)


# A raw JSON value, as text: valid JSON, a deep or wide one, a huge number or garbage.
RAW_VALUE = st.one_of(VALUES.map(_dump), DEEP, WIDE, HUGE, st.text(ANY_CHAR, max_size=16))


def varied(value: Any) -> st.SearchStrategy[Any]:
    """``value`` with each string in it kept or replaced by a drawn ``TEXT``."""
    if isinstance(value, dict):
        return st.fixed_dictionaries({k: varied(v) for k, v in value.items()})
    if isinstance(value, list):
        return st.tuples(*[varied(v) for v in value]).map(list)
    if isinstance(value, str):  # kept two times in three: most documents keep their shape
        return st.one_of(st.just(value), st.just(value), TEXT)
    return st.just(value)


@st.composite
def mutated(draw: Any, base: dict[str, Any], fields: list[str]) -> str:
    """``base`` (its strings varied) as JSON text with one of ``fields`` (a dotted path; ``*``
    a new key) replaced by a drawn raw value."""
    path = draw(st.sampled_from(fields))
    marker = "\u0001MARK\u0001"
    doc = draw(varied(base))
    keys = path.split(".")
    parent = doc
    for key in keys[:-1]:
        parent = parent[int(key)] if isinstance(parent, list) else parent[key]
    last: Any = draw(TEXT) if keys[-1] == "*" else keys[-1]
    if isinstance(parent, list):
        parent[int(last)] = marker
    else:
        parent[last] = marker
    return _dump(doc).replace(_dump(marker), draw(st.one_of(TEXT.map(_dump), RAW_VALUE)))


def documents(base: dict[str, Any], fields: list[str]) -> st.SearchStrategy[str]:
    """Whole documents: ``base`` with its strings varied, or one field replaced by any raw
    value, or any raw value."""
    whole = varied(base).map(_dump)  # the shape kept, its strings varied
    return st.one_of(whole, whole, mutated(base, fields), RAW_VALUE)


def storable(value: Any) -> bool:
    """Whether every string in ``value`` (keys too) is UTF-8 text without NUL."""
    if isinstance(value, dict):
        return all(storable(k) and storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(storable(v) for v in value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return "\x00" not in value
    return True


def chat_frame(frame: str) -> bool:
    """Whether ``frame`` is a chat message (a turn starts unless it is refused at once)."""
    try:
        doc = json.loads(frame)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("type") == "chat"


def assert_openai_error(body: dict[str, Any]) -> None:
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, body
    assert error["type"] != "server_error", body
    json.dumps(error, ensure_ascii=False).encode("utf-8")  # the answer itself is text


async def _answer(ws: Any) -> dict[str, Any]:
    message = await ws.receive_output(timeout=10)
    assert message["type"] == "websocket.send", message  # never closed (1011)
    answer = json.loads(message["text"])
    if answer["type"] == "error":
        assert_openai_error(answer)
    return answer


def drive(ws: Any, frames: list[str], caplog: Any) -> None:
    """Connect ``ws`` (a chat socket's ``WebsocketCommunicator``), send each frame then a
    ping, read its answers up to the pong (refusals come first) and, for a chat it took, to
    the turn's end; disconnect. Every ``error`` is a 4xx in the OpenAI shape, the socket never
    closes, and nothing is logged as a fault."""
    caplog.set_level(logging.ERROR, logger="laser.errors")
    caplog.clear()
    async_to_sync(_drive)(ws, frames)
    assert [r.getMessage() for r in caplog.records if r.name == "laser.errors"] == []


async def _drive(ws: Any, frames: list[str]) -> None:
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from(timeout=10))["type"] == "ready"
    try:
        await _frames(ws, frames)
    finally:
        await ws.disconnect()


async def _frames(ws: Any, frames: list[str]) -> None:
    for frame in frames:
        await ws.send_input({"type": "websocket.receive", "text": frame})
        await ws.send_json_to({"type": "ping"})
        kinds = [(await _answer(ws))["type"]]
        while kinds[-1] != "pong":
            kinds.append((await _answer(ws))["type"])
        if chat_frame(frame) and "error" not in kinds:
            while kinds[-1] not in ("done", "error", "stopped"):
                kinds.append((await _answer(ws))["type"])
