"""Concurrency slots counted across web processes: leases in Redis.

Each held slot is a member of a sorted set per key (or user) and per tenant (sockets: per key),
scored by when it expires. One Lua script drops the expired members, checks the caps and adds
the new one, atomically for every process; the holder removes it when the request (or socket)
ends. A process that dies holding slots cannot remove them: their leases run out after
``LASER_SLOT_LEASE_S``, and a thread of each live process renews its own leases every third of
that, however long a stream runs. Times are Redis's own (``TIME``), so the web hosts' clocks
do not matter. Redis down: 503 ``rate_limiter_unavailable``, as the rate limiter answers.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from django.conf import settings

from apps.gateway.ratelimit import LimiterUnavailable

logger = logging.getLogger(__name__)

# KEYS: the sets; ARGV: lease seconds, member, then a cap per set. 0 = taken, else the
# (1-based) set that is full.
_ACQUIRE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[2 + i]) then return i end
end
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], now + ttl, ARGV[2])
  redis.call('EXPIRE', KEYS[i], math.ceil(ttl) + 1)
end
return 0
"""
# KEYS[1]: a set; ARGV: lease seconds, then members this process holds in it.
_RENEW_LUA = """
local t = redis.call('TIME')
local until_ = tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[i]) end
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1])) + 1)
return 0
"""
# KEYS[1]: a set: the members whose lease has not run out.
_COUNT_LUA = """
local t = redis.call('TIME')
return redis.call('ZCOUNT', KEYS[1], '(' .. (tonumber(t[1]) + tonumber(t[2]) / 1e6), '+inf')
"""
_TIMEOUT_S = 2.0


class RedisSlots:
    """``slots.Slots``'s interface with the counts in Redis (``url``): what every web process
    holds. ``caps_of(tenant)`` reads the caps, ``over(what, cap)`` makes the 429 (both from
    ``slots``, which builds this: a caller is a ``slots.Caller``)."""

    def __init__(self, url: str, caps_of: Callable[[Any], Any],
                 over: Callable[[str, int], Exception]) -> None:
        import redis
        import redis.asyncio as aredis

        self.url, self._caps_of, self._over = url, caps_of, over
        self._lock = threading.Lock()
        self._redis, self._aredis = redis, aredis
        opts: dict[str, Any] = {"socket_timeout": _TIMEOUT_S,
                                "socket_connect_timeout": _TIMEOUT_S}
        self._sync = redis.Redis.from_url(url, **opts)
        self._async: dict[int, Any] = {}  # one client per event loop
        self._opts = opts
        self._acquire = self._sync.register_script(_ACQUIRE_LUA)
        self._renew = self._sync.register_script(_RENEW_LUA)
        self._count = self._sync.register_script(_COUNT_LUA)
        self._process = uuid.uuid4().hex[:12]
        self._mine: dict[str, list[str]] = defaultdict(list)  # set -> members held here
        self._renewer: threading.Thread | None = None

    # ---- names ---------------------------------------------------------------------------
    def _prefix(self) -> str:
        # the database's name: deployments (and test runs) sharing one Redis stay apart
        return f"laser:slots:{settings.DATABASES['default']['NAME']}"

    def _sets(self, caller: Any) -> tuple[str, str]:
        p = self._prefix()
        return f"{p}:req:{caller.slot_key}", f"{p}:req:tenant:{caller.tenant.pk}"

    def _socket_set(self, caller: Any) -> str:
        return f"{self._prefix()}:ws:{caller.slot_key}"

    def _member(self) -> str:
        return f"{self._process}:{uuid.uuid4().hex[:12]}"

    # ---- taking and giving back ----------------------------------------------------------
    def _took(self, sets: tuple[str, ...], member: str) -> None:
        with self._lock:
            for name in sets:
                self._mine[name].append(member)
        self._start_renewer()

    def _give_back(self, sets: tuple[str, ...]) -> str | None:
        """One member this process holds in every one of ``sets`` (forgotten here)."""
        with self._lock:
            held = self._mine.get(sets[0])
            if not held:
                return None
            member = held.pop()
            for name in sets:
                if member in self._mine.get(name, ()):
                    self._mine[name].remove(member)
                if not self._mine.get(name):
                    self._mine.pop(name, None)
            return member

    def _refusal(self, result: int, caller: Any, sets: tuple[str, ...]) -> Exception:
        caps = self._caps_of(caller.tenant)
        if len(sets) == 1:
            return self._over("open WebSockets for this key", caps.key_sockets)
        if result == 1:
            return self._over("requests in flight for this key", caps.key_inflight)
        return self._over("requests in flight for this tenant", caps.tenant_inflight)

    def _unavailable(self, exc: Exception) -> LimiterUnavailable:
        logger.warning("slots: Redis at %s failed (%s); refusing with 503", self.url, exc)
        return LimiterUnavailable()

    def _aclient(self) -> Any:
        import asyncio

        loop = id(asyncio.get_running_loop())
        client = self._async.get(loop)
        if client is None:
            client = self._async[loop] = self._aredis.Redis.from_url(self.url, **self._opts)
        return client

    def _take(self, caller: Any, sets: tuple[str, ...], caps: list[int]) -> None:
        """Take a lease in every one of ``sets`` (the sync client), or raise 429."""
        member = self._member()
        try:
            result = int(self._acquire(keys=list(sets),
                                       args=[settings.LASER_SLOT_LEASE_S, member, *caps]))
        except (self._redis.RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        self._taken(result, caller, sets, member)

    def _taken(self, result: int, caller: Any, sets: tuple[str, ...], member: str) -> None:
        if result:
            raise self._refusal(result, caller, sets)
        self._took(sets, member)

    def acquire(self, caller: Any) -> None:
        caps = self._caps_of(caller.tenant)
        self._take(caller, self._sets(caller), [caps.key_inflight, caps.tenant_inflight])

    async def aacquire(self, caller: Any) -> None:
        caps, sets, member = self._caps_of(caller.tenant), self._sets(caller), self._member()
        try:
            result = int(await self._aclient().eval(
                _ACQUIRE_LUA, 2, *sets, settings.LASER_SLOT_LEASE_S, member, caps.key_inflight,
                caps.tenant_inflight))
        except (self._redis.RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        self._taken(result, caller, sets, member)

    def release(self, caller: Any) -> None:
        self._remove(self._sets(caller))

    async def arelease(self, caller: Any) -> None:
        sets = self._sets(caller)
        member = self._give_back(sets)
        if member is None:
            return
        try:
            pipe = self._aclient().pipeline()
            for name in sets:
                pipe.zrem(name, member)
            await pipe.execute()
        except (self._redis.RedisError, OSError):
            logger.warning("slots: could not release a lease (it runs out by itself)")

    def _remove(self, sets: tuple[str, ...]) -> None:
        member = self._give_back(sets)
        if member is None:
            return
        try:
            pipe = self._sync.pipeline()
            for name in sets:
                pipe.zrem(name, member)
            pipe.execute()
        except (self._redis.RedisError, OSError):
            logger.warning("slots: could not release a lease (it runs out by itself)")

    def open_socket(self, caller: Any) -> None:
        """(Sockets open and close rarely: the sync client, on the caller's thread.)"""
        self._take(caller, (self._socket_set(caller),),
                   [self._caps_of(caller.tenant).key_sockets])

    def close_socket(self, caller: Any) -> None:
        self._remove((self._socket_set(caller),))

    def held(self, caller: Any) -> tuple[int, int]:
        """(requests of the caller, requests of its tenant) in flight in every process."""
        mine, tenant = self._sets(caller)
        return int(self._count(keys=[mine])), int(self._count(keys=[tenant]))

    @property
    def _requests(self) -> dict[str, int]:
        """The request slots this process holds, by set (as ``Slots._requests`` counts
        them: what the tests' leak checks read)."""
        with self._lock:
            return {name: len(m) for name, m in self._mine.items() if m and ":req:" in name}

    # ---- renewing ------------------------------------------------------------------------
    def _start_renewer(self) -> None:
        if self._renewer is not None and self._renewer.is_alive():
            return
        with self._lock:
            if self._renewer is None or not self._renewer.is_alive():
                self._renewer = threading.Thread(target=self._renew_loop, daemon=True,
                                                 name="slot-leases")
                self._renewer.start()

    def renew(self) -> None:
        """Push every lease this process holds a full lease into the future."""
        with self._lock:
            held = {name: list(members) for name, members in self._mine.items() if members}
        lease = settings.LASER_SLOT_LEASE_S
        for name, members in held.items():
            self._renew(keys=[name], args=[lease, *members])

    def _renew_loop(self) -> None:
        stop = threading.Event()
        while not stop.wait(settings.LASER_SLOT_LEASE_S / 3):
            try:
                self.renew()
            except (self._redis.RedisError, OSError) as exc:
                logger.warning("slots: could not renew leases: %s", exc)
