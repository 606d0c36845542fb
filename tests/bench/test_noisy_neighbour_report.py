"""The report side of bench/noisy_neighbour.py: per-tenant counts, demotions, refusals by
status, hot attainment against the contract's targets and the table (no server)."""

from __future__ import annotations

import pytest


def result(ttft=None, gaps=(), error=None, tier="priority"):
    """A result as ``peers.one_request`` returns the fields the summary reads."""
    return {"error": error, "detail": f"Error code: {error}" if error else None,
            "ttft_s": ttft, "gaps": list(gaps), "served_tier": None if error else tier}


def test_summary_counts_demotions_refusals_and_attainment(noisy):
    results = [
        result(0.1, [0.05, 0.05]),                # kept: TTFT and TBT within target
        result(0.3, [0.05]),                      # TTFT over 0.2 s
        result(0.1, [0.05, 0.5]),                 # a request TBT P99 over 0.1 s
        result(0.1, [0.05], tier="default"),      # demoted: answered, not hot
        result(error="429"), result(error="503"), result(error="429"),
    ]
    s = noisy.summarise(results, ttft_target=0.2, tbt_target=0.1)
    assert (s["requests"], s["answered"], s["demoted"]) == (7, 4, 1)
    assert s["refused"] == {"429": 2, "503": 1}
    assert s["hot_attainment"] == pytest.approx(1 / 7)
    assert s["ttft_p99_s"] == pytest.approx(0.3)
    assert s["tbt_request_p99_s"] == pytest.approx(0.5)


def test_table_compares_b_with_b_alone(noisy):
    def row(p99, rate=30):
        s = noisy.summarise([result(p99 / 2, [0.01]), result(p99, [0.01])], 0.2, 0.1)
        return {"rate_per_min": rate, **s}

    text = noisy.table({"rule on": {"A": row(0.4, 150), "B": row(0.11)},
                        "B alone": {"B": row(0.1)}})
    lines = text.splitlines()
    assert len(lines) == 5
    assert "| rule on | B (30) |" in lines[3] and "+10%" in lines[3]
    assert lines[2].endswith("| — |")  # A is not compared with B alone
