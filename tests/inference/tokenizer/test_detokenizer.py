"""Incremental detokenizer: whole UTF-8 characters only, stop strings across tokens."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.tokenizer import Detokenizer
from tests.inference.tokenizer.byte_vocab import byte_tokenizer


def stream(text_or_ids, stop=(), **kw):
    tok = byte_tokenizer()
    ids = tok.encode(text_or_ids) if isinstance(text_or_ids, str) else text_or_ids
    det = Detokenizer(tok, stop, **kw)
    pieces = [det.push(i) for i in ids]
    return pieces, det.finish(), det


def test_multibyte_character_is_never_split():
    text = "añ€😀"
    tok = byte_tokenizer()
    ids = tok.encode(text)
    assert len(ids) == 1 + 2 + 3 + 4  # one token per byte: characters span tokens
    pieces, tail, _ = stream(text)
    assert [p for p in pieces if p] == ["a", "ñ", "€", "😀"]
    assert all("\ufffd" not in p for p in pieces) and tail == ""


def test_stop_string_across_tokens_is_not_emitted():
    text = "hello STOP world"
    tok = byte_tokenizer()
    assert len(tok.encode("STOP")) == 4  # the stop string spans four tokens
    pieces, tail, det = stream(text, stop=["STOP"])
    assert "".join(pieces) + tail == "hello "
    assert det.stopped == "STOP" and det.done
    assert det.push(tok.encode("x")[0]) == ""


def test_stop_string_split_over_byte_tokens_and_partial_prefix_is_released():
    tok = byte_tokenizer()
    ids = [tok.token_to_id(c) for c in "abc"] + tok.encode("é") + [tok.token_to_id("x")]
    # "cé" split across tokens; "cx" is only a near miss and must come out at the end.
    pieces, tail, det = stream(ids, stop=["céx", "cz"])
    assert det.stopped == "céx" and "".join(pieces) + tail == "ab"
    pieces, tail, det = stream(tok.encode("abcd"), stop=["cz"])
    assert det.stopped is None and "".join(pieces) + tail == "abcd"
    assert pieces[2] == ""  # "c" held while it could start "cz"


def test_stop_token_ids_and_special_tokens():
    tok = byte_tokenizer()
    ids = tok.encode("hello") + [2] + tok.encode(" world")
    pieces, tail, det = stream(ids, stop_token_ids=[2])
    assert "".join(pieces) + tail == "hello" and det.stopped_token == 2
    pieces, tail, _ = stream([1, *tok.encode("hi"), 0])
    assert "".join(pieces) + tail == "hi"  # special tokens skipped
    pieces, tail, _ = stream([1, *tok.encode("hi")], skip_special_tokens=False)
    assert "".join(pieces) + tail == "<|im_start|>hi"


def test_stop_token_flushes_held_text():
    tok = byte_tokenizer()
    ids = tok.encode("abc") + [2]
    pieces, tail, det = stream(ids, stop=["cz"], stop_token_ids=[2])
    assert "".join(pieces) + tail == "abc" and det.stopped_token == 2


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40))
def test_streaming_concatenation_equals_full_decode(text):
    tok = byte_tokenizer()
    ids = tok.encode(text)
    pieces, tail, det = stream(ids)
    assert "".join(pieces) + tail == tok.decode(ids) == text
    assert all("\ufffd" not in p for p in pieces)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 270), max_size=30), st.lists(st.text("ab€ ", min_size=1,
                                                                    max_size=3), max_size=2))
def test_random_ids_with_stops_are_a_prefix_of_the_full_decode(ids, stops):
    """Arbitrary (even invalid UTF-8) id streams: output is the full decode cut at the first
    stop string, or the full decode when none occurs."""
    tok = byte_tokenizer()
    pieces, tail, det = stream(ids, stop=stops)
    full = tok.decode(ids)
    out = "".join(pieces) + tail
    if det.stopped is None:
        assert out == full and not any(s in full for s in stops)
    else:
        assert full.startswith(out + det.stopped)
        assert not any(s in out for s in stops)
