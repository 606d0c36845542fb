from __future__ import annotations

from inference.sequence import SequenceStatus
from tests.inference.factories import make_request, make_scheduler, run_to_completion


def test_long_prompt_is_prefilled_in_chunks_then_decoded():
    sched = make_scheduler(max_num_batched_tokens=8, long_prefill_chunk=8)
    sched.add(make_request("a", prompt_len=20, max_tokens=3), 0.0)
    plans, finished = run_to_completion(sched)
    chunks = [p.scheduled[0] for p in plans]
    assert [(c.start, c.num_tokens, c.sample) for c in chunks[:3]] == [
        (0, 8, False), (8, 8, False), (16, 4, True)]
    assert all(c.num_tokens == 1 for c in chunks[3:])
    assert finished[0].status == SequenceStatus.FINISHED_LENGTH
    assert finished[0].num_output_tokens == 3


def test_requests_join_and_leave_every_step():
    sched = make_scheduler()
    sched.add(make_request("a", 4, max_tokens=2), 0.0)
    p1 = sched.schedule(0.0)
    sched.update(p1, {"a-0": 7}, 0.0)
    sched.add(make_request("b", 4, max_tokens=2, arrival=1.0), 1.0)
    p2 = sched.schedule(1.0)
    assert {s.seq_id for s in p2.scheduled} == {"a-0", "b-0"}
    assert p2.num_batched_tokens == 1 + 4


def test_eos_finishes_with_stop():
    sched = make_scheduler()
    sched.add(make_request("a", 4, max_tokens=10), 0.0)
    _, finished = run_to_completion(sched, token=0)
    assert finished[0].status == SequenceStatus.FINISHED_STOPPED
    assert sched.kv.num_free_blocks == sched.kv.num_blocks


def test_preemption_recomputes_and_keeps_output():
    sched = make_scheduler(num_blocks=6, block_size=4, max_model_len=24)
    sched.add(make_request("a", 8, max_tokens=12), 0.0)
    sched.add(make_request("b", 8, max_tokens=12, arrival=1.0), 0.0)
    plans, finished = run_to_completion(sched)
    assert any(p.preempted for p in plans)
    assert sorted(s.num_output_tokens for s in finished) == [12, 12]
    assert sched.num_preemptions >= 1


def test_n_choices_fork_after_prefill_and_share_prompt_blocks():
    sched = make_scheduler(block_size=4)
    parent, child = make_request("a", 6, max_tokens=3, n=2)
    sched.add([parent, child], 0.0)
    plan = sched.schedule(0.0)
    assert [s.seq_id for s in plan.scheduled] == ["a-0"]  # the prompt is computed once
    sched.update(plan, {"a-0": 9}, 0.0)
    assert child.block_ids[0] == parent.block_ids[0]
    plan = sched.schedule(1.0)
    child_item = next(s for s in plan.scheduled if s.seq_id == "a-1")
    assert (child_item.start, child_item.num_tokens, child_item.sample) == (5, 1, True)
    assert plan.block_copies  # both write into the shared partial block
    _, finished = run_to_completion(sched)
    assert sched.kv.num_free_blocks == sched.kv.num_blocks


def test_abort_frees_blocks_and_drops_children():
    sched = make_scheduler()
    sched.add(make_request("a", 6, n=3), 0.0)
    sched.schedule(0.0)
    dropped = sched.abort("a")
    assert {s.seq_id for s in dropped} == {"a-0", "a-1", "a-2"}
    assert not sched.has_work() and sched.kv.num_free_blocks == sched.kv.num_blocks


def test_same_inputs_same_plans():
    def plans():
        sched = make_scheduler(num_blocks=10)
        for i in range(6):
            sched.add(make_request(f"r{i}", 5 + i, max_tokens=4, n=1 + i % 2,
                                   arrival=float(i)), 0.0)
        return run_to_completion(sched)[0]
    assert plans() == plans()
