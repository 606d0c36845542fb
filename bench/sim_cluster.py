"""Routers over N simulated replicas (issue 45, item 4): round-robin, least-loaded,
prefix-affinity, the cache oracle and Laser's router, on S2, MT and the long-shared-prefix
trace (SP), each scaled to N replicas (``--load`` is per replica).

Per run: hot attainment, hot P99 TTFT, warm windows kept, cold jobs on time, prefix-cache hit
rate, the busiest replica's requests over the mean, and the router's CPU (hashing prompts,
looking up caches, choosing) against the whole run's CPU. With ``--goodput LO HI``, each
router's goodput instead: the highest per-replica load at which every tier keeps its target
(``sim.summary.TARGETS``), by bisection to ``--tol``.

    .venv/bin/python bench/sim_cluster.py --scenario MT --replicas 16 --load 0.4 --duration 300
    .venv/bin/python bench/sim_cluster.py --scenario MT --replicas 16 --goodput 0.2 0.8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim import SimConfig  # noqa: E402
from sim.cluster import ClusterConfig, simulate_cluster, summarize_cluster  # noqa: E402
from sim.cluster_routers import ROUTERS  # noqa: E402
from sim.cluster_traces import CLUSTER_SCENARIOS, cluster_trace  # noqa: E402


def run(scenario: str, replicas: int, router: str, load: float, duration: float) -> dict:
    trace = cluster_trace(scenario, load, replicas, duration)
    cc = ClusterConfig(replicas, router, replica=SimConfig(drain_s=max(600.0, duration)))
    return summarize_cluster(simulate_cluster(trace, cc))


def goodput(scenario: str, replicas: int, router: str, lo: float, hi: float, tol: float,
            duration: float) -> tuple[float, list]:
    probes: list[tuple[float, bool]] = []

    def met(load: float) -> bool:
        ok = run(scenario, replicas, router, load, duration)["meets_targets"]
        probes.append((load, ok))
        print(f"  {router} load {load:.3f}: {'met' if ok else 'missed'}", flush=True)
        return ok

    if not met(lo):
        return 0.0, probes
    if met(hi):
        return hi, probes
    while hi - lo > tol * lo:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if met(mid) else (lo, mid)
    return lo, probes


def row(s: dict) -> str:
    h, w, c = s["hot"], s["warm"], s["cold"]
    return (f"| {s['router']} | {h['attainment']:.1%} | {h['ttft_p99_s']:.2f} | "
            f"{w['attainment']:.1%} | {c['attainment']:.1%} | {s['prefix_hit_rate']:.1%} | "
            f"{s['imbalance']:.2f} | {s['router_s']:.2f} / {s['cpu_s']:.1f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="MT", choices=sorted(CLUSTER_SCENARIOS))
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--routers", default=",".join(ROUTERS))
    ap.add_argument("--load", type=float, default=0.4, help="per replica")
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--goodput", type=float, nargs=2, metavar=("LO", "HI"))
    ap.add_argument("--tol", type=float, default=0.1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    routers = args.routers.split(",")
    out: dict = {"scenario": args.scenario, "replicas": args.replicas}
    if args.goodput:
        lo, hi = args.goodput
        for r in routers:
            load, probes = goodput(args.scenario, args.replicas, r, lo, hi, args.tol,
                                   args.duration)
            out[r] = {"goodput": load, "probes": probes}
        print("| router | goodput (load per replica) |\n| --- | --- |")
        for r in routers:
            print(f"| {r} | {out[r]['goodput']:.3f} |")
    else:
        print(f"{args.scenario}, {args.replicas} replicas, load {args.load} each, "
              f"{args.duration:.0f} s of arrivals")
        print("| router | hot attainment | hot P99 TTFT s | warm kept | cold on time | "
              "prefix hit | busiest / mean | router / run CPU s |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in routers:
            out[r] = run(args.scenario, args.replicas, r, args.load, args.duration)
            print(row(out[r]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
