"""Limits before bytes (issue 18): ``BodyLimit`` answers 413 on a declared ``Content-Length``
over the route's limit without reading the body, and cuts a chunked body off at the limit.

The guard alone against a recording app (what the app was given), then the project's ASGI app
behind a real uvicorn over raw sockets (what the server answered before the body was sent)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from apps.core.body_limit import FORM_OVERHEAD_BYTES, BodyLimit, limit_for
from tests import test_openapi_fuzz

LIMIT = 1000
server = test_openapi_fuzz.server  # the project's ASGI app in uvicorn on a free port


class Recorder:
    """An ASGI app that reads the whole body, then answers 200 with its length."""

    def __init__(self) -> None:
        self.calls, self.body, self.disconnected = 0, b"", False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                return
            self.body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(len(self.body)).encode()})


def _drive(chunks: list[bytes], *, length: int | None = None, path: str = "/v1/completions",
           method: str = "POST") -> tuple[Recorder, list[dict], int]:
    """Run the guard around a ``Recorder`` over ``chunks``; returns the app, what was sent to
    the client and how many body messages the client side handed out."""
    app, sent, handed = Recorder(), [], 0
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    scope = {"type": "http", "method": method, "path": path, "headers": headers}

    async def receive() -> dict:
        nonlocal handed
        if handed == len(chunks):
            await asyncio.sleep(3600)  # a client that went quiet: only a disconnect would come
        handed += 1
        return {"type": "http.request", "body": chunks[handed - 1],
                "more_body": handed < len(chunks)}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(asyncio.wait_for(BodyLimit(app)({**scope}, receive, send), 10))
    return app, sent, handed


@pytest.fixture
def small(settings) -> None:
    settings.LASER_MAX_REQUEST_BYTES = LIMIT
    settings.LASER_BATCH_MAX_FILE_BYTES = 10 * LIMIT


def _status(sent: list[dict]) -> int:
    return sent[0]["status"]


def test_a_declared_length_over_the_limit_is_answered_without_calling_the_app(small):
    app, sent, handed = _drive([b"x" * 50], length=50_000_000)
    assert (app.calls, handed, _status(sent)) == (0, 0, 413)
    headers = dict(sent[0]["headers"])
    assert headers[b"connection"] == b"close"
    error = json.loads(sent[1]["body"])["error"]
    assert (error["code"], error["type"]) == ("request_too_large", "invalid_request_error")
    assert f"{LIMIT} bytes" in error["message"]


def test_a_streamed_body_is_cut_at_the_limit_and_the_app_gets_a_disconnect(small):
    chunks = [b"x" * 300] * 10  # 3,000 bytes, no Content-Length
    app, sent, handed = _drive(chunks)
    assert _status(sent) == 413 and len(sent) == 2  # the app's own answer never went out
    assert app.disconnected and len(app.body) <= LIMIT
    assert handed == 4  # read up to the first chunk past the limit, not one more


def test_bodies_within_the_limit_pass_untouched(small):
    app, sent, _ = _drive([b"x" * 600, b"y" * 400], length=LIMIT)
    assert (_status(sent), sent[1]["body"], app.disconnected) == (200, b"1000", False)


def test_upload_routes_have_the_file_limit_and_other_routes_the_json_limit(small):
    assert limit_for("POST", "/v1/files") == 10 * LIMIT + FORM_OVERHEAD_BYTES
    assert limit_for("POST", "/batches/start") == 10 * LIMIT + FORM_OVERHEAD_BYTES
    for method, path in [("POST", "/v1/batches"), ("POST", "/v1/chat/completions"),
                         ("GET", "/v1/files"), ("POST", "/admin/login/")]:
        assert limit_for(method, path) == LIMIT
    app, sent, _ = _drive([b"x" * 5 * LIMIT], length=5 * LIMIT, path="/v1/files")
    assert _status(sent) == 200
    app, sent, _ = _drive([b"x" * 5 * LIMIT], length=5 * LIMIT, path="/batches/start")
    assert _status(sent) == 200


def test_pages_outside_the_api_get_a_line_of_text(small):
    _, sent, _ = _drive([], length=LIMIT + 1, path="/admin/login/")
    assert _status(sent) == 413 and sent[1]["body"].startswith(b"The request body exceeds")


# --- through uvicorn ------------------------------------------------------------------------


def _connect(server: Any) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=20)
    return sock


def _head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1"] + [f"{k}: {v}" for k, v in
                                                             headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one response to the end of the connection (the 413 closes it)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
@pytest.mark.parametrize("with_key", [False, True])
def test_a_declared_50_mb_body_gets_413_before_a_byte_of_it_is_sent(server, api_key_factory,
                                                                    with_key):
    # 413 comes before 401: the guard runs before authentication, with or without a key.
    headers = {"Content-Type": "application/json", "Content-Length": str(50_000_000)}
    if with_key:
        headers["Authorization"] = f"Bearer {api_key_factory()[1]}"
    with _connect(server) as sock:
        sock.sendall(_head("/v1/chat/completions", headers))
        status, got, body = _response(sock)  # not one body byte was sent
    assert status == 413 and got["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "request_too_large"


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_an_upload_declared_over_the_file_limit_gets_413_unread(server, settings):
    settings.LASER_BATCH_MAX_FILE_BYTES = 1024 * 1024
    headers = {"Content-Type": "multipart/form-data; boundary=x",
               "Content-Length": str(50_000_000)}
    with _connect(server) as sock:
        sock.sendall(_head("/v1/files", headers))
        status, _, body = _response(sock)
    assert status == 413 and json.loads(body)["error"]["type"] == "invalid_request_error"


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
@pytest.mark.parametrize("auth", [None, "Bearer lsr_nope.wrong", "Bearer revoked"])
def test_an_upload_without_a_valid_key_gets_401_unread(server, settings, api_key_factory, auth):
    # issue 41: a 40 MB upload within the file limit was read whole before DRF's 401
    from apps.tenants.services import api_key_revoke

    settings.LASER_BATCH_MAX_FILE_BYTES = 100_000_000
    headers = {"Content-Type": "multipart/form-data; boundary=x",
               "Content-Length": str(40_000_000)}
    if auth == "Bearer revoked":
        key, raw = api_key_factory()
        api_key_revoke(api_key=key)
        auth = f"Bearer {raw}"
    if auth is not None:
        headers["Authorization"] = auth
    with _connect(server) as sock:
        sock.sendall(_head("/v1/files", headers))
        status, got, body = _response(sock)  # not one body byte was sent
    error = json.loads(body)["error"]
    assert (status, error["type"], got["connection"]) == (401, "authentication_error", "close")
    assert got["www-authenticate"] == 'Bearer realm="laser"'


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_chunked_body_is_cut_off_with_413_while_it_is_still_streaming(server, settings):
    settings.LASER_MAX_REQUEST_BYTES = 64 * 1024
    headers = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    chunk = b"[" * 8192
    with _connect(server) as sock:
        sock.sendall(_head("/v1/chat/completions", headers))
        for _ in range(64 * 1024 // len(chunk) + 1):  # one chunk past the limit ...
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        status, _, body = _response(sock)  # ... and the body never ended (no 0-size chunk)
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_body_within_the_limit_without_a_key_is_401(server):
    import httpx

    response = httpx.post(f"{server.url}/v1/chat/completions", timeout=20,
                          json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 401 and response.json()["error"]["type"] == (
        "authentication_error")


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_an_upload_bigger_than_the_json_limit_goes_through(server, api_key_factory, settings):
    import httpx

    settings.LASER_MAX_REQUEST_BYTES = 4096
    line = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "m", "messages": [{"role": "user",
                                                            "content": "x" * 20_000}]}})
    response = httpx.post(f"{server.url}/v1/files", timeout=20,
                          headers={"Authorization": f"Bearer {api_key_factory()[1]}"},
                          data={"purpose": "batch"},
                          files={"file": ("in.jsonl", line.encode() + b"\n")})
    assert response.status_code == 200, response.text
    assert response.json()["bytes"] > 4096
