"""The Redis key layout and every Lua script, each with its contract; shared by both flavours.

Keys of the lock named N, with D = the first 32 hex digits of SHA-256(N in UTF-8):

    {ns}:{D}              hash   name, fence                        never expires
    {ns}:{D}:lease        hash   token, host, pid, thread, since     PEXPIRE = the lease
    {ns}:{D}:next         string the waiter the lock is reserved for PX = the handoff window
    {ns}:{D}:queue        zset   waiting token -> arrival (server us) expires after its waits
    {ns}:{D}:lapse        hash   waiting token -> server ms when its current wait ends
    {ns}:{D}:wake:TOKEN   list   a waiter's wake-up, BLPOPed by it    expires on its own

``{ns}`` is the namespace option (default ``tenure``). ``{D}`` is the Redis Cluster hash tag:
the first ``{...}`` of every key of one lock is the same hex digest, so all of them live in
one slot whatever the name contains (``{``, ``}``, spaces, newlines, 1 KB of text). The raw
name is kept in the first hash, for listing, and the acquire script refuses a name whose
digest matches a different stored name (a SHA-256 collision: in practice never, but if it
happens it is an error, not two names sharing one lock). Names reach Lua only as KEYS/ARGV.

The fence is the ``fence`` field of the first hash, ``HINCRBY``'d in the acquire script: it
never expires and is kept across releases, so it only grows (across server restarts too when
the server persists its data: AOF with ``appendfsync always``, see docs/backends/redis.md).

Waiting (rule 6): a waiter about to block ANNOUNCEs itself (it joins the queue in arrival order
as a live waiter), BLPOPs its own wake list, and has its next ACQUIRE pipelined behind the
BLPOP, which also ends its "live" state. A release (or a break) pops the longest-waiting live
waiter, pushes to its wake list, and reserves the free lock for it for the handoff window: the
server unblocks that BLPOP and runs the queued ACQUIRE in the same turn, and the releasing
process, coming straight back, finds the lock reserved instead of barging ahead of a process
that has waited longer. A waiter that gave up is not live, so nothing is reserved for it; one
cancelled mid-wait LEAVEs, passing on a reservation (or a lease its pipelined ACQUIRE took);
one that died holds a reservation for the window at most, and its queue entry lapses.

Times: ``since`` and queue arrivals are server microseconds (``TIME``); ttl arguments are
milliseconds. Scripts use no client clock.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
from typing import Any, NamedTuple

from tenure._types import Holder, LockInfo

__all__ = [
    "ACQUIRE",
    "ANNOUNCE",
    "BREAK",
    "EXTEND",
    "INSPECT",
    "LEAVE",
    "RELEASE",
    "LockKeys",
    "Script",
    "decode_info",
    "lock_keys",
    "meta_pattern",
    "milliseconds",
]


@dataclasses.dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


class LockKeys(NamedTuple):
    meta: str
    lease: str
    next: str
    queue: str
    lapse: str
    wake_prefix: str

    def wake(self, token: str) -> str:
        return self.wake_prefix + token


@functools.lru_cache(maxsize=4096)
def lock_keys(namespace: str, name: str) -> LockKeys:
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    meta = f"{namespace}:{{{digest}}}"
    return LockKeys(
        meta, f"{meta}:lease", f"{meta}:next", f"{meta}:queue", f"{meta}:lapse", f"{meta}:wake:"
    )


def meta_pattern(namespace: str) -> str:
    """SCAN MATCH pattern of every lock's first hash (and of nothing else we write)."""
    return namespace.replace("[", "\\[").replace("]", "\\]") + ":{*}"


def milliseconds(seconds: float) -> int:
    return max(1, round(seconds * 1000))


# ---- the scripts ----------------------------------------------------------------------------

# Shared by RELEASE, BREAK and LEAVE: wake the longest-waiting waiter whose wait has not ended
# and, if window_ms > 0, reserve the (free) lock for it. Waiters found lapsed are dropped.
_HAND_OFF = """
local function hand_off(next_key, queue, lapse, wake_prefix, window_ms)
  local waiting = redis.call('ZRANGE', queue, 0, 31)
  if #waiting == 0 then return end
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  for _, waiter in ipairs(waiting) do
    local ends = tonumber(redis.call('HGET', lapse, waiter))
    redis.call('ZREM', queue, waiter)
    redis.call('HDEL', lapse, waiter)
    if ends and ends > now_ms then
      local wake = wake_prefix .. waiter
      redis.call('RPUSH', wake, '1')
      redis.call('PEXPIRE', wake, 5000)
      if window_ms > 0 then
        redis.call('SET', next_key, waiter, 'PX', window_ms)
      end
      return
    end
  end
end
"""

ACQUIRE = Script(
    "acquire",
    """
-- KEYS[1] meta hash   KEYS[2] lease   KEYS[3] next   KEYS[4] queue   KEYS[5] lapse
-- KEYS[6] this token's wake list
-- ARGV[1] token   ARGV[2] ttl ms   ARGV[3] name   ARGV[4] host   ARGV[5] pid   ARGV[6] thread
-- ARGV[8] '1' to store ARGV[9] as the lease's value (an election leader's), else '0'
-- ARGV[7] '1' if this token has waited in the queue, else '0'. A queued waiter's attempt
--   ends its current wait: granted, it leaves the queue; busy, it is no longer woken (it
--   keeps its place, and is woken again once it announces its next wait).
-- Returns {1, fence, server us}: granted (free, expired, or already ours: then the expiry is
--   reset and the fence kept); {0, ms}: held by another token (or reserved for a waiter) for
--   about ms more (-1: unknown); {-1, stored name}: the name's digest belongs to another name.
local token = ARGV[1]
local now = redis.call('TIME')
local now_us = now[1] .. string.format('%06d', tonumber(now[2]))
local holder = redis.call('HGET', KEYS[2], 'token')
if holder == token then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), now_us}
end
if holder then
  if ARGV[7] == '1' then redis.call('HDEL', KEYS[5], token) end
  return {0, redis.call('PTTL', KEYS[2])}
end
local reserved = redis.call('GET', KEYS[3])
if reserved and reserved ~= token then
  if ARGV[7] == '1' then redis.call('HDEL', KEYS[5], token) end
  return {0, redis.call('PTTL', KEYS[3])}
end
local stored = redis.call('HGET', KEYS[1], 'name')
if stored and stored ~= ARGV[3] then
  return {-1, stored}
end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
if not stored then
  redis.call('HSET', KEYS[1], 'name', ARGV[3])
end
redis.call('HSET', KEYS[2], 'token', token, 'host', ARGV[4], 'pid', ARGV[5],
           'thread', ARGV[6], 'since', now_us)
if ARGV[8] == '1' then
  redis.call('HSET', KEYS[2], 'value', ARGV[9])
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if reserved then
  redis.call('DEL', KEYS[3])
end
if ARGV[7] == '1' then
  redis.call('ZREM', KEYS[4], token)
  redis.call('HDEL', KEYS[5], token)
  redis.call('DEL', KEYS[6])
end
return {1, fence, now_us}
""",
)

RELEASE = Script(
    "release",
    """
-- KEYS[1] lease   KEYS[2] next   KEYS[3] queue   KEYS[4] lapse
-- ARGV[1] token   ARGV[2] wake-list key prefix   ARGV[3] handoff window ms
-- Returns 1 if this token's live lease was deleted (and the longest waiter woken), else 0
-- (expired, or another token's: nothing is changed).
"""
    + _HAND_OFF
    + """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
hand_off(KEYS[2], KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]))
return 1
""",
)

EXTEND = Script(
    "extend",
    """
-- KEYS[i] the lease of lock i (any number of locks, all in one slot on a Cluster)
-- ARGV[2i-1] lock i's token   ARGV[2i] its new ttl ms
-- Returns one 1/0 per lock: 1 if the token held a live lease, now reset to ttl from now.
local results = {}
for i, lease in ipairs(KEYS) do
  if redis.call('HGET', lease, 'token') == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', lease, ARGV[2 * i])
    results[i] = 1
  else
    results[i] = 0
  end
end
return results
""",
)

INSPECT = Script(
    "inspect",
    """
-- KEYS[1] meta hash   KEYS[2] lease
-- Returns nil if the lock was never acquired, else
--   {name, fence, host, pid, thread, since us, lease ms left, value}  (holder fields and
--   value nil when free; value nil when the lease has none). The value lives in the lease
--   hash, so it goes with the lease (release, expiry, break) in the same step.
local meta = redis.call('HMGET', KEYS[1], 'name', 'fence')
if not meta[1] then
  return nil
end
local lease = redis.call('HMGET', KEYS[2], 'token', 'host', 'pid', 'thread', 'since', 'value')
if not lease[1] then
  return {meta[1], meta[2], false, false, false, false, -2, false}
end
return {meta[1], meta[2], lease[2], lease[3], lease[4], lease[5], redis.call('PTTL', KEYS[2]),
        lease[6]}
""",
)

BREAK = Script(
    "break",
    """
-- KEYS[1] lease   KEYS[2] next   KEYS[3] queue   KEYS[4] lapse
-- ARGV[1] wake-list key prefix   ARGV[2] handoff window ms
-- Returns 1 if a live lease (anybody's) was deleted and the longest waiter woken, else 0.
-- The fence is untouched.
"""
    + _HAND_OFF
    + """
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
hand_off(KEYS[2], KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[2]))
return 1
""",
)

ANNOUNCE = Script(
    "announce",
    """
-- KEYS[1] lease   KEYS[2] next   KEYS[3] queue   KEYS[4] lapse   KEYS[5] this token's wake list
-- ARGV[1] token   ARGV[2] how long it will wait, ms   ARGV[3] its first arrival (server us),
--   or '' on its first wait
-- Queues the token (at its first arrival, so waiting again keeps its place) as a live waiter
-- until its wait ends: its next ACQUIRE says when (the BLPOP's timeout can run late by up to
-- 1/hz s on a quiet server), else 1 s after the wait's nominal end (a client that died).
-- If the lock was freed since the waiter's failed acquire, pushes its own wake-up, so the
-- BLPOP that follows returns at once. Returns {arrival used, server us now}.
local now = redis.call('TIME')
local now_us = now[1] .. string.format('%06d', tonumber(now[2]))
local arrival = ARGV[3]
if arrival == '' then
  arrival = now_us
end
local wait_ms = tonumber(ARGV[2])
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[3], arrival, ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], now_ms + wait_ms + 1000)
local keep = wait_ms + 2000
if redis.call('PTTL', KEYS[3]) < keep then redis.call('PEXPIRE', KEYS[3], keep) end
if redis.call('PTTL', KEYS[4]) < keep then redis.call('PEXPIRE', KEYS[4], keep) end
if redis.call('EXISTS', KEYS[1]) == 0 then
  local reserved = redis.call('GET', KEYS[2])
  if not reserved or reserved == ARGV[1] then
    if redis.call('LLEN', KEYS[5]) == 0 then
      redis.call('RPUSH', KEYS[5], '1')
    end
    redis.call('PEXPIRE', KEYS[5], keep)
  end
end
return {arrival, now_us}
""",
)

LEAVE = Script(
    "leave",
    """
-- KEYS[1] lease   KEYS[2] next   KEYS[3] queue   KEYS[4] lapse   KEYS[5] this token's wake list
-- ARGV[1] token   ARGV[2] wake-list key prefix   ARGV[3] handoff window ms
-- A waiter gives up (cancelled, or its connection failed): leaves the queue, and passes on to
-- the next waiter a reservation, or a lease, that its pipelined acquire may have been given.
-- Returns 1.
"""
    + _HAND_OFF
    + """
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[5])
local passed = false
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  passed = true
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  passed = redis.call('EXISTS', KEYS[1]) == 0
end
if passed then
  hand_off(KEYS[2], KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]))
end
return 1
""",
)

SET_VALUE = Script(
    "set_value",
    """
-- KEYS[1] lease
-- ARGV[1] token   ARGV[2] the new value
-- Returns 1 if this token holds the live lease and its value was replaced, else 0.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'value', ARGV[2])
return 1
""",
)

ALL_SCRIPTS = (ACQUIRE, RELEASE, EXTEND, INSPECT, BREAK, ANNOUNCE, LEAVE, SET_VALUE)


# ---- replies --------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def decode_info(reply: Any) -> LockInfo | None:
    """INSPECT's reply as a LockInfo."""
    if reply is None:
        return None
    name, fence, host, pid, thread, since, ttl_ms, value = reply
    ttl_ms = int(ttl_ms)
    if host is None or ttl_ms == -2:
        return LockInfo(_text(name), int(fence), None, None, None)
    return LockInfo(
        _text(name),
        int(fence),
        Holder(_text(host), int(pid), _text(thread)),
        datetime.datetime.fromtimestamp(int(since) / 1_000_000, datetime.UTC),
        None if ttl_ms < 0 else ttl_ms / 1000,
        value=None if value is None else _text(value),
    )
