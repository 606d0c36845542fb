"""Channel layer: channels_redis when ``REDIS_URL`` is set, else in-memory (one process only)."""

from __future__ import annotations

from laser_platform.settings._env import env

_REDIS_URL: str = env("REDIS_URL", "")

if _REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [_REDIS_URL],
                "prefix": "laser",
                "capacity": env("CHANNEL_LAYER_CAPACITY", 1000, int),
                "expiry": env("CHANNEL_LAYER_EXPIRY", 60, int),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
