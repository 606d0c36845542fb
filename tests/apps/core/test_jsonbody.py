"""The one JSON intake (``apps.core.jsonbody``): depth without recursion, strings that are
Unicode text (no lone surrogate) and, where stored, hold no NUL, numbers within a float's range;
each refusal names the field (issue 41)."""

from __future__ import annotations

import pytest

from apps.core.errors import BadRequestError
from apps.core.jsonbody import BadText, JSONTooDeep, loads_bounded, parse_json, printable

DEEP = [1_000, 100_000]


@pytest.mark.parametrize("depth", DEEP)
def test_deep_json_is_too_deep_not_a_recursion_error(depth):
    with pytest.raises(JSONTooDeep):
        loads_bounded("[" * depth + "]" * depth, max_depth=64)
    with pytest.raises(JSONTooDeep):
        loads_bounded('{"a": ' * depth + "1" + "}" * depth, max_depth=64)


def test_the_depth_limit_is_inclusive():
    assert loads_bounded("[" * 64 + "]" * 64, max_depth=64) is not None
    with pytest.raises(JSONTooDeep):
        loads_bounded("[" * 65 + "]" * 65, max_depth=64)


@pytest.mark.parametrize("raw, param", [
    ('"\\ud800"', "(the document)"),
    ('{"messages": [{"role": "user", "content": "a\\udfffb"}]}', "messages[0].content"),
    ('{"model": "m", "stop": ["x", "\\ud83d"]}', "stop[1]"),
    ('{"metadata": {"\\udc00": "v"}}', "metadata.\\udc00"),  # a key, printed escaped
    ('{"a": [[{"b": "\\ud800"}]]}', "a[0][0].b"),
])
def test_a_lone_surrogate_anywhere_is_bad_text_naming_the_field(raw, param):
    with pytest.raises(BadText) as refused:
        loads_bounded(raw, max_depth=64)
    assert refused.value.param == param and "surrogate" in refused.value.reason
    printable(str(refused.value)).encode("utf-8")  # the message itself is sendable text


def test_a_surrogate_pair_is_one_character_and_fine():
    assert loads_bounded('"\\ud83d\\ude00"', max_depth=64) == "\U0001F600"


def test_nul_is_refused_only_where_stored():
    raw = '{"custom_id": "a", "body": {"x": ["ok", "n\\u0000l"]}}'
    assert loads_bounded(raw, max_depth=64)["body"]["x"][1] == "n\x00l"
    with pytest.raises(BadText) as refused:
        loads_bounded(raw, max_depth=64, nul_ok=False)
    assert refused.value.param == "body.x[1]" and "NUL" in refused.value.reason
    with pytest.raises(BadText) as refused:
        loads_bounded('{"k\\u0000": 1}', max_depth=64, nul_ok=False)
    assert refused.value.param == "k\\x00"  # printed escaped: the error itself can be stored


@pytest.mark.parametrize("raw", ["1e999", "-1e400", '{"t": 1e309}', "NaN", "[Infinity]",
                                 "1" * 5000])
def test_numbers_out_of_range_and_constants_are_malformed(raw):
    with pytest.raises(ValueError):
        loads_bounded(raw, max_depth=64)


@pytest.mark.parametrize("raw, code, param", [
    (b"[" * 100_000, "invalid_json", None),
    (b'{"prompt": "\\ud800"}', "invalid_value", "prompt"),
    (b"\xff\xfe{}", "invalid_json", None),
    (b'{"a": 1e999}', "invalid_json", None),
])
def test_parse_json_answers_each_refusal_as_a_400(raw, code, param, settings):
    settings.LASER_MAX_JSON_DEPTH = 64
    with pytest.raises(BadRequestError) as refused:
        parse_json(raw)
    error = refused.value.body()["error"]
    assert (refused.value.status, error["code"], error["param"]) == (400, code, param)
    error["message"].encode("utf-8")
