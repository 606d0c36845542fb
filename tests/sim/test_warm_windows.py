"""Warm's per-window terms: which windows miss the rate floor, which the mean TTFT."""

from __future__ import annotations

import math

from inference.request import Tier
from sim.accounting import Record
from sim.config import Contracts
from sim.summary import warm_terms


def rec(finish: float, ttft: float, tokens: int, decode_s: float) -> Record:
    return Record(Tier.WARM, finish - decode_s - ttft, ttft, 0.0, tokens, finish, decode_s,
                  False, True, False, False, None, None)


def test_each_window_is_judged_on_its_rate_and_its_mean_ttft():
    c = Contracts(warm_rate_tps=20.0, warm_band=0.05, warm_mean_ttft_s=2.0)
    recs = [rec(10.0, 0.5, 21, 1.0),  # window 0: 20 tok/s, 0.5 s: kept
            rec(70.0, 0.5, 11, 1.0),  # window 1: 10 tok/s: under the floor
            rec(130.0, 3.0, 21, 1.0),  # window 2: mean TTFT past 2 s
            rec(135.0, 0.5, 21, 1.0)]  # ... mean 1.75 s with this one: kept
    out = warm_terms(recs, c, 60.0)
    assert (out["windows"], out["windows_slow"], out["windows_late"]) == (3, 1, 0)
    assert out["attainment"] == 2 / 3
    assert [w for w, _, _ in out["by_window"]] == [0, 1, 2]
    w2 = out["by_window"][2]
    assert w2[1] == 20.0 and math.isclose(w2[2], 1.75)
