"""Simulator speed (issue 19, item 7): a one-hour scenario at twice the load where ``laser``
falls below 90 % hot attainment, run through each policy, timed.

First the knee: a coarse bisection on short runs of ``laser`` for the load where its hot
attainment falls below 90 % (``--knee-range``, ``--knee-steps`` halvings of
``--knee-duration`` s each); the knee is the bracket's low end, the largest load probed that
still kept 90 %. ``--load`` skips the search and gives the knee itself. Then one run of
``--duration`` s of arrivals at twice the knee for each policy, the trace built once outside
the timings. Per policy: wall seconds, CPU seconds (``time.process_time``), the policy's own
share of them (CPU seconds inside ``schedule()``, ``RunResult.scheduler_s``) and its cost per
call, steps, hot attainment.

    nice -n 10 .venv/bin/python bench/sim_speed.py --scenario MT --out /tmp/sim_speed.json
    .venv/bin/python bench/sim_speed.py --scenario MT --load 0.75 --duration 1200 --policy laser
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim import SimConfig, simulate  # noqa: E402
from sim.__main__ import policies  # noqa: E402
from sim.scenarios import SCENARIOS  # noqa: E402
from sim.summary import summarize  # noqa: E402

HOT_FLOOR = 0.90
BUDGET_S = 60.0  # the item's bound on one policy's run


def hot_attainment(scenario: str, load: float, duration: float, seed: int) -> float:
    trace = SCENARIOS[scenario](load, duration, seed)
    return summarize(simulate(trace, SimConfig(policy="laser")))["hot"]["attainment"]


def find_knee(scenario: str, lo: float, hi: float, steps: int, duration: float,
              seed: int) -> tuple[float, float, list[tuple[float, float]]]:
    """The bracket [lo, hi] around the load where laser's hot attainment drops below 90 %,
    and the probes (load, attainment). ``lo`` is assumed to keep it, ``hi`` not."""
    probes = []
    for _ in range(steps):
        mid = (lo + hi) / 2
        att = hot_attainment(scenario, mid, duration, seed)
        probes.append((mid, att))
        print(f"knee probe: load {mid:g} hot {att:.1%}", file=sys.stderr)
        lo, hi = (mid, hi) if att >= HOT_FLOOR else (lo, mid)
    return lo, hi, probes


def time_policy(trace: list, policy: str) -> dict:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    run = simulate(trace, SimConfig(policy=policy))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    hot = summarize(run)["hot"]["attainment"]
    calls = max(1, run.schedule_calls)
    return {"wall_s": wall, "cpu_s": cpu, "scheduler_s": run.scheduler_s,
            "scheduler_ms_per_call": 1e3 * run.scheduler_s / calls,
            "schedule_calls": run.schedule_calls, "steps": run.steps, "hot_attainment": hot}


def table(rows: dict[str, dict]) -> str:
    lines = ["| policy | wall s | CPU s | scheduler CPU s | scheduler ms/call | schedule calls "
             "| steps | hot attainment | wall <= 60 s |", "|---" * 9 + "|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                     f"{r['scheduler_s']:.1f} | {r['scheduler_ms_per_call']:.3f} | "
                     f"{r['schedule_calls']} | {r['steps']} | {r['hot_attainment']:.1%} | "
                     f"{'yes' if r['wall_s'] <= BUDGET_S else 'no'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="MT", choices=sorted(SCENARIOS))
    ap.add_argument("--load", type=float, default=None,
                    help="the knee itself (skips the search); the runs use twice it")
    ap.add_argument("--knee-range", type=float, nargs=2, default=(0.5, 1.0),
                    metavar=("LO", "HI"))
    ap.add_argument("--knee-steps", type=int, default=3)
    ap.add_argument("--knee-duration", type=float, default=600.0)
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds of arrivals")
    ap.add_argument("--policy", action="append", default=None,
                    help="policy name, comma list, or 'all' (default: all); repeatable")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="JSON file for the results")
    args = ap.parse_args(argv)
    knee: dict = {"load": args.load}
    if args.load is None:
        lo, hi, probes = find_knee(args.scenario, *args.knee_range, args.knee_steps,
                                   args.knee_duration, args.seed)
        knee = {"load": lo, "bracket": [lo, hi], "probes": probes}
    load = 2 * knee["load"]
    trace = SCENARIOS[args.scenario](load, args.duration, args.seed)
    rows = {}
    for name in policies(args.policy):
        rows[name] = time_policy(trace, name)
        print(f"{name}: {rows[name]['wall_s']:.1f} s wall", file=sys.stderr)
    print(f"\n{args.scenario} at load {load:g} (2 x knee {knee['load']:g}), "
          f"{args.duration:g} s of arrivals, {len(trace)} requests\n")
    print(table(rows))
    result = {"scenario": args.scenario, "knee": knee, "load": load,
              "duration_s": args.duration, "requests": len(trace), "policies": rows,
              "command": "bench/sim_speed.py " + " ".join(sys.argv[1:] if argv is None
                                                          else argv)}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
