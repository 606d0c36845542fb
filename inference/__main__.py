"""`python -m inference ...`: see `inference.cli`."""

from __future__ import annotations

from inference.cli import main

raise SystemExit(main())
