"""Hot chat under a cold flood on the real engine, per scheduling policy.

    .venv/bin/python bench/mixed_load.py [--docs 200] [--policies laser,laser-nopause,priority,fcfs]

The bundled SmolLM2-135M on this CPU, contracts scaled to it (hot P99 TTFT 1 s, TBT 150 ms).
Hot: chat turns arriving as a Poisson process, at most ``--streams`` (4) open at once, at the
rate that keeps the engine about ``--busy`` (40 %) busy when alone. Cold: ``--docs`` documents of
200-400 prompt tokens and 32 output tokens, all arriving at once, deadline = 3x
(``--deadline-factor``) the time the batch takes alone (measured first, with ``fcfs``, in the
same run).

For each policy, two phases on a fresh engine with the same seeds: hot alone for ``--hot-s``
seconds and at least ``--min-hot`` finished turns, then hot plus the flood until the batch
finishes. Reported: hot P99 TTFT and P99 TBT in each phase, the TTFT increase the flood
caused, the batch's completion time against its deadline, and **cold tokens per second of
engine time not spent on hot work** during the flood (issue 19, item 5; target: laser >= 0.9x
fcfs): every step's time is split between hot and the rest by its plan's token counts; in a
step that also advanced a paused forward (layer pause) only the step's own forward is split so,
and the paused forward's layers count as not hot (until 2026-12-04 such a step counted wholly
as not hot, its hot forward included, which lowered laser's figure). Cold tokens are the
prompt and output tokens of the batch's requests computed in the flood (prefill included:
cold's work is mostly its prompts). The engine is
stepped in this thread (no HTTP); a feeder thread adds hot arrivals at their own times, also
mid-step (as the platform's event loop does), and TTFT/TBT come from the engine's own token
timestamps. Prints a table; writes ``bench/out/mixed_load.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.engine import EngineConfig, LLMEngine  # noqa: E402
from inference.errors import AdmissionRefused  # noqa: E402
from inference.request import ContractTargets, EngineRequest, SamplingParams, Tier  # noqa: E402

HOT = ContractTargets(ttft_p99_s=1.0, tbt_p99_s=0.15)
QUESTIONS = ["Tell me about the moon.", "How do bees make honey?", "What is a prime number?",
             "Describe a thunderstorm.", "Why do leaves change colour?", "What is gravity?"]


@dataclass
class Phase:
    """Per-request first-token delays, token gaps and finish times of one phase."""

    arrivals: dict[str, float] = field(default_factory=dict)
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    gaps: list[float] = field(default_factory=list)  # between a hot turn's tokens
    finished: dict[str, float] = field(default_factory=dict)
    refused: int = 0

    def observe(self, delta) -> None:
        rid = delta.request_id
        for t in delta.token_times:
            if rid not in self.first:
                self.first[rid] = t
            elif rid.startswith("hot"):
                self.gaps.append(t - self.last[rid])
            self.last[rid] = t
        if delta.finish_reason is not None:
            self.finished[rid] = time.time()

    def ttfts(self, prefix: str) -> list[float]:
        return [self.first[r] - a for r, a in self.arrivals.items()
                if r.startswith(prefix) and r in self.first]


def p99(values: list[float]) -> float:
    return float(np.percentile(values, 99)) if values else float("nan")


def hot_request(rid: str, rng: random.Random, arrival: float, tokens: int) -> EngineRequest:
    sp = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    msg = [{"role": "user", "content": rng.choice(QUESTIONS)}]
    return EngineRequest(rid, sp, messages=msg, tier=Tier.HOT, tenant_id="hot", targets=HOT,
                         arrival_time=arrival)


def cold_requests(n: int, deadline: float | None, vocab: int, seed: int) -> list[EngineRequest]:
    rng = random.Random(seed)
    sp = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)
    now = time.time()
    targets = ContractTargets(cold_deadline_s=max(1.0, (deadline or now + 3600) - now))
    return [EngineRequest(f"cold-{i}", sp, tier=Tier.COLD, tenant_id="batch", targets=targets,
                          prompt_token_ids=[rng.randrange(100, vocab) for _ in
                                            range(rng.randint(200, 400))],
                          arrival_time=now, deadline=deadline)
            for i in range(n)]


class Driver:
    """Steps one engine in this thread while a feeder thread adds hot arrivals (Poisson,
    bounded concurrency) at their own times, as the platform's event loop does: a turn that
    arrives mid-step waits for that step (or for a layer boundary where the policy pauses)."""

    def __init__(self, engine: LLMEngine, rate: float, streams: int, tokens: int, seed: int):
        self.engine, self.rate, self.streams, self.tokens = engine, rate, streams, tokens
        self.rng = random.Random(seed)
        self.next_at = time.time() + self.rng.expovariate(rate) if rate else float("inf")
        self.count = 0
        self.busy_s = 0.0
        self.hot_s = 0.0  # the hot share of the steps' time (see the module docstring)
        self.cold_tokens = 0  # cold tokens the steps computed
        self._plans: list = []
        self._forward_s = 0.0  # this step's whole forwards (runner.execute), seconds
        sched = engine.scheduler
        schedule = sched.schedule
        execute = engine.runner.execute

        def watched(now):
            plan = schedule(now)
            self._plans.append(plan)
            return plan

        def timed(batch):
            t0 = time.perf_counter()
            try:
                return execute(batch)
            finally:
                self._forward_s += time.perf_counter() - t0
        sched.schedule = watched
        engine.runner.execute = timed

    def _account(self, seconds: float, held: bool) -> None:
        """Split a step's ``seconds`` between hot and the rest by its plan's tokens. A step
        that also advanced a paused forward (``held``) splits only its own forward's time
        (``runner.execute``) that way; the rest, the paused forward's layers, is not hot."""
        forward_s, self._forward_s = self._forward_s, 0.0
        if held:
            seconds = forward_s
        seqs = self.engine.scheduler.seqs
        for plan in self._plans:
            tiers = [(seqs[x.seq_id].asked_tier if x.seq_id in seqs else None, x.num_tokens)
                     for x in plan.scheduled]
            hot = sum(n for t, n in tiers if t is Tier.HOT)
            self.cold_tokens += sum(n for t, n in tiers if t is Tier.COLD)
            if plan.num_batched_tokens:
                self.hot_s += seconds * hot / plan.num_batched_tokens
        self._plans.clear()

    def open_hot(self, phase: Phase) -> int:
        return sum(1 for r in list(phase.arrivals)
                   if r.startswith("hot") and r not in phase.finished)

    def run(self, phase: Phase, until) -> None:
        stop = threading.Event()
        feeder = threading.Thread(target=self._feed, args=(phase, stop), daemon=True)
        feeder.start()
        try:
            while not until():
                if not self.engine.has_unfinished():
                    time.sleep(0.002)
                    continue
                held = bool(getattr(self.engine.scheduler, "held", None))
                t0 = time.perf_counter()
                for d in self.engine.step():
                    phase.observe(d)
                dt = time.perf_counter() - t0
                self.busy_s += dt
                self._account(dt, held)
        finally:
            stop.set()
            feeder.join()

    def _feed(self, phase: Phase, stop: threading.Event) -> None:
        while not stop.is_set():
            wait = self.next_at - time.time()
            if wait > 0:
                stop.wait(min(wait, 0.05))
                continue
            if self.open_hot(phase) >= self.streams:  # the turn waits for a free stream
                stop.wait(0.002)
                continue
            rid = f"hot-{self.count}"
            self.count += 1
            self.next_at += self.rng.expovariate(self.rate)
            now = time.time()
            phase.arrivals[rid] = now
            try:
                self.engine.add_request(hot_request(rid, self.rng, now, self.tokens))
            except AdmissionRefused:  # laser's overload refusal: counted, not served
                del phase.arrivals[rid]
                phase.refused += 1


def make_engine(policy: str, args) -> LLMEngine:
    """``laser-nopause`` is ``laser`` without layer pause (the ablation)."""
    base = policy.removesuffix("-nopause")
    return LLMEngine(EngineConfig(policy=base, max_num_seqs=64, num_threads=args.threads,
                                  max_num_batched_tokens=512, max_waiting=4096,
                                  matmul_dtype=args.matmul_dtype,
                                  layer_pause=base == policy))


def cold_alone(args) -> float:
    engine = make_engine("fcfs", args)
    phase = Phase()
    for r in cold_requests(args.docs, None, engine.model_config.vocab_size, args.seed):
        engine.add_request(r)
    t0 = time.time()
    Driver(engine, 0.0, 0, 0, args.seed).run(phase, lambda: not engine.has_unfinished())
    return time.time() - t0


def hot_service_s(args) -> float:
    engine = make_engine("fcfs", args)
    rng = random.Random(args.seed)
    engine.add_request(hot_request("warmup", rng, time.time(), 4))
    while engine.has_unfinished():
        engine.step()
    t0 = time.time()
    engine.add_request(hot_request("probe", rng, t0, args.hot_tokens))
    while engine.has_unfinished():
        engine.step()
    return time.time() - t0


def run_policy(policy: str, args, rate: float, deadline_s: float) -> dict:
    engine = make_engine(policy, args)
    driver = Driver(engine, rate, args.streams, args.hot_tokens, args.seed)
    alone = Phase()
    t_start = time.time()
    # long enough for a P99 to mean something: --hot-s and at least --min-hot finished turns
    driver.run(alone, lambda: time.time() - t_start >= args.hot_s
               and sum(r.startswith("hot") for r in alone.finished) >= args.min_hot)
    busy_alone = driver.busy_s / (time.time() - t_start)
    flood = Phase()
    t_flood = time.time()
    busy0, hot0, cold0 = driver.busy_s, driver.hot_s, driver.cold_tokens
    cold = cold_requests(args.docs, t_flood + deadline_s, engine.model_config.vocab_size,
                         args.seed)
    for r in cold:
        try:
            engine.add_request(r)
            flood.arrivals[r.request_id] = t_flood
        except AdmissionRefused:
            flood.refused += 1
    # hot turns still open from the first phase finish there
    cold_ids = {r.request_id for r in cold} & set(flood.arrivals)

    def batch_done() -> bool:
        return cold_ids <= set(flood.finished) or time.time() - t_flood > 4 * deadline_s
    driver.run(flood, batch_done)
    done_at = max((flood.finished.get(r, float("inf")) for r in cold_ids), default=t_flood)
    completion = done_at - t_flood
    not_hot_s = (driver.busy_s - busy0) - (driver.hot_s - hot0)
    return {
        "policy": policy, "hot_requests_alone": len(alone.ttfts("hot")),
        "hot_requests_flood": len(flood.ttfts("hot")), "busy_alone": busy_alone,
        "hot_p99_ttft_alone_s": p99(alone.ttfts("hot")),
        "hot_p99_ttft_flood_s": p99(flood.ttfts("hot")),
        "hot_p99_tbt_alone_s": p99(alone.gaps), "hot_p99_tbt_flood_s": p99(flood.gaps),
        "cold_completion_s": completion, "cold_deadline_s": deadline_s,
        "cold_met": completion <= deadline_s, "cold_refused": flood.refused,
        "cold_tokens": driver.cold_tokens - cold0, "not_hot_engine_s": not_hot_s,
        "cold_tps_not_hot": (driver.cold_tokens - cold0) / not_hot_s if not_hot_s > 0 else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--policies", default="laser,laser-nopause,priority,fcfs",
                    help="laser-nopause: laser without layer pause")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--busy", type=float, default=0.4)
    ap.add_argument("--hot-tokens", type=int, default=48)
    ap.add_argument("--hot-s", type=float, default=30.0)
    ap.add_argument("--min-hot", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--matmul-dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                    help="CPU matmul precision (the platform serves with auto)")
    ap.add_argument("--deadline-factor", type=float, default=3.0,
                    help="the batch's deadline in multiples of its time alone")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    service = hot_service_s(args)
    rate = args.busy / service
    alone_s = cold_alone(args)
    deadline_s = args.deadline_factor * alone_s
    print(f"hot turn alone {service:.2f} s -> {rate:.2f} turns/s; cold batch of {args.docs} "
          f"alone {alone_s:.1f} s -> deadline {deadline_s:.1f} s")
    rows = [run_policy(p, args, rate, deadline_s) for p in args.policies.split(",")]
    head = ("policy", "busy", "TTFT p99 alone", "flood", "+%", "TBT p99 alone", "flood",
            "cold done s", "deadline", "met", "cold tok/s*")
    print("".join(f"{h:>15}" for h in head))
    for r in rows:
        rise = r["hot_p99_ttft_flood_s"] / r["hot_p99_ttft_alone_s"] - 1
        r["hot_ttft_increase"] = rise
        cells = (r["policy"], f"{r['busy_alone']:.0%}", f"{r['hot_p99_ttft_alone_s']:.3f}",
                 f"{r['hot_p99_ttft_flood_s']:.3f}", f"{rise:+.0%}",
                 f"{r['hot_p99_tbt_alone_s']:.3f}", f"{r['hot_p99_tbt_flood_s']:.3f}",
                 f"{r['cold_completion_s']:.1f}", f"{r['cold_deadline_s']:.1f}",
                 "yes" if r["cold_met"] else "NO", f"{r['cold_tps_not_hot']:.0f}")
        print("".join(f"{c:>15}" for c in cells))
    print("* cold tokens per second of engine time not spent on hot work (flood phase)")
    by = {r["policy"]: r["cold_tps_not_hot"] for r in rows}
    if by.get("fcfs"):
        for name, v in by.items():
            print(f"  {name} / fcfs: {v / by['fcfs']:.2f}x")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "mixed_load.json").write_text(json.dumps(
        {"hot_service_s": service, "hot_rate": rate, "cold_alone_s": alone_s,
         "docs": args.docs, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
