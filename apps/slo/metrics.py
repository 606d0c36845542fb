"""Prometheus metrics (filled in below; the writer calls ``observe_reports``)."""

from __future__ import annotations


def observe_reports(reports) -> None:
    return None
