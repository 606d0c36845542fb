"""Request traces: the public CSVs in the traces directory, and users' own JSONL.

JSONL format, one request per line (keys beyond these are ignored)::

    {"arrival_s": 12.5, "tier": "hot", "prompt_tokens": 812, "output_tokens": 120,
     "deadline_s": 1800, "prefix_blocks": [17, 42], "tenant": "acme", "job": "batch-7",
     "demotable": false}

``arrival_s`` counts from the start of the trace; ``tier`` is hot, warm or cold;
``deadline_s`` (optional, cold) is relative to the arrival; ``prefix_blocks`` (optional) are
hashes of the prompt's leading KV blocks, so requests sharing a prefix share cache blocks;
``job`` (optional) groups cold lines into one batch job for accounting.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from inference.request import Tier


@dataclass(frozen=True, slots=True)
class TraceRequest:
    arrival_s: float
    tier: Tier
    prompt_tokens: int
    output_tokens: int
    deadline_s: float | None = None  # relative to arrival
    prefix_blocks: tuple[int, ...] = ()
    tenant: str = ""
    job: str | None = None
    demotable: bool = False
    weight: float = 1.0
    in_contract: bool = True  # False: above the tenant's contracted rates (excess)


def read_azure(path: Path) -> list[tuple[float, int, int]]:
    """(seconds since the first request, prompt tokens, output tokens) per row, in order."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            ts = datetime.fromisoformat(r["TIMESTAMP"][:26])
            rows.append((ts.timestamp(), int(r["ContextTokens"]), int(r["GeneratedTokens"])))
    rows.sort()
    t0 = rows[0][0] if rows else 0.0
    return [(t - t0, max(1, p), max(1, o)) for t, p, o in rows]


def read_arxiv(path: Path) -> list[tuple[int, int]]:
    """(prompt tokens, output tokens) of arXiv summarisation requests, in file order."""
    with open(path, newline="") as f:
        return [(int(r["num_prefill_tokens"]), max(1, int(r["num_decode_tokens"])))
                for r in csv.DictReader(f)]


def read_jsonl(path: Path) -> list[TraceRequest]:
    """Parse a user trace; raises ``ValueError`` naming the line of a malformed record."""
    out = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.append(TraceRequest(
                    float(d["arrival_s"]), Tier(d.get("tier", Tier.HOT)), int(d["prompt_tokens"]),
                    int(d["output_tokens"]),
                    None if d.get("deadline_s") is None else float(d["deadline_s"]),
                    tuple(int(h) for h in d.get("prefix_blocks", ())), str(d.get("tenant", "")),
                    d.get("job"), bool(d.get("demotable", False)),
                    float(d.get("weight", 1.0)), bool(d.get("in_contract", True))))
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{path}:{lineno}: bad trace record: {err}") from err
    out.sort(key=lambda r: r.arrival_s)
    return out


def write_jsonl(path: Path, requests: list[TraceRequest]) -> None:
    with open(path, "w") as f:
        for r in requests:
            d = {"arrival_s": r.arrival_s, "tier": str(r.tier), "prompt_tokens": r.prompt_tokens,
                 "output_tokens": r.output_tokens}
            if r.deadline_s is not None:
                d["deadline_s"] = r.deadline_s
            if r.prefix_blocks:
                d["prefix_blocks"] = list(r.prefix_blocks)
            for key in ("tenant", "job"):
                if getattr(r, key):
                    d[key] = getattr(r, key)
            if r.demotable:
                d["demotable"] = True
            if not r.in_contract:
                d["in_contract"] = False
            f.write(json.dumps(d) + "\n")
