"""The engine gives free memory back when it goes idle (``inference.engine.memory``)."""

from __future__ import annotations

import platform

import pytest

from inference.engine.memory import IdleTrim, _malloc_trim
from tests.inference.engine.helpers import make_engine, prompt_ids, request


def test_idle_trim_runs_at_most_once_an_interval():
    calls: list[int] = []
    trim = IdleTrim(interval_s=60.0, trim=lambda pad: calls.append(pad) or 1)
    assert trim.maybe(100.0) and not trim.maybe(159.0) and trim.maybe(160.0)
    assert calls == [0, 0] and trim.trims == 2


def test_without_malloc_trim_nothing_runs():
    trim = IdleTrim(trim=None)
    trim._trim = None  # off glibc
    assert not trim.maybe(1e9)


def test_the_engine_trims_only_with_no_request_left():
    engine = make_engine()
    calls: list[int] = []
    engine._idle_trim = IdleTrim(interval_s=0.0, trim=lambda pad: calls.append(pad) or 1)
    engine.add_request(request("r", prompt_ids(8), max_tokens=2))
    assert not engine.release_idle_memory()
    while engine.has_unfinished():
        engine.step()
    assert engine.release_idle_memory() and calls == [0]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_trim_is_found():
    assert _malloc_trim() is not None


def test_a_model_or_pool_that_does_not_fit_is_refused_with_its_needs(tmp_path, monkeypatch):
    from inference.engine import memory
    from inference.engine.memory import InsufficientMemory, check_fits, checkpoint_bytes

    check_fits("x", {"a": 10, "b": 5}, available=15)
    with pytest.raises(InsufficientMemory, match=r"model m needs 3\.00 GiB .*weights 2\.00 GiB, "
                                                 r"KV 1\.00 GiB\) but 2\.50 GiB is available"):
        check_fits("model m", {"weights": 2 << 30, "KV": 1 << 30}, available=5 << 29)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"\0" * 1000)
    assert checkpoint_bytes(str(gguf)) == 1000 and checkpoint_bytes(None) == 0
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    check_fits("unknown", {"a": 10**15})  # off Linux: nothing to check against
    # the engine checks its KV pool against what is left once the weights are in
    monkeypatch.setattr(memory, "available_bytes", lambda: 1024)
    with pytest.raises(InsufficientMemory, match="the KV cache needs"):
        make_engine()


def test_the_engine_states_its_kv_pool_and_longest_sequence_at_start(caplog, monkeypatch):
    from inference.engine import memory
    from inference.engine.memory import pool_summary

    line = pool_summary(10, 16, 2048, "torch.float16", 160, 8192, available=3 << 30)
    assert line.startswith("KV pool: 10 blocks of 16 tokens = 160 tokens, 0 MiB of torch.float16")
    assert "longest sequence 160 tokens (the model's context 8192, capped" in line
    assert line.endswith("memory available 3.0 GiB")
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    whole = pool_summary(600, 16, 2048, "f", 8192, 8192)
    assert "longest sequence 8192 tokens;" in whole and "unknown" in whole
    monkeypatch.undo()
    with caplog.at_level("INFO", logger="inference.engine.llm_engine"):
        engine = make_engine(num_blocks=16)  # 64 slots: the tiny model's context is longer
    stated = [r.getMessage() for r in caplog.records if r.getMessage().startswith("KV pool")]
    assert stated and f"longest sequence {engine.max_model_len} tokens" in stated[0]
    assert "16 blocks" in stated[0]
