"""The JSONL trace format users replay, and the scenario builders."""

from __future__ import annotations

import json

import pytest

from inference.request import Tier
from sim.profiles import traces_dir
from sim.scenarios import s1, s2
from sim.traces import TraceRequest, read_jsonl, write_jsonl

COLD = Tier.COLD


def test_reads_required_and_optional_fields_sorted_by_arrival(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"arrival_s": 3.5, "tier": "cold", "prompt_tokens": 900, "output_tokens": 40,'
        ' "deadline_s": 600, "job": "j1", "extra": "ignored"}\n'
        "\n"
        '{"arrival_s": 0.25, "tier": "hot", "prompt_tokens": 12, "output_tokens": 3,'
        ' "prefix_blocks": [7, 9], "tenant": "acme", "demotable": true}\n'
        '{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 1}\n')
    got = read_jsonl(path)
    assert [r.arrival_s for r in got] == [0.25, 1.0, 3.5]
    hot, default, cold = got
    assert hot == TraceRequest(0.25, Tier.HOT, 12, 3, None, (7, 9), "acme", None, True)
    assert default.tier is Tier.HOT and default.deadline_s is None
    assert cold.deadline_s == 600.0 and cold.job == "j1" and cold.tier is Tier.COLD


@pytest.mark.parametrize("line", ['{"tier": "hot", "prompt_tokens": 1, "output_tokens": 1}',
                                  '{"arrival_s": 0, "tier": "lukewarm", "prompt_tokens": 1,'
                                  ' "output_tokens": 1}',
                                  "not json"])
def test_malformed_record_names_its_line(tmp_path, line):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1})
                    + "\n" + line + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        read_jsonl(path)


def test_write_then_read_round_trips(tmp_path):
    reqs = [TraceRequest(0.0, Tier.HOT, 10, 2, prefix_blocks=(1,), tenant="a", demotable=True),
            TraceRequest(2.0, Tier.COLD, 30, 5, deadline_s=60.0, tenant="b", job="j")]
    write_jsonl(tmp_path / "r.jsonl", reqs)
    assert read_jsonl(tmp_path / "r.jsonl") == reqs


@pytest.mark.skipif(not traces_dir().is_dir(), reason="shared traces absent")
def test_scenarios_scale_with_load_and_tag_cold_jobs():
    one, two = s1(1.0, 300.0), s1(2.0, 300.0)
    hot = [len([r for r in t if r.tier is Tier.HOT]) for t in (one, two)]
    assert 1.8 < hot[1] / hot[0] < 2.2
    cold = [r for r in one if r.tier is Tier.COLD]
    assert len(cold) == 500 and {r.job for r in cold} == {"wave0"}
    assert all(r.deadline_s == 1800.0 for r in cold)
    assert len([r for r in two if r.tier is COLD]) == 1000  # the flood scales with the load
    storm = s2(1.0, 1900.0)
    waves = {r.job for r in storm if r.tier is Tier.COLD}
    assert waves == {"wave0", "wave1"}
    assert all(r.arrival_s < 1900.0 for r in storm)
