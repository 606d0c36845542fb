"""Loading a ``bench/`` script as a module, its folder on ``sys.path`` while it is in use (the
scripts import each other by bare name)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> Iterator[ModuleType]:
    """Yields ``bench/<name>.py`` loaded as ``bench_<name>``; for a module-scoped fixture."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def peers() -> Iterator[ModuleType]:
    yield from bench_module("peers")


@pytest.fixture(scope="module")
def noisy() -> Iterator[ModuleType]:
    yield from bench_module("noisy_neighbour")


@pytest.fixture(scope="module")
def roofline() -> Iterator[ModuleType]:
    yield from bench_module("roofline")
