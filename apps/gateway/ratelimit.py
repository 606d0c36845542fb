"""Per-tenant, per-tier fixed-window counters: requests/min, tokens/min and tokens/day.

With ``LASER_RATELIMIT_REDIS_URL`` (default ``REDIS_URL``) set, one Lua script checks and
reserves atomically, so N web processes share one budget; without it an in-process counter does
the same for the single embedded process.

Tokens are *reserved* at admission (the prompt's real token count, after tokenising, plus
``max_tokens`` × n) against tokens/min and the daily budget alike, and *settled* when the request
ends with the real count: concurrent requests cannot overrun either while they still run, so N
requests against a budget of B tokens deliver at most B in total. A request whose output does not
fit what the budget has left is clipped to it (``clip``: the client left ``max_tokens`` open) or
refused with ``QUOTA``.

Redis down (or not answering within ``_REDIS_TIMEOUT_S``): ``check`` refuses with
``LimiterUnavailable`` (503 ``rate_limiter_unavailable``, logged), since admitting unmetered would
break every tenant's contract at once; a failed ``settle`` is logged by its caller and leaves the
reservation to expire with its window (every key is written with its TTL in one transaction).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings

from apps.core.errors import EngineOverloadedError

logger = logging.getLogger(__name__)

# ARGV: budget, rpm, tpm (the contract's, -1: unlimited), prompt tokens, output tokens per
# choice, choices, clip (1/0), rpm and tpm ceilings (the burst ceiling, -1: unlimited). Returns
# {0, output per choice, 1|0 in contract} admitted, {1, 1|2} over the ceiling on
# requests|tokens, {2, 0} daily budget spent (or too little left for this request).
_ADMIT_LUA = """
local budget, rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local prompt, out, n, clip = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
  tonumber(ARGV[7])
local rcap, tcap = tonumber(ARGV[8]), tonumber(ARGV[9])
local day = tonumber(redis.call('GET', KEYS[3]) or '0')
if budget >= 0 then
  local left = budget - day
  if prompt + out * n > left then
    if clip == 0 or left < prompt + n then return {2, 0} end
    out = math.floor((left - prompt) / n)
  end
end
local est = prompt + out * n
local r = tonumber(redis.call('GET', KEYS[1]) or '0')
if rcap >= 0 and r >= rcap then return {1, 1} end
local t = tonumber(redis.call('GET', KEYS[2]) or '0')
if tcap >= 0 and t > 0 and t + est > tcap then return {1, 2} end
local within = 1
if (rpm >= 0 and r >= rpm) or (tpm >= 0 and t > 0 and t + est > tpm) then within = 0 end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], 120)
redis.call('INCRBY', KEYS[2], est)
redis.call('EXPIRE', KEYS[2], 120)
redis.call('INCRBY', KEYS[3], est)
redis.call('EXPIRE', KEYS[3], 172800)
return {0, out, within}
"""

ADMITTED, LIMITED, QUOTA = 0, 1, 2
_DAY_TTL_S = 2 * 86400
_REDIS_TIMEOUT_S = 2.0  # connect and reply: a hung Redis must not hold requests for long


class LimiterUnavailable(EngineOverloadedError):
    """503: the shared counters (Redis) do not answer, so no request can be metered."""

    code = "rate_limiter_unavailable"

    def __init__(self) -> None:
        super().__init__("The rate limiter is unavailable (its Redis does not answer); retry "
                         "shortly.", retry_after=2.0)


@dataclass(frozen=True, slots=True)
class Limits:
    """``None`` means unlimited. Traffic up to the contract's rates is in contract; above them it
    is excess, still admitted up to ``burst_factor`` times those rates (the burst ceiling)."""

    requests_per_min: int | None
    tokens_per_min: int | None
    daily_token_budget: int | None
    burst_factor: float = 1.0

    def ceilings(self) -> tuple[int, int]:
        """(requests, tokens) per minute of the burst ceiling; -1 is unlimited."""
        return (_ceiling(self.requests_per_min, self.burst_factor),
                _ceiling(self.tokens_per_min, self.burst_factor))


@dataclass(frozen=True, slots=True)
class Ask:
    """What one request asks for: its prompt's tokens, up to ``output`` tokens for each of
    ``choices``; ``clip`` lets admission lower ``output`` to what the daily budget has left."""

    prompt: int
    output: int
    choices: int = 1
    clip: bool = False


@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted request's reservation, handed back to ``settle``."""

    minute_key: str
    day_key: str
    reserved_tokens: int


@dataclass(frozen=True, slots=True)
class Verdict:
    status: int
    retry_after_s: float = 0.0
    which: str = ""
    ticket: Ticket | None = None
    output: int = 0  # admitted: output tokens per choice granted (clipped or as asked)
    in_contract: bool = True  # admitted: within the contract's rates (False: excess)


def _keys(tenant_id: str, tier: str, now: float) -> tuple[str, str, str]:
    minute = int(now // 60)
    day = time.strftime("%Y%m%d", time.gmtime(now))
    base = f"laser:rl:{tenant_id}:{tier}"
    return f"{base}:r:{minute}", f"{base}:t:{minute}", f"{base}:d:{day}"


def _limit(value: int | None) -> int:
    return -1 if value is None else int(value)


def _ceiling(value: int | None, factor: float) -> int:
    return -1 if value is None else max(int(value), math.floor(int(value) * factor))


def _over(limit: int, used: int, est: int) -> bool:
    """Tokens: the first request of a window always fits (one prompt may exceed a small tpm)."""
    return limit >= 0 and used > 0 and used + est > limit


class MemoryLimiter:
    """The embedded fallback: the same semantics as the Lua script, under a lock."""

    def __init__(self) -> None:
        self._counts: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def _get(self, key: str, now: float) -> int:
        value, expires = self._counts.get(key, (0, 0.0))
        return value if expires > now else 0

    def _add(self, key: str, amount: int, now: float, ttl: float) -> None:
        self._counts[key] = (self._get(key, now) + amount, now + ttl)

    def check(self, tenant_id: str, tier: str, limits: Limits, ask: Ask, now: float) -> Verdict:
        rkey, tkey, dkey = _keys(tenant_id, tier, now)
        with self._lock:
            if len(self._counts) > 10_000:
                self._counts = {k: v for k, v in self._counts.items() if v[1] > now}
            budget, out = _limit(limits.daily_token_budget), ask.output
            if budget >= 0:
                left = budget - self._get(dkey, now)
                if ask.prompt + out * ask.choices > left:
                    if not ask.clip or left < ask.prompt + ask.choices:
                        return Verdict(QUOTA)
                    out = (left - ask.prompt) // ask.choices
            est = ask.prompt + out * ask.choices
            rpm, tpm = _limit(limits.requests_per_min), _limit(limits.tokens_per_min)
            rcap, tcap = limits.ceilings()
            requests, used = self._get(rkey, now), self._get(tkey, now)
            if rcap >= 0 and requests >= rcap:
                return Verdict(LIMITED, _window_left(now), "requests")
            if _over(tcap, used, est):
                return Verdict(LIMITED, _window_left(now), "tokens")
            within = not (rpm >= 0 and requests >= rpm) and not _over(tpm, used, est)
            self._add(rkey, 1, now, 120)
            self._add(tkey, est, now, 120)
            self._add(dkey, est, now, _DAY_TTL_S)
        return Verdict(ADMITTED, ticket=Ticket(tkey, dkey, est), output=out, in_contract=within)

    def settle(self, ticket: Ticket, actual_tokens: int, now: float) -> None:
        with self._lock:
            self._add(ticket.minute_key, actual_tokens - ticket.reserved_tokens, now, 120)
            self._add(ticket.day_key, actual_tokens - ticket.reserved_tokens, now, _DAY_TTL_S)


class RedisLimiter:
    """Atomic across processes; sync (``check``/``settle``) and async (``acheck``/``asettle``)."""

    def __init__(self, url: str) -> None:
        import redis
        import redis.asyncio as aredis

        self._redis = redis
        self._sync = redis.Redis.from_url(url, **self._timeouts)
        self._url = url
        self._aredis = aredis
        self._async: dict[int, object] = {}  # one client per event loop
        self._script = self._sync.register_script(_ADMIT_LUA)

    _timeouts = {"socket_timeout": _REDIS_TIMEOUT_S, "socket_connect_timeout": _REDIS_TIMEOUT_S}

    def _aclient(self):
        import asyncio

        loop_id = id(asyncio.get_running_loop())
        client = self._async.get(loop_id)
        if client is None:
            client = self._async[loop_id] = self._aredis.Redis.from_url(self._url,
                                                                          **self._timeouts)
        return client

    @staticmethod
    def _args(limits: Limits, ask: Ask) -> list[int]:
        return [_limit(limits.daily_token_budget), _limit(limits.requests_per_min),
                _limit(limits.tokens_per_min), ask.prompt, ask.output, ask.choices,
                int(ask.clip), *limits.ceilings()]

    @staticmethod
    def _verdict(result: list, keys: tuple[str, str, str], ask: Ask, now: float) -> Verdict:
        status, value = int(result[0]), int(result[1])
        if status == QUOTA:
            return Verdict(QUOTA)
        if status == LIMITED:
            return Verdict(LIMITED, _window_left(now), "requests" if value == 1 else "tokens")
        est = ask.prompt + value * ask.choices
        return Verdict(ADMITTED, ticket=Ticket(keys[1], keys[2], est), output=value,
                       in_contract=bool(int(result[2])))

    def check(self, tenant_id: str, tier: str, limits: Limits, ask: Ask, now: float) -> Verdict:
        keys = _keys(tenant_id, tier, now)
        try:
            result = self._script(keys=list(keys), args=self._args(limits, ask))
        except (self._redis.RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        return self._verdict(result, keys, ask, now)

    async def acheck(self, tenant_id: str, tier: str, limits: Limits, ask: Ask,
                     now: float) -> Verdict:
        keys = _keys(tenant_id, tier, now)
        client = self._aclient()
        try:
            result = await client.eval(_ADMIT_LUA, 3, *keys, *self._args(limits, ask))
        except (self._redis.RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        return self._verdict(result, keys, ask, now)

    def _unavailable(self, exc: Exception) -> LimiterUnavailable:
        logger.warning("rate limiter: Redis at %s failed (%s); refusing with 503",
                       self._sync.get_connection_kwargs().get("host"), exc)
        return LimiterUnavailable()

    @staticmethod
    def _settle_on(pipe: Any, ticket: Ticket, actual_tokens: int) -> None:
        change = actual_tokens - ticket.reserved_tokens
        pipe.incrby(ticket.minute_key, change)
        pipe.expire(ticket.minute_key, 120)  # recreated if the request outlived its window
        pipe.incrby(ticket.day_key, change)
        pipe.expire(ticket.day_key, _DAY_TTL_S)

    def settle(self, ticket: Ticket, actual_tokens: int, now: float) -> None:
        pipe = self._sync.pipeline()
        self._settle_on(pipe, ticket, actual_tokens)
        pipe.execute()

    async def asettle(self, ticket: Ticket, actual_tokens: int, now: float) -> None:
        pipe = self._aclient().pipeline()
        self._settle_on(pipe, ticket, actual_tokens)
        await pipe.execute()


def _window_left(now: float) -> float:
    return 60.0 - (now % 60.0)


@lru_cache(maxsize=1)
def get_limiter() -> MemoryLimiter | RedisLimiter:
    """The process's limiter: Redis when configured, else in-process."""
    url = settings.LASER_RATELIMIT_REDIS_URL
    return RedisLimiter(url) if url else MemoryLimiter()
