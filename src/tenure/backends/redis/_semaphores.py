"""The Redis key layout and Lua scripts of semaphores, each with its contract; shared by both
flavours (the lock's are in ``_scripts``).

Keys of the semaphore named N, with D = the first 32 hex digits of SHA-256(N in UTF-8), the
same Cluster hash tag as the lock of that name (so every key of N lives in one slot), under
``{ns}:sem:``, a prefix no lock key has:

    {ns}:sem:{D}            hash  name, fence, limit                  gc_after past its last
                                                                      permit's end
    {ns}:sem:{D}:permits    zset  token -> expiry (server ms)         expire a second after
    {ns}:sem:{D}:holders    hash  token -> JSON [fence, host, pid,    its last permit ends
                                  thread, since (server ms)]
    {ns}:sem:{D}:wake       list  one item per release: BLPOPed by a  expires after 1 s
                                  waiter, so a release wakes one

Every script reads the server's clock (``TIME``) and drops the permits whose expiry has
passed, so a crashed holder's permit is free once its lease ends; no client clock is used.

Fences: a grant's fence is max(the stored fence + 1, the server's time in microseconds),
written on the first hash in the grant's script. So fences strictly increase per name while
the hash lives, and never go back when it is gone: when ``gc_after`` removed an idle
semaphore's hash, or a server restarted without its data, the next fence starts from the
server's clock, above every fence handed out before (it stays within one fence per
microsecond of the clock: a script takes longer than that). What this needs is a server clock
that does not step back across the gap (the lock's fences are made the same way).
``gc_after=None`` keeps the first hash forever.

The stored limit lives on the first hash, which outlives every live permit (its expiry is
pushed past the last permit's end on every grant, renewal and release), so a limit is never
forgotten while permits hold it. Names reach Lua only as KEYS/ARGV.
"""

from __future__ import annotations

import functools
import hashlib
from typing import NamedTuple

from tenure.backends.redis._scripts import Script

__all__ = [
    "ACQUIRE_PERMIT",
    "BREAK_SEMAPHORE",
    "EXTEND_PERMITS",
    "INSPECT_SEMAPHORE",
    "PERMIT_OWNED",
    "RELEASE_PERMIT",
    "SemaphoreKeys",
    "semaphore_keys",
    "semaphore_pattern",
]


class SemaphoreKeys(NamedTuple):
    meta: str
    permits: str
    holders: str
    wake: str


@functools.lru_cache(maxsize=4096)
def semaphore_keys(namespace: str, name: str) -> SemaphoreKeys:
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    meta = f"{namespace}:sem:{{{digest}}}"
    return SemaphoreKeys(meta, f"{meta}:permits", f"{meta}:holders", f"{meta}:wake")


def semaphore_pattern(namespace: str) -> str:
    """SCAN MATCH pattern of every semaphore's first hash (and of nothing else we write)."""
    return namespace.replace("[", "\\[").replace("]", "\\]") + ":sem:{*}"


_NOW_AND_PRUNE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function whole(number) return string.format('%d', number) end
local function prune(permits, holders)
  local expired = redis.call('ZRANGEBYSCORE', permits, '-inf', now)
  for _, token in ipairs(expired) do redis.call('HDEL', holders, token) end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', permits, '-inf', now) end
end
local function keep(meta, permits, holders, gc_ms)
  -- The permit keys live as long as their longest permit, and a second more; the first
  -- hash gc_ms more (0: forever), so it outlives every permit that its limit rules.
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  local until_ms = now
  if last[2] then
    until_ms = tonumber(last[2])
    redis.call('PEXPIREAT', permits, whole(until_ms + 1000))
    redis.call('PEXPIREAT', holders, whole(until_ms + 1000))
  end
  if gc_ms > 0 then
    redis.call('PEXPIREAT', meta, whole(until_ms + gc_ms))
  else
    redis.call('PERSIST', meta)
  end
end
"""

# KEYS: meta, permits, holders. ARGV: name, token, ttl ms, limit, host, pid, thread, gc_after
# ms (0: keep the first hash forever).
# Atomic: the prune, the retry check, the limit check, the count and the grant.
# Returns {1, fence}: granted (or our live permit restarted, a retry: its fence kept);
# {0, ms left of the soonest permit}: busy; {2, stored limit}: live permits were taken with
# another limit; {3, stored name}: the digest belongs to another name. Busy, 2 and 3 add
# nothing and change no limit (expired permits are still dropped).
ACQUIRE_PERMIT = Script("acquire_permit", _NOW_AND_PRUNE + """
local stored_name = redis.call('HGET', KEYS[1], 'name')
if stored_name and stored_name ~= ARGV[1] then return {3, stored_name} end
prune(KEYS[2], KEYS[3])
local ttl = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local gc_ms = tonumber(ARGV[8])
if redis.call('ZSCORE', KEYS[2], ARGV[2]) then
  redis.call('ZADD', KEYS[2], whole(now + ttl), ARGV[2])
  keep(KEYS[1], KEYS[2], KEYS[3], gc_ms)
  return {1, tonumber(cjson.decode(redis.call('HGET', KEYS[3], ARGV[2]))[1])}
end
local live = redis.call('ZCARD', KEYS[2])
local stored = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if live > 0 and stored and stored ~= limit then return {2, stored} end
if live >= limit then
  local soonest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, tonumber(soonest[2]) - now}
end
local fence = math.max((tonumber(redis.call('HGET', KEYS[1], 'fence')) or 0) + 1, now_us)
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'limit', limit, 'fence', whole(fence))
redis.call('ZADD', KEYS[2], whole(now + ttl), ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2],
           cjson.encode({whole(fence), ARGV[5], tonumber(ARGV[6]), ARGV[7], whole(now)}))
keep(KEYS[1], KEYS[2], KEYS[3], gc_ms)
return {1, fence}
""")

# KEYS: meta, permits, holders, wake. ARGV: token, gc_after ms.
# Returns 1 if our permit was live and is gone now, 0 if it had expired or was taken. A
# permit found (live or not) pushes one item on the wake list: one waiter wakes. The list is
# capped (64 items) and expires a second after the last push, so releases nobody waited for
# cost a later waiter a few spurious wake-ups at most.
RELEASE_PERMIT = Script("release_permit", _NOW_AND_PRUNE + """
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
keep(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]))
redis.call('RPUSH', KEYS[4], '1')
redis.call('LTRIM', KEYS[4], -64, -1)
redis.call('PEXPIRE', KEYS[4], 1000)
if tonumber(score) > now then return 1 end
return 0
""")

# KEYS: meta 1, permits 1, holders 1, meta 2, ... (all in one slot). ARGV: gc_after ms, then
# token 1, ttl ms 1, token 2, ttl ms 2, ... Returns one 1/0 per permit: restarted (server now
# + its ttl) / no longer live (nothing written for it).
EXTEND_PERMITS = Script("extend_permits", _NOW_AND_PRUNE + """
local gc_ms = tonumber(ARGV[1])
local results = {}
for i = 1, #KEYS / 3 do
  local meta, permits, holders = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local token, ttl = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  local score = redis.call('ZSCORE', permits, token)
  if score and tonumber(score) > now then
    redis.call('ZADD', permits, whole(now + ttl), token)
    keep(meta, permits, holders, gc_ms)
    results[i] = 1
  else
    results[i] = 0
  end
end
return results
""")

# KEYS: permits. ARGV: token. Returns 1 if the token holds a live permit. Writes nothing.
PERMIT_OWNED = Script("permit_owned", _NOW_AND_PRUNE + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now then return 1 end
return 0
""")

# KEYS: meta, permits, holders. Returns false if never acquired (or collected), else
# {name, fence, limit, now ms, {holder JSON, expiry, holder JSON, expiry, ...}} for the live
# permits, soonest-ending first. Writes nothing.
INSPECT_SEMAPHORE = Script("inspect_semaphore", _NOW_AND_PRUNE + """
local meta = redis.call('HMGET', KEYS[1], 'name', 'fence', 'limit')
if not meta[1] then return false end
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
local permits = {}
for i = 1, #live, 2 do
  permits[#permits + 1] = redis.call('HGET', KEYS[3], live[i]) or '[0,"?",0,"?",0]'
  permits[#permits + 1] = live[i + 1]
end
return {meta[1], meta[2], meta[3], whole(now), permits}
""")

# KEYS: meta, permits, holders, wake. ARGV: gc_after ms. Frees every permit (the fence and the
# limit stay); returns how many were live, and wakes as many waiters (up to 64).
BREAK_SEMAPHORE = Script("break_semaphore", _NOW_AND_PRUNE + """
prune(KEYS[2], KEYS[3])
local live = redis.call('ZCARD', KEYS[2])
redis.call('DEL', KEYS[2], KEYS[3])
keep(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]))
for _ = 1, math.min(live, 64) do redis.call('RPUSH', KEYS[4], '1') end
if live > 0 then redis.call('PEXPIRE', KEYS[4], 1000) end
return live
""")

ALL_SEMAPHORE_SCRIPTS = (
    ACQUIRE_PERMIT, RELEASE_PERMIT, EXTEND_PERMITS, PERMIT_OWNED, INSPECT_SEMAPHORE,
    BREAK_SEMAPHORE,
)

