"""The side-by-side table, the ratios the issue asks for, and the JSON file."""

from __future__ import annotations

import json
import math
from pathlib import Path

from inference.request import Tier

ROWS = [  # (label, path into a summary, format)
    ("hot attainment", (Tier.HOT, "attainment"), "{:.1%}"),
    ("hot P50 TTFT s", (Tier.HOT, "ttft_p50_s"), "{:.3f}"),
    ("hot P99 TTFT s", (Tier.HOT, "ttft_p99_s"), "{:.3f}"),
    ("hot P99 TBT s", (Tier.HOT, "tbt_p99_s"), "{:.3f}"),
    ("hot interruption rate", (Tier.HOT, "interruption_rate"), "{:.2%}"),
    ("hot refused", (Tier.HOT, "refused"), "{}"),
    ("hot demoted (demotable)", (Tier.HOT, "demoted"), "{}"),
    ("hot served as warm (all demoted)", (Tier.HOT, "served_as_warm"), "{}"),
    ("hot P99 wait for an outcome s", (Tier.HOT, "wait_p99_s"), "{:.3f}"),
    ("hot longest wait / TTFT target", (Tier.HOT, "wait_max_ratio"), "{:.2f}"),
    ("warm attainment (windows)", (Tier.WARM, "attainment"), "{:.1%}"),
    ("warm P50 TTFT s", (Tier.WARM, "ttft_p50_s"), "{:.3f}"),
    ("warm P99 TTFT s", (Tier.WARM, "ttft_p99_s"), "{:.3f}"),
    ("warm mean TTFT s", (Tier.WARM, "ttft_mean_s"), "{:.3f}"),
    ("warm tok/s per stream", (Tier.WARM, "rate_mean_tps"), "{:.1f}"),
    ("warm CV per window", (Tier.WARM, "rate_cv"), "{:.3f}"),
    ("warm windows under the rate floor", (Tier.WARM, "windows_slow"), "{}"),
    ("warm windows past the mean TTFT", (Tier.WARM, "windows_late"), "{}"),
    ("cold jobs on time", (Tier.COLD, "attainment"), "{:.1%}"),
    ("cold lines on time", (Tier.COLD, "line_attainment"), "{:.1%}"),
    ("cold P50 TTFT s", (Tier.COLD, "ttft_p50_s"), "{:.1f}"),
    ("cold refused", (Tier.COLD, "refused"), "{}"),
    ("preemptions", ("preemptions",), "{}"),
    ("demotions", ("demotions",), "{}"),
    ("promotions", ("promotions",), "{}"),
    ("KV fragmentation", ("kv_fragmentation",), "{:.2%}"),
    ("KV fragmentation while work was kept out", ("kv_fragmentation_kept_out",), "{:.2%}"),
    ("goodput (load)", ("goodput",), "{:.3f}"),
    ("sim steps", ("steps",), "{}"),
    ("sim wall s", ("wall_s",), "{:.1f}"),
    ("scheduler CPU s", ("scheduler_s",), "{:.1f}"),
]

TENANT_ROWS = [("hot attainment", "attainment", "{:.1%}"),
               ("hot P99 TTFT s", "ttft_p99_s", "{:.3f}"),
               ("hot served as warm", "served_as_warm", "{}"), ("hot refused", "refused", "{}")]


def _get(summary: dict, path: tuple[str, ...]):
    v = summary
    for k in path:
        if not isinstance(v, dict) or k not in v:
            return None
        v = v[k]
    return v


def _fmt(value, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "nan"
    return fmt.format(value)


def table(summaries: dict[str, dict]) -> str:
    """A Markdown table: one row per metric, one column per policy."""
    names = list(summaries)
    lines = ["| metric | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    tenants = sorted({t for n in names for t in summaries[n].get("hot_by_tenant", {})})
    per_tenant = [(f"{label} [{t}]", ("hot_by_tenant", t, key), fmt) for t in tenants
                  for label, key, fmt in TENANT_ROWS]
    for label, path, fmt in ROWS + per_tenant:
        vals = [_get(summaries[n], path) for n in names]
        if all(v is None for v in vals):
            continue
        lines.append(f"| {label} | " + " | ".join(_fmt(v, fmt) for v in vals) + " |")
    return "\n".join(lines)


def _ratio(a, b) -> float | None:
    if a is None or b is None or not b or not math.isfinite(a) or not math.isfinite(b):
        return None
    return a / b


def ratios(summaries: dict[str, dict]) -> dict[str, float | None]:
    """laser against the baselines: goodput ratios, hot P99 TTFT reduction, fragmentation."""
    lz = summaries.get("laser")
    if lz is None:
        return {}
    out: dict[str, float | None] = {}
    for base in ("fcfs", "priority"):
        if base in summaries:
            out[f"goodput laser/{base}"] = _ratio(lz.get("goodput"), summaries[base].get("goodput"))
    if "fcfs" in summaries:
        r = _ratio(lz[Tier.HOT]["ttft_p99_s"], summaries["fcfs"][Tier.HOT]["ttft_p99_s"])
        out["hot P99 TTFT reduction vs fcfs"] = None if r is None else 1 - r
    if "partitioned" in summaries:
        out["fragmentation laser/partitioned"] = _ratio(
            lz["kv_fragmentation"], summaries["partitioned"]["kv_fragmentation"])
    return out


def format_ratios(r: dict[str, float | None]) -> str:
    return "\n".join(f"{k}: {'-' if v is None else f'{v:.3f}'}" for k, v in r.items())


def write_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str, allow_nan=True) + "\n")
