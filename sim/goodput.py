"""Goodput: the largest load multiplier at which a policy still keeps every tier's target
(hot >= 99 %, warm >= 90 %, cold >= 99 % attainment), found by bisection."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sim.config import SimConfig
from sim.loop import simulate
from sim.summary import TARGETS, summarize
from sim.traces import TraceRequest


@dataclass(slots=True)
class Goodput:
    load: float  # largest load that met the targets (0.0 when even ``lo`` failed)
    probes: list[tuple[float, bool]] = field(default_factory=list)  # (load, met) in order


def find_goodput(trace_at: Callable[[float], list[TraceRequest]], cfg: SimConfig, *,
                 lo: float = 0.05, hi: float = 2.0, rel_tol: float = 0.05,
                 targets: Mapping[str, float] | None = None) -> Goodput:
    """Bisect on the load in ``[lo, hi]`` (assumed monotone: more load never helps) until the
    bracket is within ``rel_tol`` of its lower end. ``targets``: the attainment each tier
    must keep (default ``summary.TARGETS``: hot 99 %, warm 90 %, cold 99 %)."""
    out = Goodput(0.0)
    goals: Mapping[str, float] = targets or TARGETS

    def met(load: float) -> bool:
        s = summarize(simulate(trace_at(load), cfg))
        ok = all(s[t]["attainment"] >= q for t, q in goals.items())
        out.probes.append((load, ok))
        return ok

    if not met(lo):
        return out
    if met(hi):
        out.load = hi
        return out
    while hi - lo > rel_tol * lo:
        mid = (lo + hi) / 2
        if met(mid):
            lo = mid
        else:
            hi = mid
    out.load = lo
    return out
