"""Where llama.cpp's tree (``shared/peers/llama-server.sh``) lives, and its tools (test helper)."""

from __future__ import annotations

import os
from pathlib import Path

VERSION = "0.3.36"


def tree() -> Path:
    """``$LASER_LLAMA_CPP``, else the shared script's cache folder."""
    env = os.environ.get("LASER_LLAMA_CPP")
    if env:
        return Path(env)
    peers = Path(os.environ.get("LASER_PEERS_DIR", Path.home() / ".cache" / "laser-peers"))
    return peers / f"llama.cpp-{VERSION}"


def tool(name: str) -> Path | None:
    """A built llama.cpp tool (``llama-perplexity``, ``llama-quantize``), or None."""
    path = tree() / "build" / "bin" / name
    return path if os.access(path, os.X_OK) else None
