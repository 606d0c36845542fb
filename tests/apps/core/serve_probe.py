"""Child process for test_serve.py: the real server (core/server.py) with a recording component.

Usage: python serve_probe.py LOGFILE. Prints the URL once listening; every lifecycle event of
the probe component is appended to LOGFILE.
"""

from __future__ import annotations

import os
import sys

import django


def main(log_path: str) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "laser_platform.settings")
    django.setup()
    from apps.core.lifecycle import is_draining, register_component
    from apps.core.server import serve

    def record(event: str) -> None:
        with open(log_path, "a") as log:
            log.write(event + "\n")

    register_component("first", lambda: record("start first"), lambda: record("stop first"))
    register_component(
        "probe",
        start=lambda: record("start probe"),
        stop=lambda: record(f"stop probe draining={is_draining()}"),
        ready=lambda: True,
    )
    errors = serve(port=0, drain_timeout=5, log_level="warning", on_listening=_announce)
    record("exited")
    return 1 if errors else 0


def _announce(url: str) -> None:
    print(f"LISTENING {url}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
