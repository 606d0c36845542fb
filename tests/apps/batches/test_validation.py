"""Input-file validation and completion windows, as OpenAI does them."""

from __future__ import annotations

import pytest

from apps.batches.validation import validate_input
from apps.batches.windows import parse_window, window_deadline_s
from apps.core.errors import BadRequestError
from apps.slo.selectors import contract_for
from tests.apps.batches.conftest import chat_line, jsonl

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"


def _validate(cold, rows, endpoint=CHAT):
    contract = contract_for(tenant=cold.tenant, tier="cold")
    return validate_input(jsonl(rows), endpoint=endpoint, tenant=cold.tenant, contract=contract)


def test_good_file_yields_every_line_in_order(cold):
    result = _validate(cold, [chat_line("a", "hi"), "", chat_line("b", "yo")])
    assert result.ok
    assert [(x.line_no, x.custom_id, x.refusal) for x in result.lines] == [
        (1, "a", None), (3, "b", None)]


@pytest.mark.parametrize(("row", "code", "param"), [
    ("{not json", "invalid_json_line", None),
    ("[1, 2]", "invalid_json_line", None),
    ({"method": "POST", "url": CHAT, "body": {}}, "missing_required_parameter", "custom_id"),
    ({"custom_id": "x", "method": "GET", "url": CHAT, "body": {}}, "invalid_method", "method"),
    ({"custom_id": "x", "method": "POST", "url": "/v1/embeddings", "body": {}},
     "mismatched_endpoint", "url"),
    ({"custom_id": 7, "method": "POST", "url": CHAT, "body": {}}, "invalid_custom_id",
     "custom_id"),
    ({"custom_id": "x", "method": "POST", "url": CHAT, "body": "hi"}, "invalid_body", "body"),
])
def test_envelope_problems_fail_the_file_naming_the_line(cold, row, code, param):
    result = _validate(cold, [chat_line("ok", "fine"), row])
    assert not result.ok
    assert result.errors == [{"code": code, "message": result.errors[0]["message"],
                              "param": param, "line": 2}]


def test_duplicate_custom_id_is_a_file_error_on_the_second_occurrence(cold):
    result = _validate(cold, [chat_line("same", "a"), chat_line("other", "b"),
                              chat_line("same", "c")])
    assert [(e["code"], e["line"]) for e in result.errors] == [("duplicate_custom_id", 3)]


def test_a_body_the_endpoint_refuses_is_a_line_level_refusal(cold):
    rows = [chat_line("ok", "fine"), chat_line("tools", "x", tools=[{"type": "retrieval"}]),
            chat_line("temp", "x", temperature=5), chat_line("model", "x", model="gpt-9")]
    result = _validate(cold, rows)
    assert result.ok
    refusals = {x.custom_id: x.refusal for x in result.lines}
    assert refusals["ok"] is None
    assert (refusals["tools"].status, refusals["tools"].param) == (400, "tools[0].type")
    assert (refusals["temp"].status, refusals["temp"].param) == (400, "temperature")
    assert (refusals["model"].status, refusals["model"].param) == (404, "model")


def test_completions_endpoint_uses_the_completions_parser(cold):
    from django.conf import settings

    row = {"custom_id": "c", "method": "POST", "url": "/v1/completions",
           "body": {"model": settings.LASER_SERVED_MODEL_ID, "prompt": ["a", "b"]}}
    result = _validate(cold, [row], endpoint="/v1/completions")
    assert result.lines[0].refusal.param == "prompt"


def test_line_limit_and_empty_file(cold, settings):
    settings.LASER_BATCH_MAX_LINES = 2
    over = _validate(cold, [chat_line(str(i), "x") for i in range(3)])
    assert [e["code"] for e in over.errors] == ["too_many_tasks"]
    empty = _validate(cold, ["", "  "])
    assert [e["code"] for e in empty.errors] == ["empty_file"]


def test_not_utf8_is_a_file_error(cold):
    contract = contract_for(tenant=cold.tenant, tier="cold")
    result = validate_input(b"\xff\xfe", endpoint=CHAT, tenant=cold.tenant, contract=contract)
    assert [e["code"] for e in result.errors] == ["invalid_file"]


@pytest.mark.parametrize(("text", "seconds"), [("24h", 86400), ("4h", 14400), ("90m", 5400),
                                               ("30s", 30), ("1d", 86400)])
def test_parse_window(text, seconds):
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "24", "h", "0h", "-1h", "1w", 24, None])
def test_bad_windows_name_the_parameter(text):
    with pytest.raises(BadRequestError) as caught:
        parse_window(text)
    assert caught.value.param == "completion_window"


def test_window_must_be_one_the_contract_can_promise(cold):
    contract = contract_for(tenant=cold.tenant, tier="cold")  # promises 1h
    assert window_deadline_s("24h", contract=contract) == 86400
    assert window_deadline_s("1h", contract=contract) == 3600
    for refused in ("30m", "25h"):
        with pytest.raises(BadRequestError) as caught:
            window_deadline_s(refused, contract=contract)
        assert caught.value.param == "completion_window"
    with pytest.raises(BadRequestError):
        window_deadline_s("24h", contract=None)
