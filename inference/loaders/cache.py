"""On-disk cache of dequantised, fused weights (safetensors) so the second start is fast.

Layout: `<cache_dir>/<key>/weights.safetensors` + `meta.json` (config, tokenizer, chat template).
The key hashes the source's path, size and mtime of its files and `CACHE_VERSION`, so editing
or replacing the source (or changing the fused layout) makes a new entry. Writes go to a
temporary name first and are renamed into place, so a crashed or concurrent writer never leaves
a half-written entry behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

CACHE_VERSION = 3  # 2: with the raw GGUF blocks; 3: of the Q5 and K-quant types too
_WEIGHTS, _META = "weights.safetensors", "meta.json"


def default_cache_dir() -> Path:
    """`$LASER_MODEL_CACHE`, else `var/models/` at the repository root."""
    env = os.environ.get("LASER_MODEL_CACHE")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "var" / "models"


def source_key(source: Path) -> str:
    """Stable id of a GGUF file or HF directory from its files' names, sizes and mtimes."""
    files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.is_file())
    h = hashlib.sha256(f"v{CACHE_VERSION}|{source.resolve()}".encode())
    for f in files:
        st = f.stat()
        h.update(f"|{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def read_entry(cache_dir: Path, key: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """(state dict, meta) if a complete entry exists, else None."""
    entry = cache_dir / key
    try:
        meta = json.loads((entry / _META).read_text(encoding="utf-8"))
        return load_file(str(entry / _WEIGHTS)), meta
    except (OSError, ValueError):
        return None


def write_entry(cache_dir: Path, key: str, state: dict[str, torch.Tensor],
                meta: dict[str, Any]) -> Path | None:
    """Store an entry atomically; returns its directory, or None if the cache is not writable."""
    entry = cache_dir / key
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache_dir))
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / _WEIGHTS))
        (tmp / _META).write_text(json.dumps(meta), encoding="utf-8")
        try:
            os.replace(tmp, entry)
        except OSError:  # another process won the race; its entry is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
        return entry
    except OSError:
        return None
