"""The README's configuration tables are the variables the code reads, both ways.

The main table lists exactly the variables ``laser_platform/settings/`` reads through ``env()``;
"Read below the settings" lists exactly those read straight from ``os.environ`` anywhere else in
``apps/``, ``inference/``, ``kernels/``, ``laser_platform/`` and ``sim/``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_ENV_CALL = re.compile(r"\benv(?:_required)?\(\s*\"([A-Z][A-Z0-9_]*)\"")
_OS_ENVIRON = re.compile(
    r"\b(?:os\.)?environ(?:\.get|\.setdefault)?[(\[]\s*\"([A-Z][A-Z0-9_]*)\"|\bENV_VAR\s*=\s*\"([A-Z_]+)\"")
_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \|", re.M)


def _section(title: str, next_title: str) -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index(title):text.index(next_title)]


def _read_by(paths: list[Path], pattern: re.Pattern[str]) -> set[str]:
    names: set[str] = set()
    for path in paths:
        for match in pattern.finditer(path.read_text()):
            names.update(g for g in match.groups() if g)
    return names


def test_the_configuration_table_is_the_settings_table():
    settings_dir = ROOT / "laser_platform" / "settings"
    read = _read_by(sorted(settings_dir.glob("*.py")), _ENV_CALL)
    listed = set(_ROW.findall(_section("## Configuration", "### Read below the settings")))
    assert read, "no env() call found: the pattern is stale"
    assert read - listed == set(), "read by settings but missing from the README table"
    assert listed - read == set(), "in the README table but read by no setting"


def test_variables_read_below_the_settings_have_their_own_table():
    sources = [p for top in ("apps", "inference", "kernels", "laser_platform", "sim")
               for p in sorted((ROOT / top).rglob("*.py")) if "settings" not in p.parts]
    read = _read_by(sources, _OS_ENVIRON)
    listed = set(_ROW.findall(_section("### Read below the settings", "## Production layout")))
    assert {"LASER_KERNELS", "OMP_WAIT_POLICY"} <= read, "the pattern is stale"
    assert read - listed == set(), "read outside the settings but missing from the README"
    # CI is read by tests/conftest.py, outside the scanned trees
    assert listed - read - {"CI"} == set(), "in the README but read nowhere"


def test_the_engine_reads_no_environment():
    engine = sorted((ROOT / "inference" / "engine").rglob("*.py"))
    assert _read_by(engine, _OS_ENVIRON) == set()
    assert not any("os.environ" in p.read_text() for p in engine)
