"""``python -m sim.layer_ablation``: ``laser`` with layer pause on, layer-level decode
batching off and on (and the same without the TBT-cap turn-taking of ``share.py``, which the
batching can replace), on one scenario; prints a markdown table (docs/simulator.md)."""

from __future__ import annotations

import argparse

from inference.request import Tier
from sim.ablations import LaserAblations
from sim.config import Contracts, SimConfig
from sim.loop import simulate
from sim.scenarios import SCENARIOS
from sim.summary import summarize

HEADER = ("| scenario | load | hot TBT ms | tbt share | decode batching | hot att. | warm att. "
          "| cold att. | hot P99 TBT ms | warm tok/s | cold tok/s | split steps |")


def row(name: str, load: float, duration: float, hot_tbt: float, share: bool,
        batching: bool) -> str:
    trace = SCENARIOS[name](load, duration, 0)
    cfg = SimConfig(layer_pause=True, layer_decode_batching=batching,
                    contracts=Contracts(hot_tbt_s=hot_tbt),
                    ablations=LaserAblations(tbt_share_enabled=share))
    run = simulate(trace, cfg)
    s = summarize(run)
    cold = sum(r.tokens for r in run.accounting.records if r.tier is Tier.COLD)
    split = s["layer_batching"]["split_steps"] if batching else "-"
    on = {True: "on", False: "off"}
    return (f"| {name} | {load:g} | {hot_tbt * 1e3:g} | {on[share]} | {on[batching]} "
            f"| {s[Tier.HOT]['attainment']:.1%} | {s[Tier.WARM]['attainment']:.1%} "
            f"| {s[Tier.COLD]['attainment']:.1%} | {s[Tier.HOT]['tbt_p99_s'] * 1e3:.1f} "
            f"| {s[Tier.WARM]['rate_mean_tps']:.1f} | {cold / run.sim_end_s:.1f} | {split} |")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m sim.layer_ablation")
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    ap.add_argument("--load", type=float, required=True)
    ap.add_argument("--duration", type=float, default=900.0)
    ap.add_argument("--hot-tbt", type=float, default=Contracts().hot_tbt_s,
                    help="hot TBT target in seconds (the contract's default: 0.1)")
    args = ap.parse_args()
    print(HEADER)
    print("|---" * (HEADER.count("|") - 1) + "|")
    for share in (True, False):
        for batching in (False, True):
            print(row(args.scenario, args.load, args.duration, args.hot_tbt, share, batching),
                  flush=True)


if __name__ == "__main__":
    main()
