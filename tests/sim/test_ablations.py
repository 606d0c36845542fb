"""The simulator's ablations: each switch swaps a part of ``laser`` for a variant, and only
that part (no tensors: the parts from factories)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from inference.request import ContractTargets, Tier
from inference.scheduler.laser import LaserParts, LaserPolicyConfig, LaserScheduler
from sim.ablations import (
    ABLATIONS,
    LaserAblations,
    NoChunking,
    NoTbtShare,
    NoWarmFloor,
    laser_options,
    laser_parts,
)
from tests.inference.factories import make_request, make_scheduler

POLICY = LaserPolicyConfig()


def test_every_part_on_is_the_product_policy():
    assert laser_parts(LaserAblations()) == LaserParts()
    assert laser_options(None, 32) == {"parts": LaserParts(), "pause_layers": 32}


@pytest.mark.parametrize("switch", ABLATIONS)
def test_each_switch_changes_the_policy_it_builds(switch):
    off = laser_options(LaserAblations(**{switch: False}), 32)
    assert off != laser_options(LaserAblations(), 32)
    changed = [f.name for f in fields(LaserParts)
               if getattr(off["parts"], f.name) is not getattr(LaserParts(), f.name)]
    if switch == "layer_pause_enabled":
        assert off["pause_layers"] == 0 and not changed
    else:
        assert len(changed) == 1  # one part swapped, the others the product's


def test_switches_of_one_part_compose():
    rules = laser_parts(LaserAblations(chunking_enabled=False, warm_floor_enabled=False,
                                       tbt_share_enabled=False)).fill(POLICY)
    assert isinstance(rules, NoChunking) and isinstance(rules, NoWarmFloor)
    assert isinstance(rules, NoTbtShare)
    assert rules.hot_caps(0.8, [(0.1, 0.0)]) == [] and not rules.defers(0.0)
    assert rules.warm_floor([], 0.8) == [] and rules.share([], [0.05], None) == []


def test_none_swaps_every_part():
    parts = laser_parts(LaserAblations.none())
    assert all(getattr(parts, f.name) is not getattr(LaserParts(), f.name)
               for f in fields(LaserParts))


def test_a_variant_runs_in_the_scheduler():
    sched = make_scheduler("laser", options=laser_options(
        LaserAblations(contract_first_enabled=False, aging_enabled=False), 0))
    assert isinstance(sched, LaserScheduler)
    seqs = make_request("x", 8, tier=Tier.WARM, targets=ContractTargets())
    seqs[0].in_contract = False
    sched.add(seqs, 0.0)
    assert sched.excess(seqs[0]) == 0  # contract-blind
    assert sched.aging.bound(Tier.WARM) is None
