"""The report side of bench/peers.py: summaries, errors by status, Laser/llama.cpp ratios per
row and the markdown table (no servers: those run only in the benchmark itself)."""

from __future__ import annotations

import math

import pytest


def request(start, times, error=None, tokens=None, tier="priority"):
    """A result as ``one_request`` returns it, content chunks at ``times``."""
    return {"start": start, "end": times[-1] if times else start + 0.1, "error": error,
            "detail": error, "tokens": len(times) if tokens is None else tokens,
            "prompt_tokens": 30,
            "ttft_s": times[0] - start if times else None, "served_tier": tier,
            "gaps": [b - a for a, b in zip(times, times[1:])]}


def test_summary_counts_tokens_over_wall_and_errors_by_status(peers):
    results = [request(0.0, [0.5, 0.6, 0.8]), request(1.0, [1.25, 1.5, 2.0]),
               request(2.0, [2.4, 2.5]),
               request(0.2, [], error="503", tier=None), request(0.3, [], error="503"),
               request(0.4, [0.9], error="stream", tokens=1)]
    s = peers.summarise(results)
    assert (s["requests"], s["ok"], s["tokens"]) == (6, 3, 9)
    assert s["wall_s"] == pytest.approx(2.5) and s["tok_s"] == pytest.approx(3.6)
    assert s["errors"] == {"503": 2, "stream": 1}
    assert s["served_tiers"] == {"priority": 3}
    assert s["ttft_p50_s"] == pytest.approx(0.4) and s["ttft_p99_s"] == pytest.approx(0.5)
    # gaps 0.1 0.2 | 0.25 0.5 | 0.1; per-request P99 0.2, 0.5 and 0.1
    assert s["tbt_p99_s"] == pytest.approx(0.5) and s["tbt_request_p99_s"] == pytest.approx(0.5)


def test_every_laser_row_is_divided_by_the_peer_row_of_its_load_and_round(peers):
    def row(server, load, rnd, tok_s, tier="key default"):
        return {"server": server, "load": load, "round": rnd, "tier": tier, "tok_s": tok_s,
                "ttft_p50_s": 0.1, "ttft_p99_s": 0.2, "tbt_p50_s": 0.01,
                "tbt_p99_s": math.nan, "streams": int(load), "count": 3, "ok": 3,
                "requests": 3, "errors": {}, "served_tiers": {}}
    rows = [row("llama.cpp", "16", 1, 200.0), row("laser", "16", 1, 100.0),
            row("laser", "16", 1, 300.0, tier="flex"), row("llama.cpp", "16", 2, 400.0),
            row("laser", "16", 2, 100.0), row("laser", "1", 1, 50.0)]
    peers.add_ratios(rows)
    assert [r.get("ratio", {}).get("tok_s") for r in rows[1:3]] == [0.5, 1.5]
    assert rows[4]["ratio"]["tok_s"] == 0.25 and rows[1]["ratio"]["ttft_p99_s"] == 1.0
    assert math.isnan(rows[1]["ratio"]["tbt_p99_s"])
    assert "ratio" not in rows[0] and "ratio" not in rows[5]  # no peer row at 1 stream
    text = peers.table(rows)
    assert "| 1 | 16 × 3 | flex | laser | 300.0 |" in text and "| 1.50 |" in text
    assert "| — |" in text  # NaN shown as a dash, never as a number
    refused = {**rows[1], "ok": 1, "errors": {"503": 2}}
    assert "| 2× 503 |  | — (2 failed) | — | — |" in peers.table([rows[0], refused])
