"""CSV forms of the fulfilment and usage tables (same rows as the JSON API)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from django.http import HttpResponse

from apps.core.downloads import attachment

STAT_COLUMNS = ("requests", "demoted", "excess", "prompt_tokens", "completion_tokens",
                "tokens_per_s", "ttft_p50_s", "ttft_p99_s", "ttft_mean_s", "tbt_p99_s", "tbt_max_s")
OUTCOME_COLUMNS = ("ok", "interrupted", "rejected_429", "rejected_503", "rejected_400", "error",
                   "cancelled", "expired")
TERMS = ("ttft_p99", "ttft_within", "tbt_p99", "interruption_rate", "demotions", "warm_floor",
         "warm_mean_ttft", "cold_jobs", "cold_lines")
USAGE_COLUMNS = ("tenant", "day", "tier", "key_prefix", "requests", "prompt_tokens",
                 "completion_tokens")

Table = tuple[Sequence[str], list[list[object]]]


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def fulfilment_table(rows: Iterable[dict]) -> Table:
    header = ["tenant", "tier", "window", "start", "end", "final", "contract_version",
              *STAT_COLUMNS, *OUTCOME_COLUMNS]
    for term in TERMS:
        header += [f"{term}_target", f"{term}_actual", f"{term}_kept"]
    body = []
    for row in rows:
        stats, outcomes = row["stats"], row["stats"].get("outcomes", {})
        line = [row["tenant"], row["tier"], row["window"], row["start"], row["end"],
                row["final"], row["contract_version"]]
        line += [stats.get(c) for c in STAT_COLUMNS]
        line += [outcomes.get(c, 0) for c in OUTCOME_COLUMNS]
        for term in TERMS:
            verdict = row["terms"].get(term) or {}
            line += [verdict.get("target"), verdict.get("actual"), verdict.get("kept")]
        body.append(line)
    return header, body


def usage_table(rows: Iterable[dict]) -> Table:
    return USAGE_COLUMNS, [[row[c] for c in USAGE_COLUMNS] for row in rows]


def response(filename: str, table: Table) -> HttpResponse:
    header, body = table
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows([_cell(v) for v in line] for line in body)
    reply = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    reply["Content-Disposition"] = attachment(filename)
    return reply
