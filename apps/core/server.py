"""The embedded serving process: components, then uvicorn, then a clean drain.

Order on start: every registered component (engine, worker thread, ...) starts, then the socket
is bound and uvicorn serves ``laser_platform.asgi:application``. On SIGINT/SIGTERM: the draining
flag is set (``/ready`` turns 503, and so does every new request: ``admission.check_accepting``),
for ``accept_s`` seconds the listener stays open (a balancer that still sends work gets 503s to
retry elsewhere, not refused connections), then uvicorn stops accepting and waits up to
``drain_timeout`` seconds for in-flight requests (streams included), then components stop in
reverse order and the process exits normally. A second signal stops accepting at once; a second
Ctrl-C after that skips the wait.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from django.conf import settings

from apps.core.lifecycle import Lifecycle, lifecycle

logger = logging.getLogger(__name__)

ASGI_APP = "laser_platform.asgi:application"


class DrainingServer(uvicorn.Server):
    """uvicorn's server, plus the draining flag; leaves shutdown of the process to us."""

    def __init__(self, config: uvicorn.Config, registry: Lifecycle, accept_s: float = 0.0):
        super().__init__(config)
        self.registry = registry
        self.accept_s = accept_s
        self._drain_started: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain_started is None:
            timeout = self.config.timeout_graceful_shutdown
            logger.info("signal %s: draining (new requests 503 for %ss, then up to %ss for "
                        "those in flight)", sig, self.accept_s, timeout)
            self.registry.begin_drain()
            self._drain_started = time.monotonic()
            if self.accept_s > 0:
                return  # on_tick stops accepting once accept_s have passed
        super().handle_exit(sig, frame)
        # uvicorn re-raises captured signals when serve() returns, which would kill the process
        # before the components are stopped; we exit normally after stopping them instead.
        self._captured_signals.clear()

    async def on_tick(self, counter: int) -> bool:
        started = self._drain_started
        if started is not None and time.monotonic() - started >= self.accept_s:
            self.should_exit = True
        return await super().on_tick(counter)


def uvicorn_config(app: Any, **options: Any) -> uvicorn.Config:
    """uvicorn's config for Laser: no lifespan (Django's ASGI handler has none; components are
    started by ``serve``), frames capped at ``LASER_WS_MAX_MESSAGE_BYTES`` (bigger ones: 1009,
    unassembled), and the client's address taken from ``X-Forwarded-For`` only on connections
    from ``LASER_TRUSTED_PROXIES``. uvicorn's own default trusts 127.0.0.1, so any local
    process, or a client reaching a port shared with one, could name its address and walk
    around the login lockout."""
    trusted = settings.LASER_TRUSTED_PROXIES
    return uvicorn.Config(app, lifespan="off", ws_max_size=settings.LASER_WS_MAX_MESSAGE_BYTES,
                          proxy_headers=bool(trusted), forwarded_allow_ips=list(trusted) or None,
                          **options)


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    drain_timeout: float = 30.0,
    drain_accept_s: float = 0.0,
    log_level: str = "info",
    registry: Lifecycle = lifecycle,
    on_listening: Callable[[str], None] | None = None,
) -> list[tuple[str, BaseException]]:
    """Start components, serve until a signal, drain, stop components.

    ``drain_accept_s``: how long a draining server keeps accepting (and answering 503) before
    it closes its listener. ``port=0`` picks a free port; ``on_listening`` receives the base
    URL once bound. Returns the components whose stop raised (empty on a clean shutdown).
    """
    config = uvicorn_config(ASGI_APP, host=host, port=port,
                            timeout_graceful_shutdown=drain_timeout, log_level=log_level)
    server = DrainingServer(config, registry, drain_accept_s)
    registry.start_all()
    try:
        sock = config.bind_socket()
        # Listen now (asyncio would, a moment later) so that a client told the URL below can
        # connect straight away; early connections wait in the backlog.
        sock.listen(config.backlog)
        if on_listening is not None:
            on_listening(_url(sock))
        server.run(sockets=[sock])
    finally:
        errors = registry.stop_all()
    return errors


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if sock.family == socket.AF_INET6:
        host = f"[{host}]"
    return f"http://{host}:{port}"
