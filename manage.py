#!/usr/bin/env python
"""Django's command-line utility for Laser."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "laser_platform.settings")
    # `serve` is the embedded process: apps register their components (engine, worker thread)
    # in AppConfig.ready(), which runs before the command itself, so the switch is set here.
    # LASER_EMBEDDED=0 in the environment still wins (a plain web front end).
    if sys.argv[1:2] == ["serve"]:
        os.environ.setdefault("LASER_EMBEDDED", "1")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
