"""``python -m sim`` on a user trace: table, ratios, JSON and plots."""

from __future__ import annotations

import json

import pytest

from inference.request import Tier
from sim.__main__ import main
from sim.profiles import traces_dir
from sim.traces import TraceRequest, write_jsonl

pytestmark = pytest.mark.skipif(not traces_dir().is_dir(), reason="shared traces absent")


def test_replays_a_jsonl_trace_through_every_policy(tmp_path, capsys):
    reqs = [TraceRequest(0.1 * i, Tier.HOT, 300 + 50 * i, 20) for i in range(6)]
    reqs += [TraceRequest(0.05, Tier.WARM, 800, 30),
             TraceRequest(0.0, Tier.COLD, 2000, 50, deadline_s=120.0, job="j"),
             TraceRequest(0.2, Tier.HOT, 9000, 10)]  # over Llama-3-8B's 8k context
    write_jsonl(tmp_path / "t.jsonl", reqs)
    report = main(["--trace", str(tmp_path / "t.jsonl"), "--policy", "all",
                   "--duration", "60", "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert "| hot attainment |" in printed and "hot P99 TTFT reduction vs fcfs" in printed
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert list(saved["policies"]) == ["laser", "fcfs", "priority", "edf", "partitioned"]
    for summary in report["policies"].values():
        assert summary["too_long"] == {"hot": 1}
        assert summary["hot"]["requests"] == 6 and summary["cold"]["jobs"] == 1
    assert (tmp_path / "out" / "metrics.png").stat().st_size > 0


def test_load_scales_a_user_trace(tmp_path):
    write_jsonl(tmp_path / "t.jsonl", [TraceRequest(10.0 * i, Tier.HOT, 100, 5)
                                       for i in range(10)])
    args = ["--trace", str(tmp_path / "t.jsonl"), "--policy", "fcfs", "--duration", "50"]
    assert main(args + ["--load", "1"])["requests"] == 5  # arrivals 0..40 s
    assert main(args + ["--load", "2"])["requests"] == 10  # arrivals 0..45 s
