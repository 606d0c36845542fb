"""``Content-Disposition`` for a download named by a user (an uploaded file's name).

Written by hand as ``filename="{name}"``, a name such as ``a"b;x=y.jsonl`` broke the header
(issue 41). Django's ``content_disposition_header`` quotes it as RFC 6266 asks (``\\"`` in a
quoted string, ``filename*=utf-8''...`` for non-ASCII); control characters, which no header may
carry (Django refuses the response), are replaced first.
"""

from __future__ import annotations

import re

from django.utils.http import content_disposition_header

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def attachment(filename: str) -> str:
    """The ``Content-Disposition`` value that downloads as ``filename``."""
    header = content_disposition_header(True, _CONTROL.sub("_", filename) or "download")
    assert header is not None
    return header
