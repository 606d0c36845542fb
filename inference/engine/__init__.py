"""The engine runtime: config, model runner, sampler, synchronous core and async front.

``LLMEngine`` steps synchronously; ``AsyncEngine`` runs it on a thread and streams ``Delta``
values to asyncio callers; ``EngineClient`` is the protocol the web side codes against.
"""

from __future__ import annotations

from .async_engine import AsyncEngine, DeltaStream
from .client import DeltaStreamProtocol, EngineClient
from .config import EngineConfig
from .llm_engine import LLMEngine
from .runner import BatchInputs, ModelRunner
from .sampler import Sampler, SamplerOutput, SamplingRow
from .stats import EngineStats

__all__ = ["AsyncEngine", "BatchInputs", "DeltaStream", "DeltaStreamProtocol", "EngineClient",
           "EngineConfig", "EngineStats", "LLMEngine", "ModelRunner", "Sampler",
           "SamplerOutput", "SamplingRow"]
