"""UTC windows: minute, hour and day, each ``[start, start + length)``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

LENGTH = {
    "minute": dt.timedelta(minutes=1),
    "hour": dt.timedelta(hours=1),
    "day": dt.timedelta(days=1),
}
WINDOWS = tuple(LENGTH)


def floor(moment: dt.datetime, window: str) -> dt.datetime:
    """Start of the ``window`` holding ``moment`` (aware UTC)."""
    moment = moment.astimezone(dt.UTC)
    if window == "minute":
        return moment.replace(second=0, microsecond=0)
    if window == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    if window == "day":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    raise ValueError(f"unknown window {window!r}")


def starts(window: str, since: dt.datetime, until: dt.datetime) -> Iterator[dt.datetime]:
    """Starts of every window overlapping ``[since, until)``."""
    step, start = LENGTH[window], floor(since, window)
    while start < until:
        yield start
        start += step
