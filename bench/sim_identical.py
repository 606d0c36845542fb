"""Check that a change leaves the simulator's reports identical: run the same scenarios with
the code of a git revision and with the working tree, and compare every policy's numbers
(all but the measured times).

    .venv/bin/python bench/sim_identical.py --before HEAD~3
    .venv/bin/python bench/sim_identical.py --before main --runs "S2 0.045" "S1 0.2"
    .venv/bin/python bench/sim_identical.py --before HEAD~1 --runs "MT 0.5 --layer-pause"

The revision's tree is exported with ``git archive`` into a temporary directory; both sides
run ``python -m sim --scenario S --load L --duration 3600 --policy all`` (``inference.sim`` in
a tree from before the simulator left ``inference/``), with whatever options follow the load
in a run. Exits 1 when any policy's report differs, and prints the fields that do.
``--keep DIR`` keeps the revision's reports there and reuses them on the next call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = ("S2 0.045", "S2 0.1", "S1 0.2")
TIMING = ("wall_s", "scheduler_s")  # sim.summary.TIMING (the revision may lack it)


def module(tree: Path) -> str:
    """The simulator's module in ``tree``: ``sim``, or ``inference.sim`` before it moved."""
    return "sim" if (tree / "sim" / "__main__.py").exists() else "inference.sim"


def run_reports(tree: Path, runs: list[str], out: Path, duration: float) -> dict[str, dict]:
    env = dict(os.environ)
    env.setdefault("LASER_TRACES_DIR", str(ROOT.parent.parent / "shared" / "traces"))
    reports = {}
    for spec in runs:
        scenario, load, *options = spec.split()
        dest = out / "_".join(spec.split()).replace("-", "")
        if not (dest / "report.json").exists():
            subprocess.run([sys.executable, "-m", module(tree), "--scenario", scenario,
                            "--load", load, "--duration", str(duration), "--policy", "all",
                            *options, "--out", str(dest)], cwd=tree, env=env, check=True,
                           stdout=subprocess.DEVNULL)
        reports[spec] = json.loads((dest / "report.json").read_text())["policies"]
    return reports


def differences(before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    """Every field that differs, but the measured times (``TIMING``) and fields the
    revision's report does not have yet (a new counter is not a changed decision)."""
    out = []
    for spec, policies in before.items():
        for name, numbers in policies.items():
            other = after[spec].get(name, {})
            for key in sorted(numbers):
                if key not in TIMING and numbers.get(key) != other.get(key):
                    out.append(f"{spec} {name} {key}: {numbers.get(key)} -> {other.get(key)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision to compare against")
    ap.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS),
                    help='scenario, load and options, e.g. "S2 0.1" "MT 0.5 --layer-pause"')
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--keep", type=Path,
                    help="directory for the revision's reports (one per revision and duration)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        tree.mkdir()
        archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        before = run_reports(tree, args.runs, args.keep or Path(tmp) / "out_before",
                             args.duration)
        after = run_reports(ROOT, args.runs, Path(tmp) / "out_after", args.duration)
    diffs = differences(before, after)
    for spec, policies in before.items():
        for name in policies:
            same = not any(d.startswith(f"{spec} {name} ") for d in diffs)
            print(f"{spec} {name}: {'identical' if same else 'DIFFERENT'}")
    for line in diffs:
        print("  " + line)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
