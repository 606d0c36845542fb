"""Constrained decoding in the engine (``inference.engine.grammar``) on the tiny random model:
whatever the weights say, every constrained answer matches its grammar, the rows without one
in the same batch sample exactly as alone, compiled grammars are reused, and a grammar cut
short by ``max_tokens`` ends with ``length``."""

from __future__ import annotations

import json

import jsonschema
import pytest

from inference.engine.grammar import GrammarCompiler, build_tokenizer
from inference.errors import InvalidParameter
from inference.request import Constraint, EngineRequest, SamplingParams
from tests.inference.engine.helpers import make_engine, run, tiny_tokenizer

SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string", "maxLength": 6},
                   "n": {"type": "integer", "minimum": 3, "maximum": 40},
                   "kind": {"enum": ["fox", "dog"]},
                   "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
    "required": ["word", "n", "kind", "tags"], "additionalProperties": False,
}
JSON_SCHEMA = Constraint("json_schema", json.dumps(SCHEMA), strict=True)


def _request(rid: str, constraint: Constraint | None, seed: int, max_tokens: int = 80,
             **sampling) -> EngineRequest:
    sp = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed, **sampling)
    return EngineRequest(rid, sp, messages=[{"role": "user", "content": "hello world"}],
                         tenant_id="t", constraint=constraint)


def _add(engine, *requests: EngineRequest) -> None:
    for r in requests:
        engine.add_request(r, engine.encode(r))


def test_the_vocabulary_bytes_spell_what_the_tokenizer_decodes():
    tok = tiny_tokenizer()
    lltok = build_tokenizer(tok, tok.vocab_size, tok.eos_token_ids)
    ids = tok.encode("the quick brown fox, ünïcode!", add_special_tokens=False)
    assert lltok.decode_bytes(ids) == "the quick brown fox, ünïcode!".encode()
    assert lltok.is_special_token(tok.token_to_id("<|im_end|>"))


def test_every_constrained_answer_matches_its_schema_and_free_rows_are_untouched():
    engine = make_engine()
    alone = run_one(make_engine(), _request("free", None, seed=7, max_tokens=12))
    _add(engine, *(_request(f"j{i}", JSON_SCHEMA, seed=i) for i in range(6)),
         _request("free", None, seed=7, max_tokens=12))
    out = run(engine)
    for i in range(6):
        _, text, finish = out[f"j{i}"][0]
        assert finish == "stop", text
        jsonschema.validate(json.loads(text), SCHEMA)
    assert out["free"][0] == alone  # the batch's masks left the free row's logits alone
    assert len({out[f"j{i}"][0][1] for i in range(6)}) > 1
    assert engine.grammar is not None and not engine.grammar  # finished: no matcher kept


def run_one(engine, request: EngineRequest):
    _add(engine, request)
    return run(engine)[request.request_id][0]


def test_json_object_and_tool_calls_grammars():
    engine = make_engine()
    tools = [{"name": "get", "parameters": {"type": "object", "properties": {
        "k": {"enum": ["x", "y"]}}, "required": ["k"], "additionalProperties": False}}]
    calls = Constraint("tool_calls", json.dumps(tools), parallel=False, param="tools")
    _add(engine, _request("obj", Constraint("json_object"), seed=1, max_tokens=200),
         _request("call", calls, seed=2))
    out = run(engine)
    _, text, _ = out["call"][0]
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
    body = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
    assert body["name"] == "get" and body["arguments"]["k"] in ("x", "y")
    _, text, finish = out["obj"][0]
    if finish == "stop":  # a random model may write a long object: length is then honest
        assert isinstance(json.loads(text), dict)
    else:
        assert finish == "length"


def test_a_grammar_cut_short_ends_with_length():
    engine = make_engine()
    _add(engine, _request("short", JSON_SCHEMA, seed=3, max_tokens=3))
    _, text, finish = run(engine)["short"][0]
    assert finish == "length"
    with pytest.raises(ValueError):
        json.loads(text)


def test_compiled_grammars_are_cached_and_bad_schemas_refused():
    engine = make_engine()
    compiler = engine.grammar.compiler
    for i in range(3):
        engine.encode(_request(f"c{i}", JSON_SCHEMA, seed=i))
    assert compiler.compiles == 1
    bad = Constraint("json_schema", json.dumps({"type": "object", "not": {}}), strict=True)
    with pytest.raises(InvalidParameter) as info:
        engine.encode(_request("bad", bad, seed=0))
    assert info.value.param == "response_format" and "does not compile" in info.value.message
    # not strict: the unknown keyword is ignored, the rest still constrains
    engine.encode(_request("lenient", Constraint("json_schema", bad.schema), seed=0))


def test_a_compiler_without_an_end_token_is_refused():
    tok = tiny_tokenizer()
    with pytest.raises(ValueError):
        GrammarCompiler(tok, tok.vocab_size, ()).tokenizer


def test_a_vocabulary_that_cannot_spell_the_grammar_ends_with_length(tmp_path):
    """The live tests' tiny GGUF has 97 tokens and no '{': the grammar dead-ends, only the
    end token is left, and the answer is reported cut short, never as a valid stop."""
    from inference.engine import EngineConfig, LLMEngine
    from inference.loaders import load_model
    from tests.apps.gateway.live import write_tiny_model

    path = write_tiny_model(tmp_path / "tiny.gguf")
    engine = LLMEngine(EngineConfig(model=str(path), kv_memory_mb=4, max_model_len=256),
                       loaded=load_model(str(path), use_cache=False))
    _add(engine, _request("dead", Constraint("json_object"), seed=0, max_tokens=20))
    _, text, finish = run(engine)["dead"][0]
    assert finish == "length"
