"""Wire format between web processes and ``run_engine`` workers (channel layer messages).

Messages are msgpack-able dicts: string keys, lists instead of tuples, no int-keyed maps.
Worker channel: ``engine.generate`` {request, prompt_ids, reply}, ``engine.abort``
{request_id}, ``engine.encode`` {request, reply}.
Reply channel: ``engine.started`` {request_id, worker}, ``engine.deltas`` {request_id,
deltas, texts}, ``engine.end`` {request_id}, ``engine.error`` {request_id, error},
``engine.encoded`` {request_id, ids} (an encode's reply; its request_id carries
``ENCODE_SUFFIX`` so it never meets the same request's stream).
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from inference import errors
from inference.request import (
    Constraint,
    ContractTargets,
    Delta,
    EngineRequest,
    Profile,
    SamplingParams,
    Tier,
    TierChange,
)

GENERATE, ABORT, ENCODE = "engine.generate", "engine.abort", "engine.encode"
ENCODED = "engine.encoded"
ENCODE_SUFFIX = "#encode"
STARTED, DELTAS, END, ERROR = "engine.started", "engine.deltas", "engine.end", "engine.error"


def _listify(data: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def request_to_wire(req: EngineRequest) -> dict[str, Any]:
    return {
        "request_id": req.request_id, "sampling": _listify(asdict(req.sampling)),
        "prompt": req.prompt, "messages": req.messages, "prompt_token_ids": req.prompt_token_ids,
        "tier": str(req.tier), "tenant_id": req.tenant_id, "targets": asdict(req.targets),
        "profile": asdict(req.profile) if req.profile is not None else None,
        "cache_salt": req.cache_salt, "arrival_time": req.arrival_time,
        "deadline": req.deadline, "session_id": req.session_id,
        "in_contract": req.in_contract, "tools": req.tools,
        "constraint": asdict(req.constraint) if req.constraint is not None else None,
    }


def request_from_wire(data: dict[str, Any]) -> EngineRequest:
    sampling = dict(data["sampling"])
    for name in ("stop", "stop_token_ids"):
        sampling[name] = tuple(sampling.get(name) or ())
    return EngineRequest(
        request_id=data["request_id"], sampling=SamplingParams(**sampling),
        prompt=data["prompt"], messages=data["messages"],
        prompt_token_ids=data["prompt_token_ids"], tier=Tier(data["tier"]),
        tenant_id=data["tenant_id"], targets=ContractTargets(**data["targets"]),
        profile=Profile(**data["profile"]) if data.get("profile") else None,
        cache_salt=data["cache_salt"], arrival_time=data["arrival_time"],
        deadline=data["deadline"], session_id=data["session_id"],
        in_contract=bool(data.get("in_contract", True)), tools=data.get("tools"),
        constraint=Constraint(**data["constraint"]) if data.get("constraint") else None,
    )


def delta_to_wire(d: Delta) -> dict[str, Any]:
    data = {f.name: getattr(d, f.name) for f in fields(Delta)}
    data = _listify(data)
    data["tier"] = str(d.tier)
    if d.top_logprobs is not None:
        data["top_logprobs"] = [[[int(t), float(lp)] for t, lp in top.items()]
                                for top in d.top_logprobs]
    if d.tier_change is not None:
        c = d.tier_change
        data["tier_change"] = {"from_tier": str(c.from_tier), "to_tier": str(c.to_tier),
                               "reason": c.reason, "at": c.at}
    return data


def delta_from_wire(data: dict[str, Any]) -> Delta:
    data = dict(data)
    for name in ("token_ids", "token_times", "logprobs"):
        if data.get(name) is not None:
            data[name] = tuple(data[name])
    if data.get("top_logprobs") is not None:
        data["top_logprobs"] = tuple({int(t): lp for t, lp in top}
                                     for top in data["top_logprobs"])
    if data.get("tier_change") is not None:
        c = data["tier_change"]
        data["tier_change"] = TierChange(Tier(c["from_tier"]), Tier(c["to_tier"]), c["reason"],
                                         c["at"])
    data["tier"] = Tier(data["tier"])
    return Delta(**data)


def error_to_wire(exc: BaseException) -> dict[str, Any]:
    data: dict[str, Any] = {"kind": type(exc).__name__, "message": str(exc)}
    for name in ("param", "reason", "tier", "retry_after_s", "prompt_tokens", "max_tokens",
                 "max_model_len"):
        if hasattr(exc, name):
            value = getattr(exc, name)
            data[name] = str(value) if name == "tier" else value
    return data


def error_from_wire(data: dict[str, Any]) -> Exception:
    """Rebuild the engine's typed error so the gateway maps it exactly as in embedded mode."""
    kind = data.get("kind")
    message = data.get("message", "engine error")
    if kind == "PromptTooLong":
        return errors.PromptTooLong(data["param"], data["prompt_tokens"], data["max_tokens"],
                                    data["max_model_len"])
    if kind == "InvalidParameter":
        return errors.InvalidParameter(data.get("param", ""), message)
    if kind in ("EngineOverloaded", "AdmissionRefused"):
        cls = getattr(errors, kind)
        return cls(data.get("reason", message), tier=data.get("tier", ""),
                   retry_after_s=data.get("retry_after_s"))
    if kind == "EngineUnavailable":
        return errors.EngineUnavailable(message)
    return errors.EngineError(message)
