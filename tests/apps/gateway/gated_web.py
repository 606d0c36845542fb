"""A web process for the two-process tests: the project's ASGI app with a scripted engine whose
streams send their first word, then wait until the file named by ``LASER_TEST_GATE`` exists.

Run as ``uvicorn tests.apps.gateway.gated_web:application``; the streams it holds open keep
their concurrency slots (in Redis) until the test opens the gate.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator

from apps.gateway.engine_client import set_engine_client
from inference.request import Delta, EngineRequest
from laser_platform.asgi import application  # noqa: F401 - served by uvicorn
from tests.apps.gateway.fakes import FakeEngine

GATE_WAIT_S = 60.0


class GatedEngine(FakeEngine):
    async def deltas(self, req: EngineRequest) -> AsyncGenerator[Delta]:
        gate, waited = os.environ["LASER_TEST_GATE"], 0.0
        async for delta in super().deltas(req):
            yield delta
            while not os.path.exists(gate) and waited < GATE_WAIT_S:
                await asyncio.sleep(0.02)
                waited += 0.02


set_engine_client(GatedEngine())
