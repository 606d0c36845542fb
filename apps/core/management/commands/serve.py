"""``manage.py serve [--host] [--port]``: the one-process Laser server (see apps/core/server.py).

manage.py switches ``LASER_EMBEDDED`` on for this command so that apps register their
components; with ``LASER_EMBEDDED=0`` it is a plain web front end (production web process).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.lifecycle import lifecycle
from apps.core.server import serve


class Command(BaseCommand):
    help = "Serve Laser (ASGI) and, in embedded mode, its engine and worker in this process."
    requires_system_checks = ["models", "urls"]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
        parser.add_argument("--drain-timeout", type=float, default=None)
        parser.add_argument(
            "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug")
        )

    def handle(self, *args: Any, **options: Any) -> None:
        drain = options["drain_timeout"]
        drain = settings.LASER_DRAIN_TIMEOUT if drain is None else drain
        if not 0 <= options["port"] <= 65535:
            raise CommandError(f"--port must be within 0..65535, got {options['port']}")
        names = [c.name for c in lifecycle.components] or ["none"]
        mode = "embedded" if settings.LASER_EMBEDDED else "web only"
        self.stdout.write(f"Laser ({mode}); components: {', '.join(names)}")

        def listening(url: str) -> None:
            self.stdout.write(f"Laser is serving on {url}  (admin: {url}/admin/)")
            self.stdout.flush()

        errors = serve(
            host=options["host"],
            port=options["port"],
            drain_timeout=drain,
            drain_accept_s=settings.LASER_DRAIN_ACCEPT_S,
            log_level=options["log_level"],
            on_listening=listening,
        )
        if errors:
            names = ", ".join(name for name, _ in errors)
            raise CommandError(f"Stopped, but these components failed to stop: {names}")
        self.stdout.write("Laser stopped.")
