"""``python -m sim``: replay a scenario or a JSONL trace through one or several
scheduling policies and print their SLO report side by side (see docs/simulator.md)."""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import replace
from pathlib import Path

from inference.request import Tier
from sim.ablations import ABLATIONS, LaserAblations
from sim.bound import hot_miss_bound
from sim.config import DEFAULT_BUDGET, Contracts, SimConfig
from sim.cost_model import cost_model_for
from sim.goodput import find_goodput
from sim.loop import simulate
from sim.plots import write_plots
from sim.policies import POLICIES
from sim.profiles import GPUS, MODELS
from sim.report import format_ratios, ratios, table, write_json
from sim.scenarios import SCENARIOS
from sim.summary import summarize
from sim.traces import TraceRequest, read_jsonl

BASELINE_ORDER = ["laser", "fcfs", "priority", "edf", "partitioned"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--scenario", choices=sorted(SCENARIOS))
    src.add_argument("--trace", type=Path, help="JSONL trace (docs/simulator.md)")
    ap.add_argument("--policy", action="append", default=None,
                    help="policy name, comma list, or 'all' (default: all); repeatable")
    ap.add_argument("--gpu", choices=sorted(GPUS), default="a100")
    ap.add_argument("--model", choices=sorted(MODELS), default="llama3-8b")
    ap.add_argument("--load", type=float, default=1.0, help="arrival-rate multiplier")
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds of arrivals")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-batched-tokens", type=int, default=DEFAULT_BUDGET,
                    help="per-step token budget of every policy")
    ap.add_argument("--chunk", type=int, default=None,
                    help="longest prefill chunk of one sequence (default: the budget)")
    ap.add_argument("--goodput", action="store_true",
                    help="also bisect each policy's largest load meeting every tier's target")
    ap.add_argument("--goodput-range", type=float, nargs=2, default=(0.05, 2.0),
                    metavar=("LO", "HI"))
    ap.add_argument("--goodput-tol", type=float, default=0.05,
                    help="stop bisecting when the bracket is within this fraction")
    ap.add_argument("--ablate", action="append", default=[], metavar="PART",
                    choices=sorted(ABLATIONS),
                    help="switch one of laser's parts off (LaserAblations); repeatable")
    ap.add_argument("--layer-pause", action="store_true",
                    help="run laser's steps without hot work layer by layer, stopping for hot "
                         "(the engine's layer pause)")
    ap.add_argument("--layer-decode-batching", action="store_true",
                    help="let warm, demoted and cold decodes run part of the model's layers "
                         "a step when the whole step would pass the hot TBT cap")
    ap.add_argument("--out", type=Path, help="directory for report.json and PNG plots")
    return ap.parse_args(argv)


def policies(arg: list[str] | None) -> list[str]:
    names = [n.strip() for a in (arg or ["all"]) for n in a.split(",") if n.strip()]
    if "all" in names:
        return [p for p in BASELINE_ORDER if p in POLICIES] + sorted(
            set(POLICIES) - set(BASELINE_ORDER))
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise SystemExit(f"unknown policy {unknown}; known: {sorted(POLICIES)}")
    return names


def trace_source(args: argparse.Namespace):
    """A function load -> trace, for the run and for the goodput bisection."""
    if args.scenario:
        make = SCENARIOS[args.scenario]
        return lambda load: make(load, args.duration, args.seed)
    base = read_jsonl(args.trace)
    return lambda load: [replace(r, arrival_s=r.arrival_s / load) for r in base
                         if r.arrival_s / load < args.duration]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    names = policies(args.policy)
    trace_at = trace_source(args)
    trace: list[TraceRequest] = trace_at(args.load)
    summaries, probes = {}, {}
    for name in names:
        cfg = SimConfig(policy=name, gpu=args.gpu, model=args.model,
                        max_num_batched_tokens=args.max_batched_tokens,
                        long_prefill_chunk=args.chunk or args.max_batched_tokens,
                        ablations=LaserAblations(**dict.fromkeys(args.ablate, False)),
                        layer_pause=args.layer_pause,
                        layer_decode_batching=args.layer_decode_batching)
        summaries[name] = summarize(simulate(trace, cfg))
        if args.goodput:
            lo, hi = args.goodput_range
            g = find_goodput(trace_at, cfg, lo=lo, hi=hi, rel_tol=args.goodput_tol)
            summaries[name]["goodput"] = g.load
            probes[name] = g.probes
        print(f"{name}: {summaries[name]['wall_s']:.1f} s wall", file=sys.stderr)
    source = args.scenario or str(args.trace)
    title = (f"{source} {args.model} on {args.gpu}, load {args.load:g}, {args.duration:g} s, "
             f"{args.max_batched_tokens} tokens/step")
    rat = ratios(summaries)
    print(f"\n{title} ({len(trace)} requests)\n")
    print(table(summaries))
    if rat:
        print("\n" + format_ratios(rat))
    bound = hot_miss_bound(trace, cost_model_for(args.gpu, args.model), Contracts(),
                           budget=args.max_batched_tokens,
                           chunk=args.chunk or args.max_batched_tokens,
                           max_len=MODELS[args.model].max_context)
    if bound is not None and bound.hot:
        print(f"hot misses no policy avoids: >= {bound.misses} of {bound.hot} "
              f"(hot attainment <= {bound.max_attainment:.1%})")
    report = {"title": title, "command": "python -m sim " + " ".join(
        sys.argv[1:] if argv is None else argv), "date": datetime.date.today().isoformat(),
        "requests": len(trace), "policies": summaries, "ratios": rat, "goodput_probes": probes,
        "hot_bound": None if bound is None else {Tier.HOT: bound.hot, "misses": bound.misses}}
    if args.out:
        write_json(args.out / "report.json", report)
        for f in write_plots(args.out, summaries, title, probes or None):
            print(f"wrote {f}", file=sys.stderr)
    return report


if __name__ == "__main__":
    main()
