"""The web app's upload (``POST /batches/start``) checks the session before reading a byte of
the body (issue 41): without a signed-in user it gets the login redirect, unread; a signed-in
user's upload goes on to the view. Raw sockets against the project's ASGI app in uvicorn."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest

from tests import test_openapi_fuzz
from tests.apps.web.conftest import logged_in

server = test_openapi_fuzz.server  # the project's ASGI app in uvicorn on a free port
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]
FORTY_MB = str(40_000_000)


def _refused_unread(server: Any, cookie: str | None) -> tuple[int, dict[str, str]]:
    """POST /batches/start declaring 40 MB, not one byte of it sent: the status and headers
    of the answer (the server closes the connection after it)."""
    host, port = server.url.removeprefix("http://").split(":")
    lines = ["POST /batches/start HTTP/1.1", "Host: 127.0.0.1",
             "Content-Type: multipart/form-data; boundary=x", f"Content-Length: {FORTY_MB}"]
    if cookie is not None:
        lines.append(f"Cookie: {cookie}")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, *header_lines = data.partition(b"\r\n\r\n")[0].decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    return int(status_line.split()[1]), headers


@pytest.mark.parametrize("case", ["no cookie", "forged session", "password changed"])
def test_without_a_signed_in_session_the_upload_is_sent_to_login_unread(server, settings,
                                                                        user_factory, case):
    settings.LASER_BATCH_MAX_FILE_BYTES = 100_000_000  # 40 MB is within the file limit
    cookie = {"no cookie": None, "forged session": "sessionid=abcdefghijklmnopqrstuvwxyz012345"
              }.get(case)
    if case == "password changed":  # the session's auth hash no longer matches
        user = user_factory()
        cookie = f"sessionid={logged_in(user).cookies['sessionid'].value}"
        user.set_password("another-password-entirely")
        user.save()
    status, headers = _refused_unread(server, cookie)
    assert (status, headers["connection"]) == (302, "close")
    assert headers["location"] == "/login/?next=/batches/start"


def test_a_signed_in_upload_reaches_the_view(server, user_factory, tenant_factory):
    member = logged_in(user_factory(tenant=tenant_factory()))
    response = httpx.post(f"{server.url}/batches/start", timeout=20,
                          cookies={"sessionid": member.cookies["sessionid"].value},
                          data={"endpoint": "/v1/chat/completions"},
                          files={"file": ("in.jsonl", b"{}\n")})
    # past the guard: the view read the form and refused it for its missing CSRF token
    assert response.status_code == 403 and b"CSRF" in response.content
