"""``decode_frame``: every WebSocket frame becomes a JSON value, a 400 ``invalid_json`` or a
``MessageTooBig`` (close 1009); ``loads_bounded`` on scalars (a finding of the WebSocket fuzz:
``null`` or ``7`` raised TypeError in the depth walk, a crash on every JSON path using it)."""

from __future__ import annotations

import pytest

from apps.core.errors import BadRequestError
from apps.core.jsonbody import json_depth, loads_bounded
from apps.core.ws_frames import MessageTooBig, decode_frame


@pytest.mark.parametrize("raw, depth", [("null", 0), ("7", 0), ('"s"', 0), ("[]", 1),
                                        ('{"a": [1, {"b": []}]}', 4)])
def test_scalars_and_containers_have_a_depth(raw, depth):
    assert json_depth(loads_bounded(raw, max_depth=64)) == depth


@pytest.fixture
def limit(settings) -> int:
    settings.LASER_WS_MAX_MESSAGE_BYTES = 100
    settings.LASER_MAX_JSON_DEPTH = 8
    return 100


@pytest.mark.parametrize("text, value", [('{"type": "ping"}', {"type": "ping"}), ("7", 7),
                                         ("null", None), ('"é"', "é")])
def test_text_frames_decode_to_their_value(limit, text, value):
    assert decode_frame(text, None) == value


@pytest.mark.parametrize("text, data", [(None, b"\x00"), ("", None), ("{", None), ("NaN", None),
                                        ("[" * 9 + "]" * 9, None), ("[" * 90, None)])
def test_bad_frames_are_400_invalid_json(limit, text, data):
    with pytest.raises(BadRequestError) as refused:
        decode_frame(text, data)
    assert refused.value.code == "invalid_json" and refused.value.status == 400


@pytest.mark.parametrize("text, data", [("x" * 101, None), ("é" * 51, None),
                                        (None, b"\x00" * 101)])
def test_frames_past_the_limit_in_bytes_are_too_big(limit, text, data):
    with pytest.raises(MessageTooBig) as refused:
        decode_frame(text, data)
    assert refused.value.status == 413


@pytest.mark.django_db
@pytest.mark.parametrize("body", ["null", "7", '"batch"', "[]"])
def test_a_json_body_that_is_not_an_object_is_a_400_on_the_drf_endpoints(client, api_key_factory,
                                                                         body):
    response = client.post("/v1/batches", data=body, content_type="application/json",
                           headers={"Authorization": f"Bearer {api_key_factory()[1]}"})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "invalid_request_error"
