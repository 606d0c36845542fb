"""Hot TBT when the batch is shared (issue 23), in process on the bundled model: 2 hot chat
streams (TBT target 0.1 s; TTFT target 30 s, so that they are not demoted) beside 14 warm
bulk streams (``--bulk cold``: cold ones, as ``service_tier: "flex"`` sends; ``--bulk
excess``: hot streams above their tenant's contract), with laser's
shared-batch TBT cap on and off (``sim.ablations.NoTbtShare`` for off), runs interleaved
on/off so both see the same machine.

    .venv/bin/python bench/shared_batch_tbt.py [--pairs 2] [--tokens 48] [--threads 1]
        [--bulk warm|cold|excess]

Per run, from the engine's own token times: the hot streams' per-request P99 gap (the worst of
the two) and mean gap, the warm streams' mean gap, and the run's wall time. Writes
``bench/out/shared_batch_tbt_<bulk>.json``, prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inference.engine import EngineConfig, LLMEngine  # noqa: E402
from inference.request import ContractTargets, EngineRequest, SamplingParams, Tier  # noqa: E402
from inference.scheduler.laser.parts import FillRules  # noqa: E402
from sim.ablations import NoTbtShare  # noqa: E402

OUT = ROOT / "bench" / "out" / "shared_batch_tbt.json"
# the default TBT target (0.1 s) and a TTFT target loose enough that on a loaded machine the
# chats are not demoted before they decode (this measures TBT, not TTFT)
CHAT = ContractTargets(ttft_p99_s=30.0)


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")


def one_run(engine: LLMEngine, share: bool, tokens: int, tag: str, bulk: str) -> dict:
    sched = engine.scheduler
    sched.rules = (FillRules if share else NoTbtShare)(sched.policy)  # the fill's caps
    sp = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    times: dict[str, list[float]] = {}
    tier = {"warm": Tier.WARM, "cold": Tier.COLD, "excess": Tier.HOT}[bulk]
    deadline = time.time() + 3600 if tier is Tier.COLD else None
    for i in range(14):  # bulk first, so the chats join a full batch
        engine.add_request(EngineRequest(f"{tag}w{i}", sp, prompt=f"Write about topic {i}.",
                                         tier=tier, tenant_id="bulk", targets=CHAT,
                                         in_contract=bulk != "excess", deadline=deadline))
    for _ in range(3):
        engine.step()
    for i in range(2):
        engine.add_request(EngineRequest(f"{tag}h{i}", sp, prompt=f"Hello, chat {i}!",
                                         tier=Tier.HOT, tenant_id="chat", targets=CHAT))
    t0 = time.time()
    while engine.has_unfinished():
        for d in engine.step():
            times.setdefault(d.request_id, []).extend(d.token_times)
    gaps = {r: [b - a for a, b in zip(ts, ts[1:])] for r, ts in times.items()}
    hot = [g for r, g in gaps.items() if "h" in r[len(tag):]]
    warm = [g for r, g in gaps.items() if "w" in r[len(tag):]]
    return {"share": share, "wall_s": time.time() - t0,
            "hot_request_p99_s": max(p99(g) for g in hot),
            "hot_mean_gap_s": statistics.mean(x for g in hot for x in g),
            "warm_mean_gap_s": statistics.mean(x for g in warm for x in g)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bulk", choices=("warm", "cold", "excess"), default="warm",
                    help="the 14 bulk streams: warm, cold (an hour's deadline, as the "
                         "service_tier 'flex'), or hot above their tenant's contract")
    args = ap.parse_args()
    engine = LLMEngine(EngineConfig(num_threads=args.threads))
    runs = []
    for k in range(args.pairs):
        for share in (True, False) if k % 2 == 0 else (False, True):
            runs.append(one_run(engine, share, args.tokens, f"{k}{int(share)}", args.bulk))
            print(runs[-1], file=sys.stderr, flush=True)
    print("| share | hot per-request TBT p99 ms | hot mean gap ms | warm mean gap ms | wall s |")
    print("| --- | --- | --- | --- | --- |")
    for r in runs:
        print(f"| {'on' if r['share'] else 'off'} | {1e3 * r['hot_request_p99_s']:.0f} | "
              f"{1e3 * r['hot_mean_gap_s']:.0f} | {1e3 * r['warm_mean_gap_s']:.0f} | "
              f"{r['wall_s']:.1f} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    out = OUT.with_name(f"shared_batch_tbt_{args.bulk}.json")
    out.write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
