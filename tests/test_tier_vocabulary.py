"""One tier vocabulary (issue 21 item 2): the tier names are spelled once, by ``Tier`` in
``inference/request.py`` (``apps.core.tiers`` re-exports it and hands the names to the pages).
Product code names a tier through the enum, never as a string; pages take the names from the
server (``json_script``) instead of writing them out. Migrations are frozen history and stay
as they were."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from inference.request import Tier

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("apps", "inference", "kernels", "laser_platform")
DEFINITION = ROOT / "inference" / "request.py"
NAMES = frozenset(str(t) for t in Tier)
QUOTED = re.compile(r"""(["'`])(%s)\1""" % "|".join(sorted(NAMES)))


def _product_files(*suffixes: str) -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*")
                  if p.suffix in suffixes and "migrations" not in p.parts
                  and "vendor" not in p.parts and p != DEFINITION)


def _python_literals(source: str) -> list[tuple[int, str]]:
    """(line, name) of every string constant that is exactly a tier name."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and node.value in NAMES]


def test_the_scan_covers_the_product_and_sees_a_literal():
    assert len(_product_files(".py")) > 100 and len(_product_files(".js", ".html")) > 4
    source = 'tier = "warm"\nsame = Tier.WARM\ntext = "a warm day"\n'
    assert _python_literals(source) == [(1, "warm")]
    assert QUOTED.search("const t = 'cold';") and not QUOTED.search("cold_deadline")


def test_no_tier_name_is_spelled_as_a_python_string():
    found = [f"{path.relative_to(ROOT)}:{line}: {name!r}" for path in _product_files(".py")
             for line, name in _python_literals(path.read_text())]
    assert found == [], "use inference.request.Tier (apps.core.tiers in the apps):\n" + \
        "\n".join(found)


def test_no_tier_name_is_spelled_in_scripts_or_templates():
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in _product_files(".js", ".html")
             for n, line in enumerate(path.read_text().splitlines(), 1) if QUOTED.search(line)]
    assert found == [], "pass the names from apps.core.tiers (json_script):\n" + \
        "\n".join(found)
