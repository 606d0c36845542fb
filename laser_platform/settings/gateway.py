"""Gateway settings: request limits, admission, WebSocket backpressure, remote engine workers."""

from __future__ import annotations

from pathlib import PurePath

from laser_platform.settings._env import env
from laser_platform.settings.inference import BUNDLED_MODEL_NAMES, LASER_MODEL


def served_name(model: str) -> str:
    """The id a model is served under: the bundled model's name, else the checkpoint's file
    name without ``.gguf`` (or its folder's name)."""
    if model.lower() in BUNDLED_MODEL_NAMES:
        return "smollm2-135m-instruct"
    path = PurePath(model.rstrip("/\\"))
    return path.stem if path.suffix.lower() == ".gguf" else path.name


# The id `/v1/models` lists and requests must send as `model` (default: from LASER_MODEL).
LASER_SERVED_MODEL_ID: str = env("LASER_SERVED_MODEL_ID", served_name(LASER_MODEL))
# max_tokens when a request leaves it open (shrunk to what the context has left).
LASER_DEFAULT_MAX_TOKENS: int = env("LASER_DEFAULT_MAX_TOKENS", 512, int)
# Largest JSON body the REST endpoints read; bigger ones get 413 without being parsed.
LASER_MAX_REQUEST_BYTES: int = env("LASER_MAX_REQUEST_BYTES", 1024 * 1024, int)
# Requests one web process serves at once; past it new ones get 503 before any work.
LASER_GATEWAY_MAX_INFLIGHT: int = env("LASER_GATEWAY_MAX_INFLIGHT", 256, int)
# Concurrency caps (apps/gateway/slots.py: caps_for): requests in flight per API key (or user)
# and per tenant, and open WebSockets per key; past one, 429 with Retry-After. One key can run
# 64 streams and 32 chats at once.
LASER_KEY_MAX_INFLIGHT: int = env("LASER_KEY_MAX_INFLIGHT", 128, int)
LASER_TENANT_MAX_INFLIGHT: int = env("LASER_TENANT_MAX_INFLIGHT", 256, int)
LASER_KEY_MAX_SOCKETS: int = env("LASER_KEY_MAX_SOCKETS", 32, int)
# Requests queued in the engine past which new ones get 503 before they are tokenised.
LASER_GATEWAY_MAX_QUEUED: int = env("LASER_GATEWAY_MAX_QUEUED", 512, int)
# Rate limits and the concurrency caps above are shared through Redis when set (defaults to
# REDIS_URL), so every web process counts against one cap; in-process otherwise.
LASER_RATELIMIT_REDIS_URL: str = env("LASER_RATELIMIT_REDIS_URL", env("REDIS_URL", ""))
# Seconds a concurrency slot held in Redis outlives a web process that died holding it (live
# processes renew theirs every third of it).
LASER_SLOT_LEASE_S: float = env("LASER_SLOT_LEASE_S", 30.0, float)
# WebSocket: messages queued for a slow reader before the socket is closed with 4008.
LASER_WS_SEND_QUEUE: int = env("LASER_WS_SEND_QUEUE", 256, int)
# WebSocket: largest incoming message; a bigger one gets an error and the close code 1009.
LASER_WS_MAX_MESSAGE_BYTES: int = env("LASER_WS_MAX_MESSAGE_BYTES", LASER_MAX_REQUEST_BYTES, int)
# WebSocket: seconds an unauthenticated socket may wait before its first `auth` message.
LASER_WS_AUTH_TIMEOUT: float = env("LASER_WS_AUTH_TIMEOUT", 10.0, float)
# WebSocket: chat sessions kept per connection, and messages kept per session.
LASER_WS_MAX_SESSIONS: int = env("LASER_WS_MAX_SESSIONS", 16, int)
LASER_WS_MAX_HISTORY: int = env("LASER_WS_MAX_HISTORY", 64, int)
# Remote engine workers: heartbeat period and how long a silent worker counts as alive.
LASER_ENGINE_HEARTBEAT_S: float = env("LASER_ENGINE_HEARTBEAT_S", 1.0, float)
LASER_ENGINE_WORKER_TTL_S: float = env("LASER_ENGINE_WORKER_TTL_S", 3.0, float)
LASER_ENGINE_REDIS_URL: str = env("LASER_ENGINE_REDIS_URL", env("REDIS_URL", ""))
