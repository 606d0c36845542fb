"""Cost of one ``schedule()`` call per policy with 256 running and 1,000 waiting requests.

    .venv/bin/python bench/scheduler_cost.py [--steps 60] [--running 256] [--waiting 1000]

Builds each policy over the KV pool of Llama-3-8B on an A100 (the simulator's sizing), fills
it with ``--running`` decoding sequences (hot:warm:cold 5:3:2), queues ``--waiting`` more
(10 % hot, 30 % warm, 60 % cold), then times ``schedule()`` alone over ``--steps`` steps
(``update()`` runs between them, untimed). ``laser`` gets the simulator's calibrated cost
model. Prints a table with ratios to ``fcfs`` and writes `bench/out/scheduler_cost.json`.
The target (issue 4) is <= 2 ms a call for ``laser``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.errors import AdmissionRefused  # noqa: E402
from inference.request import ContractTargets, Tier  # noqa: E402
from inference.sequence import Sequence  # noqa: E402
from sim import SimConfig  # noqa: E402
from sim.cost_model import cost_model_for  # noqa: E402
from sim.loop import build_scheduler  # noqa: E402
from sim.policies import POLICIES  # noqa: E402

ORDER = ["laser", "fcfs", "priority", "partitioned"]
OUT = Path(__file__).resolve().parent / "out" / "scheduler_cost.json"


def make_seq(i: int, tier: Tier, now: float, rng: random.Random) -> Sequence:
    prompt = rng.randint(64, 512)
    cold = tier is Tier.COLD
    deadline = now + rng.uniform(4, 8) * 3600 if cold else None
    return Sequence(f"{tier}-{i}-0", f"{tier}-{i}", 0, [0] * prompt, 5000,
                    tier, now,
                    targets=ContractTargets(ttft_p99_s=5.0), salt=f"s{i}", deadline=deadline)


def sample(plan) -> dict[str, int]:
    return {s.seq_id: 1 for s in plan.scheduled if s.sample}


def fill(sched, running: int, waiting: int, rng: random.Random) -> float:
    """Bring the scheduler to ``running`` decoding sequences and ``waiting`` queued ones."""
    # Running mix 5:3:2 hot:warm:cold, the shares ``partitioned`` sizes its pools by, so that
    # every policy can hold them all.
    tiers = [Tier.HOT] * 5 + [Tier.WARM] * 3 + [Tier.COLD] * 2
    now = 0.0
    for i in range(running):
        offer(sched, make_seq(i, tiers[i % 10], now, rng), now)
    for _ in range(3000):
        if not sched.waiting and not any(q.is_prefilling for q in sched.running):
            break
        plan = sched.schedule(now)
        now += 0.05
        sched.update(plan, sample(plan), now)
    mix = [Tier.HOT] * 1 + [Tier.WARM] * 3 + [Tier.COLD] * 6
    for j in range(waiting):
        offer(sched, make_seq(running + j, mix[j % 10], now, rng), now)
    return now


def offer(sched, seq: Sequence, now: float) -> None:
    try:
        sched.add([seq], now)
    except AdmissionRefused:  # laser's admission control: the table shows what it kept
        pass


def time_policy(policy: str, args) -> dict:
    cfg = SimConfig(policy=policy, max_num_seqs=args.running, max_waiting=10 * args.waiting)
    sched = build_scheduler(cfg, cost_model_for(cfg.gpu, cfg.model), prefix_caching=False)
    now = fill(sched, args.running, args.waiting, random.Random(args.seed))
    times, sizes = [], []
    for _ in range(args.steps):
        sizes.append((len(sched.running), len(sched.waiting)))
        t0 = time.perf_counter()
        plan = sched.schedule(now)
        times.append(time.perf_counter() - t0)
        now += 0.03
        sched.update(plan, sample(plan), now)
    times.sort()
    return {"policy": policy, "median_ms": 1e3 * statistics.median(times),
            "p90_ms": 1e3 * times[int(0.9 * (len(times) - 1))],
            "running_mean": statistics.fmean(r for r, _ in sizes),
            "waiting_mean": statistics.fmean(w for _, w in sizes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--waiting", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = [time_policy(p, args) for p in ORDER if p in POLICIES]
    base = next(r["median_ms"] for r in rows if r["policy"] == "fcfs")
    print("| policy | median ms | p90 ms | running | waiting | median / fcfs |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        r["ratio_to_fcfs"] = r["median_ms"] / base
        print(f"| {r['policy']} | {r['median_ms']:.2f} | {r['p90_ms']:.2f} | "
              f"{r['running_mean']:.0f} | {r['waiting_mean']:.0f} | {r['ratio_to_fcfs']:.2f} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
