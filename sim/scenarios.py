"""Scenarios S1 (interactive day) and S2 (burst storm) from the public traces.

``load`` scales arrival rates: interactive timestamps are divided by it (the one-hour traces
tiled end to end to fill ``duration_s``), and each cold wave holds ``load`` times its nominal
number of documents (waves keep their period, so a flood stays proportional to the load).
Every random choice (which documents, which sessions are demotable) comes from ``seed``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from inference.request import Tier
from sim.profiles import traces_dir
from sim.traces import TraceRequest, read_arxiv, read_azure

CONV = "AzureLLMInferenceTrace_conv.csv"
CODE = "AzureLLMInferenceTrace_code.csv"
ARXIV = "arxiv_summarization_lengths.csv"
DEMOTABLE_SHARE = 0.25
WEIGHTS = (0.5, 1.0, 2.0)
_cache: dict[Path, list] = {}


def _cached(path: Path, reader: Callable) -> list:
    if path not in _cache:
        _cache[path] = reader(path)
    return _cache[path]


def _tile(rows: list[tuple[float, int, int]], load: float, duration_s: float, every: int = 1):
    """Arrival-scaled copies of an Azure trace until ``duration_s`` is covered."""
    span = rows[-1][0] + 1.0
    out, k = [], 0
    while k * span / load < duration_s:
        for i, (t, p, o) in enumerate(rows):
            if i % every:
                continue
            at = (k * span + t) / load
            if at >= duration_s:
                break
            out.append((at, p, o))
        k += 1
    return out


def _interactive(rows, tier: Tier, tenant: str, rng: random.Random) -> list[TraceRequest]:
    out = []
    for t, p, o in rows:
        demotable = tier is Tier.HOT and rng.random() < DEMOTABLE_SHARE
        out.append(TraceRequest(t, tier, p, o, tenant=tenant, demotable=demotable,
                                weight=rng.choice(WEIGHTS)))
    return out


def _waves(docs: list[tuple[int, int]], size: int, every_s: float, duration_s: float,
           deadline_s: float, rng: random.Random) -> list[TraceRequest]:
    out, k = [], 0
    while k * every_s < duration_s:
        for p, o in rng.sample(docs, max(1, min(len(docs), size))):
            out.append(TraceRequest(k * every_s, Tier.COLD, p, o, deadline_s=deadline_s,
                                    tenant="batch", job=f"wave{k}"))
        k += 1
    return out


def s1(load: float = 1.0, duration_s: float = 3600.0, seed: int = 0,
       root: Path | None = None) -> list[TraceRequest]:
    """Interactive day: hot = Azure conv, warm = Azure code, cold = waves of 500 (x load)
    arXiv summaries every 15 minutes, each wave one batch job due 30 minutes after it lands."""
    root, rng = root or traces_dir(), random.Random(seed)
    hot = _interactive(_tile(_cached(root / CONV, read_azure), load, duration_s), Tier.HOT,
                       "chat", rng)
    warm = _interactive(_tile(_cached(root / CODE, read_azure), load, duration_s), Tier.WARM,
                        "code", rng)
    cold = _waves(_cached(root / ARXIV, read_arxiv), round(500 * load), 900.0, duration_s,
                  1800.0, rng)
    return sorted(hot + warm + cold, key=lambda r: r.arrival_s)


def s2(load: float = 1.0, duration_s: float = 3600.0, seed: int = 0,
       root: Path | None = None) -> list[TraceRequest]:
    """Burst storm: hot = Azure code with its bursts, warm = conv at half rate, cold = waves
    of 1,000 (x load) long arXiv documents (the longer half, 2.7k+ prompt tokens) every 30 minutes,
    due in 45 minutes."""
    root, rng = root or traces_dir(), random.Random(seed)
    hot = _interactive(_tile(_cached(root / CODE, read_azure), load, duration_s), Tier.HOT,
                       "code", rng)
    warm = _interactive(_tile(_cached(root / CONV, read_azure), load, duration_s, every=2),
                        Tier.WARM, "chat", rng)
    docs = _cached(root / ARXIV, read_arxiv)
    median = sorted(p for p, _ in docs)[len(docs) // 2]
    long_docs = [d for d in docs if d[0] >= median]
    cold = _waves(long_docs, round(1000 * load), 1800.0, duration_s, 2700.0, rng)
    return sorted(hot + warm + cold, key=lambda r: r.arrival_s)


def mark_contract(requests: list[TraceRequest], rpm: dict[str, int]) -> list[TraceRequest]:
    """Mark each request in contract or excess as the gateway does: a tenant's request is
    in contract while fewer than its ``rpm`` in-contract requests arrived in the 60 s before
    it (a sliding window); tenants not in ``rpm`` are always in contract."""
    seen: dict[str, deque[float]] = {t: deque() for t in rpm}
    out = []
    for r in sorted(requests, key=lambda r: r.arrival_s):
        window = seen.get(r.tenant)
        if window is None:
            out.append(r)
            continue
        while window and window[0] <= r.arrival_s - 60.0:
            window.popleft()
        ok = len(window) < rpm[r.tenant]
        if ok:
            window.append(r.arrival_s)
        out.append(replace(r, in_contract=ok))
    return out


def _peak_per_minute(times: list[float]) -> int:
    """Most arrivals in any 60 s sliding window."""
    peak, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - 60.0:
            lo += 1
        peak = max(peak, hi - lo + 1)
    return peak


def noisy_neighbours(load: float = 1.0, duration_s: float = 3600.0, seed: int = 0,
                     root: Path | None = None, *, with_a: bool = True,
                     factor: float = 5.0) -> list[TraceRequest]:
    """Noisy neighbour: two tenants on the same hot contract. B sends the Azure conversation
    trace at ``load``; the contract's requests per minute is B's busiest 60 s, so all of B's
    traffic is in contract. A sends ``factor`` times that contracted rate (the same trace
    from its middle, faster): the part above the contract is marked excess. Nothing is
    demotable. ``with_a=False`` is B alone (the comparison)."""
    root = root or traces_dir()
    rows = _cached(root / CONV, read_azure)
    b = [TraceRequest(t, Tier.HOT, p, o, tenant="B") for t, p, o in _tile(rows, load,
                                                                         duration_s)]
    rpm = _peak_per_minute([r.arrival_s for r in b])
    if not with_a:
        return mark_contract(b, {"B": rpm})
    half = len(rows) // 2
    span = rows[-1][0]
    rotated = [(t - rows[half][0], p, o) for t, p, o in rows[half:]] + [
        (t + span - rows[half][0], p, o) for t, p, o in rows[:half]]
    b_per_min = 60.0 * len(rows) / (span + 1.0) * load  # B's mean rate per minute
    a_load = load * factor * rpm / b_per_min
    a = [TraceRequest(t, Tier.HOT, p, o, tenant="A") for t, p, o in _tile(rotated, a_load,
                                                                         duration_s)]
    return mark_contract(a + b, {"A": rpm, "B": rpm})


def nn_b_alone(load: float = 1.0, duration_s: float = 3600.0, seed: int = 0,
               root: Path | None = None) -> list[TraceRequest]:
    return noisy_neighbours(load, duration_s, seed, root, with_a=False)


def multi_turn(load: float = 1.0, duration_s: float = 3600.0, seed: int = 0,
               root: Path | None = None) -> list[TraceRequest]:
    """Multi-turn chat with prefix sharing: sessions start at ``0.5 x load`` a second, each
    of eight tenants'; a session has 1 + a geometric number of turns (mean 4 in all), the
    first turn's prompt from the conversation trace, each later turn's prompt the whole
    conversation so far plus a new message of 20-200 tokens, its output from the trace
    (at most 600), and a think time of mean 20 s after the answer (priced at 30 ms a token).
    A turn's prompt repeats the previous turn's prompt blocks (``prefix_blocks``), so the
    KV cache serves them; the session ends at 7,000 tokens of context. Hot, nothing demotable;
    warm = the code trace at ``load``, as in S1."""
    root, rng = root or traces_dir(), random.Random(seed)
    rows = _cached(root / CONV, read_azure)
    out, t, k = [], 0.0, 0
    while True:
        t += rng.expovariate(0.5 * load)
        if t >= duration_s:
            break
        k += 1
        tenant, base = f"t{k % 8}", k << 16
        _, prompt, _ = rng.choice(rows)
        at, context = t, 0
        while at < duration_s:
            prompt_tokens = context + (prompt if not context else rng.randint(20, 200))
            output = min(600, rng.choice(rows)[2])
            if prompt_tokens + output > 7000:
                break
            blocks = tuple(base + i for i in range(prompt_tokens // 16))
            out.append(TraceRequest(at, Tier.HOT, prompt_tokens, output, prefix_blocks=blocks,
                                    tenant=tenant))
            context = prompt_tokens + output
            at += 0.03 * output + rng.expovariate(1 / 20.0)
            if rng.random() < 0.25:
                break
    warm = _interactive(_tile(_cached(root / CODE, read_azure), load, duration_s), Tier.WARM,
                        "code", rng)
    return sorted(out + warm, key=lambda r: r.arrival_s)


SCENARIOS = {"S1": s1, "S2": s2, "NN": noisy_neighbours, "NN-B": nn_b_alone,
             "MT": multi_turn}
