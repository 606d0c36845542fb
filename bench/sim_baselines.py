"""Baselines at their best token budget against ``laser`` (issue 19, item 1).

For each baseline (``fcfs`` = Sarathi-Serve's FCFS with chunked prefill at the budget,
``priority`` = static tier priority with chunked prefill, ``edf`` = earliest TTFT deadline
first), find its goodput at each token budget and keep the budget that maximises it; then
``laser``'s goodput at its default budget, and the ratio against the best baseline. Goodput at
two operating points: every tier >= 90 % attainment, and hot >= 99 % / warm >= 90 % /
cold >= 99 % (``summary.TARGETS``). Each probe is a whole simulation.

    .venv/bin/python bench/sim_baselines.py --scenario S2 --duration 1200 --range 0.02 0.3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim import SimConfig  # noqa: E402
from sim.goodput import find_goodput  # noqa: E402
from sim.scenarios import SCENARIOS  # noqa: E402
from sim.summary import TARGETS  # noqa: E402

POINTS = {"90%": {"hot": 0.90, "warm": 0.90, "cold": 0.90}, "99%": TARGETS}
BASELINES = ("fcfs", "priority", "edf")


def goodput(scenario: str, policy: str, budget: int, duration: float, lo: float, hi: float,
            tol: float, targets: dict) -> float:
    make = SCENARIOS[scenario]
    cfg = SimConfig(policy=policy, max_num_batched_tokens=budget, long_prefill_chunk=budget)
    return find_goodput(lambda load: make(load, duration, 0), cfg, lo=lo, hi=hi,
                        rel_tol=tol, targets=targets).load


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="S2", choices=sorted(SCENARIOS))
    ap.add_argument("--duration", type=float, default=1200.0)
    ap.add_argument("--range", type=float, nargs=2, default=(0.02, 0.3))
    ap.add_argument("--tol", type=float, default=0.1)
    ap.add_argument("--budgets", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--laser-budget", type=int, default=2048)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    lo, hi = args.range
    results: dict = {}
    for point, targets in POINTS.items():
        row: dict = {}
        for name in BASELINES:
            by_budget = {b: goodput(args.scenario, name, b, args.duration, lo, hi, args.tol,
                                    targets) for b in args.budgets}
            best = max(by_budget, key=lambda b: (by_budget[b], -b))
            row[name] = {"by_budget": by_budget, "best_budget": best,
                         "goodput": by_budget[best]}
            print(f"{point} {name}: {by_budget}", file=sys.stderr)
        g = goodput(args.scenario, "laser", args.laser_budget, args.duration, lo, hi,
                    args.tol, targets)
        best_name = max(BASELINES, key=lambda n: row[n]["goodput"])
        best = row[best_name]["goodput"]
        row["laser"] = {"goodput": g, "budget": args.laser_budget}
        row["ratio"] = {"against": best_name, "value": g / best if best else None}
        results[point] = row
        print(f"{point} laser: {g}", file=sys.stderr)
    print(f"\n{args.scenario}, {args.duration:g} s, goodput bisected in [{lo:g}, {hi:g}] "
          f"(tolerance {args.tol:g})\n")
    print("| attainment | " + " | ".join(f"{n} (best budget)" for n in BASELINES)
          + " | laser | laser / best |")
    print("|---" * (len(BASELINES) + 3) + "|")
    for point, row in results.items():
        cells = [f"{row[n]['goodput']:.3f} ({row[n]['best_budget']})" for n in BASELINES]
        r = row["ratio"]["value"]
        ratio = "-" if r is None else f"{r:.2f}x ({row['ratio']['against']})"
        print(f"| {point} | " + " | ".join(cells) + f" | {row['laser']['goodput']:.3f} | "
              f"{ratio} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
