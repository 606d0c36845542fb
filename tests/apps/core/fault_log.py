"""``assert_fault_logged``: the check every door's 500 test makes (issue 41)."""

from __future__ import annotations

import logging
from typing import Any

BUG = "the platform's own bug"


def assert_fault_logged(caplog: Any, rid: str, *, cause: str = BUG) -> None:
    """Exactly one ``laser.errors`` record names ``rid`` and carries the traceback of ``cause``;
    the client was told ``rid`` (the caller checks that)."""
    records = [r for r in caplog.records if r.name == "laser.errors"
               and r.levelno >= logging.ERROR and rid in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    exc_info = records[0].exc_info
    assert exc_info and exc_info[2] is not None and cause in str(exc_info[1])
