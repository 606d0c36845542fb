"""The ``laser`` policy's scheduling classes and sort keys, from factories (no tensors)."""

from __future__ import annotations

from inference.request import ContractTargets, Tier
from inference.scheduler.laser.keys import CLASSES, SchedClass, SortKey
from tests.inference.factories import make_request, make_scheduler


def test_classes_are_ranks_most_urgent_first():
    assert list(CLASSES) == sorted(CLASSES) == [0, 1, 2, 3]
    assert SchedClass.HOT < SchedClass.PROMOTED < SchedClass.WARM < SchedClass.COLD


def test_each_tier_ranks_into_its_class_and_keys_order_by_class_then_contract():
    sched = make_scheduler("laser", max_num_batched_tokens=8, long_prefill_chunk=8)
    requests = {
        "hot": make_request("hot", 8, targets=ContractTargets(ttft_p99_s=1.0), salt="a"),
        "late": make_request("late", 8, targets=ContractTargets(ttft_p99_s=0.5), salt="b",
                             arrival=0.1),
        "warm": make_request("warm", 8, tier=Tier.WARM, salt="c"),
        "tight": make_request("tight", 8, tier=Tier.COLD, deadline=10.0, salt="d"),
        "cold": make_request("cold", 8, tier=Tier.COLD, deadline=1e6, salt="e"),
    }
    requests["late"][0].in_contract = False
    for seqs in requests.values():
        sched.add(seqs, 0.0)
    sched.schedule(0.0)  # the first refresh: cold slack, promotion
    keys = {name: sched.key(seqs[0]) for name, seqs in requests.items()
            if seqs[0].seq_id in sched.seqs}
    assert all(isinstance(k, SortKey) for k in keys.values())
    assert keys["hot"].cls is SchedClass.HOT and keys["hot"].when == 1.0
    assert keys["late"].cls is SchedClass.HOT and keys["late"].excess == 1
    assert keys["warm"].cls is SchedClass.WARM
    assert keys["tight"].cls is SchedClass.PROMOTED
    assert keys["cold"].cls is SchedClass.COLD and keys["cold"].when > keys["tight"].when
    order = sorted(keys, key=keys.__getitem__)
    assert order == ["hot", "late", "tight", "warm", "cold"]


def test_keys_sort_as_plain_tuples_and_end_with_the_sequence_id():
    a = SortKey(SchedClass.WARM, 0, 0, 5.0, "a")
    b = SortKey(SchedClass.WARM, 0, 0, 5.0, "b")
    excess = SortKey(SchedClass.HOT, 1, 0, 0.0, "c")
    assert a < b and excess < a and a == (2, 0, 0, 5.0, "a")
