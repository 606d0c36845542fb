"""Many replicas behind a router: the one-replica loop (``sim.loop``) N times, one clock.

Every arrival first brings each replica's clock up to it (their steps run as in ``simulate``),
then the router picks a replica from the loads the replicas last published (every
``publish_s``) and, for routers that look at the cache, the block hashes each replica holds
now (replicas publish cache events as blocks are stored and evicted, as KV-event routers do).
The request joins that replica's queue. Accounting is one ``Accounting`` over all replicas,
reported as ``sim.summary`` does per tier, plus the prefix-cache hit rate and the router's CPU.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from inference.fleet.router import ReplicaLoad, RouteRequest, leading_hits
from inference.kv.block_manager import prefix_hashes
from inference.request import Tier
from inference.sequence import Sequence
from sim.accounting import Accounting
from sim.cluster_routers import ClusterRouter, make_router
from sim.config import SimConfig
from sim.cost_model import CostModel, cost_model_for
from sim.loop import _Run, build_scheduler
from sim.summary import TARGETS, cold_terms, hot_terms, warm_terms
from sim.traces import TraceRequest
from sim.workload import Workload


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """``replicas`` copies of ``replica`` (one GPU each) behind ``router``."""

    replicas: int = 4
    router: str = "laser"
    publish_s: float = 0.5  # how often a replica publishes its load
    replica: SimConfig = field(default_factory=SimConfig)

    def __post_init__(self) -> None:
        if self.replicas < 1 or not self.publish_s > 0:
            raise ValueError("replicas and publish_s must be positive")


class _Prebuilt(Workload):
    """The cluster builds each sequence once, before routing (the router hashes its prompt);
    the replica's arrival takes it from here. Keeps every sequence for the hit rate."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.ready: dict[int, Sequence] = {}
        self.made: list[Sequence] = []

    def sequence(self, index: int, req: TraceRequest) -> Sequence:
        seq = self.ready.pop(index, None) or super().sequence(index, req)
        self.made.append(seq)
        return seq


class _Replica(_Run):
    """One replica's loop, fed from outside: ``offer`` a routed request, ``advance`` time."""

    def __init__(self, cfg: SimConfig, cost: CostModel, acc: Accounting,
                 work: _Prebuilt) -> None:
        super().__init__([], cfg, cost, build_scheduler(cfg, cost, True), None)
        self.acc, self.work = acc, work
        self.ids: list[int] = []  # trace index in the cluster's trace, per local index
        self.hashes: dict[str, list[int]] = {}  # seq id -> its prompt's block hashes
        self.hot_capacity = _hot_capacity(cost, cfg)
        self.prefill_tps = cfg.max_num_batched_tokens / cost.plan_time(
            ((0, cfg.max_num_batched_tokens),))

    def offer(self, index: int, req: TraceRequest, seq: Sequence, hashes: list[int]) -> None:
        self.trace.append(req)
        self.ids.append(index)
        self.hashes[seq.seq_id] = hashes

    def _arrive(self, index: int, req: TraceRequest) -> None:
        super()._arrive(self.ids[index], req)

    def advance(self, until: float) -> None:
        """Run steps until the clock reaches ``until`` or nothing is left to do."""
        trace, s = self.trace, self.s
        while True:
            while self.next < len(trace) and trace[self.next].arrival_s <= self.now:
                self._arrive(self.next, trace[self.next])
                self.next += 1
            if not s.has_work():
                if self.next < len(trace):
                    self.now = trace[self.next].arrival_s
                    continue
                return
            if self.now >= until:
                return
            self._step()

    def load(self, now: float) -> ReplicaLoad:
        """What the replica publishes; a waiting prompt counts without the blocks it will
        find in the cache (as the engine's replica publishes it)."""
        hot = hot_prefill = prefill = 0
        kv = self.s.kv
        for q in itertools.chain(self.s.running, self.s.waiting):
            done = q.num_computed_tokens or kv.block_size * leading_hits(
                self.hashes.get(q.seq_id, ()), kv._cached)
            left = max(0, q.num_prompt_tokens - done)
            prefill += left
            if q.tier is Tier.HOT:
                hot += 1
                hot_prefill += left
        return ReplicaLoad(now, len(self.s.running), len(self.s.waiting), hot, hot_prefill,
                           prefill, self.hot_capacity, self.prefill_tps)


def _hot_capacity(cost: CostModel, cfg: SimConfig, context: int = 2048) -> int:
    """Hot streams of ``context`` tokens a step can decode beside one prefill chunk of a
    quarter budget within hot's TBT target."""
    chunk = ((0, cfg.max_num_batched_tokens // 4),)
    n = 1
    while n < cfg.max_num_seqs and cost.plan_time(
            ((context, 1),) * (n + 1) + chunk) <= cfg.contracts.hot_tbt_s:
        n += 1
    return n


@dataclass(slots=True)
class ClusterResult:
    config: ClusterConfig
    accounting: Accounting
    replicas: list[_Replica]
    sequences: list[Sequence]
    router_s: float  # CPU seconds in hashing prompts, looking up caches and choosing
    wall_s: float
    cpu_s: float  # CPU seconds of the whole run


def simulate_cluster(trace: list[TraceRequest], cc: ClusterConfig, *,
                     cost: CostModel | None = None) -> ClusterResult:
    """Replay ``trace`` (sorted by arrival) over ``cc.replicas`` replicas behind ``cc.router``."""
    t0, c0 = time.perf_counter(), time.process_time()
    cfg = cc.replica
    cost = cost or cost_model_for(cfg.gpu, cfg.model)
    acc = Accounting()
    work = _Prebuilt(cfg.contracts, cost, cfg.long_prefill_chunk, cfg.block_size)
    reps = [_Replica(cfg, cost, acc, work) for _ in range(cc.replicas)]
    router = make_router(cc.router, cfg.block_size)
    loads = [r.load(-cc.publish_s) for r in reps]
    router_s = 0.0
    for index, req in enumerate(trace):
        now = req.arrival_s
        for i, rep in enumerate(reps):
            rep.advance(now)
            if now - loads[i].at >= cc.publish_s:
                loads[i] = rep.load(now)
        seq = work.ready[index] = Workload.sequence(work, index, req)
        r0 = time.process_time()
        hashes = prefix_hashes(seq.prompt_token_ids, seq.salt, cfg.block_size)
        pick = _route(router, hashes, req, seq, reps, loads, now)
        router_s += time.process_time() - r0
        reps[pick].offer(index, req, seq, hashes)
    end = (trace[-1].arrival_s if trace else 0.0) + cfg.drain_s
    for rep in reps:
        rep.advance(end)
        for seq_id in [k for k in acc.live if k in rep.s.seqs]:
            acc.finished(rep.s.seqs[seq_id], None)
    return ClusterResult(cc, acc, reps, work.made, router_s, time.perf_counter() - t0,
                         time.process_time() - c0)


def _route(router: ClusterRouter, hashes: list[int], req: TraceRequest, seq: Sequence,
           reps: list[_Replica], loads: list[ReplicaLoad], now: float) -> int:
    hits = ([leading_hits(hashes, r.s.kv._cached) for r in reps] if router.needs_hits
            else [0] * len(reps))
    rr = RouteRequest(req.tier, req.prompt_tokens, hashes, seq.targets.ttft_p99_s or 0.0)
    return router.choose(rr, loads, hits, now)


def summarize_cluster(res: ClusterResult) -> dict:
    """Per-tier terms as ``sim.summary`` reports them, over the whole cluster, plus the
    prefix-cache hit rate (cached / prompt tokens of requests sharing a prefix), the busiest
    replica's share of requests over the mean, and the router's CPU."""
    cfg = res.config.replica
    by_tier: dict[Tier, list] = {t: [] for t in Tier}
    for rec in res.accounting.records:
        by_tier[rec.tier].append(rec)
    shared = [q for q in res.sequences if q.salt != q.request_id]
    prompt = sum(q.num_prompt_tokens for q in shared)
    counts = [len(r.trace) for r in res.replicas]
    out: dict[str, Any] = {
        "router": res.config.router, "replicas": res.config.replicas,
        Tier.HOT: hot_terms(by_tier[Tier.HOT]),
        Tier.WARM: warm_terms(by_tier[Tier.WARM], cfg.contracts, cfg.window_s),
        Tier.COLD: cold_terms(by_tier[Tier.COLD]),
        "prefix_hit_rate": sum(q.num_cached_tokens for q in shared) / prompt if prompt else 0.0,
        "imbalance": max(counts) / (sum(counts) / len(counts)) if sum(counts) else 1.0,
        "router_s": res.router_s, "cpu_s": res.cpu_s, "wall_s": res.wall_s,
        "requests": sum(counts),
    }
    out["meets_targets"] = all(out[t]["attainment"] >= q for t, q in TARGETS.items())
    return out
