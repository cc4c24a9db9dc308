"""The Redis key layout and Lua scripts of semaphores, each with its contract; shared by both
flavours (the lock's are in ``_scripts``).

Keys of the semaphore named N, with D = the first 32 hex digits of SHA-256(N in UTF-8), the
same Cluster hash tag as the lock of that name (so every key of N lives in one slot):

    {ns}:sem:{D}            hash  name, fence, limit                  never expires
    {ns}:sem:{D}:permits    zset  token -> expiry (server ms)         expires after its last
    {ns}:sem:{D}:holders    hash  token -> [fence, host, pid,         permit, with the zset
                                  thread, since (server ms)] (JSON)
    {ns}:sem:{D}:wake       list  one item per release: BLPOPed by a  expires after 1 s
                                  waiter, so a release wakes one

Every script reads the server's clock (``TIME``) and first drops the permits whose expiry has
passed, so a crashed holder's permit is free once its lease ends. The fence is ``HINCRBY``'d
on the first hash in the grant's script: it never expires and is kept across releases.
Names reach Lua only as KEYS/ARGV.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
from typing import Any, NamedTuple

from tenure._types import Holder, LeaseInfo, LockInfo
from tenure.backends.redis._scripts import Script

__all__ = [
    "ACQUIRE_PERMIT",
    "BREAK_SEMAPHORE",
    "EXTEND_PERMITS",
    "INSPECT_SEMAPHORE",
    "PERMIT_OWNED",
    "RELEASE_PERMIT",
    "SemaphoreKeys",
    "decode_semaphore",
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
local function prune(permits, holders)
  local expired = redis.call('ZRANGEBYSCORE', permits, '-inf', now)
  for _, token in ipairs(expired) do redis.call('HDEL', holders, token) end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', permits, '-inf', now) end
end
local function keep(permits, holders)
  -- The permit keys live as long as their longest permit, and a second more.
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  if last[2] then
    local until_ms = tonumber(last[2]) + 1000
    redis.call('PEXPIREAT', permits, until_ms)
    redis.call('PEXPIREAT', holders, until_ms)
  end
end
"""

# KEYS: meta, permits, holders. ARGV: name, token, ttl ms, limit, host, pid, thread.
# Returns {1, fence}: granted (or our live permit restarted, a retry: its fence);
# {0, ms left of the soonest permit}: busy; {2, stored limit}: live permits were taken with
# another limit (nothing written); {3, stored name}: the digest belongs to another name.
ACQUIRE_PERMIT = Script("acquire_permit", _NOW_AND_PRUNE + """
local stored_name = redis.call('HGET', KEYS[1], 'name')
if stored_name and stored_name ~= ARGV[1] then return {3, stored_name} end
prune(KEYS[2], KEYS[3])
local ttl = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
if redis.call('ZSCORE', KEYS[2], ARGV[2]) then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
  keep(KEYS[2], KEYS[3])
  return {1, cjson.decode(redis.call('HGET', KEYS[3], ARGV[2]))[1]}
end
local live = redis.call('ZCARD', KEYS[2])
local stored = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if live > 0 and stored and stored ~= limit then return {2, stored} end
if live >= limit then
  local soonest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, tonumber(soonest[2]) - now}
end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'limit', limit)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2],
           cjson.encode({fence, ARGV[5], tonumber(ARGV[6]), ARGV[7], now}))
keep(KEYS[2], KEYS[3])
return {1, fence}
""")

# KEYS: permits, holders, wake. ARGV: token.
# Returns 1 if our permit was live and is gone now, 0 if it had expired or was taken. Either
# way a waiter is woken (one item pushed on the wake list).
RELEASE_PERMIT = Script("release_permit", _NOW_AND_PRUNE + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('RPUSH', KEYS[3], '1')
redis.call('LTRIM', KEYS[3], -64, -1)
redis.call('PEXPIRE', KEYS[3], 1000)
if tonumber(score) > now then return 1 end
return 0
""")

# KEYS: permits 1, holders 1, permits 2, holders 2, ... (one slot). ARGV: token 1, ttl ms 1,
# token 2, ttl ms 2, ... Returns one 1/0 per permit: restarted / no longer live.
EXTEND_PERMITS = Script("extend_permits", _NOW_AND_PRUNE + """
local results = {}
for i = 1, #ARGV, 2 do
  local permits, holders = KEYS[i], KEYS[i + 1]
  local score = redis.call('ZSCORE', permits, ARGV[i])
  if score and tonumber(score) > now then
    redis.call('ZADD', permits, now + tonumber(ARGV[i + 1]), ARGV[i])
    keep(permits, holders)
    results[#results + 1] = 1
  else
    results[#results + 1] = 0
  end
end
return results
""")

# KEYS: permits. ARGV: token. Returns 1 if the token holds a live permit.
PERMIT_OWNED = Script("permit_owned", _NOW_AND_PRUNE + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now then return 1 end
return 0
""")

# KEYS: meta, permits, holders. Returns false if never acquired, else {name, fence, limit,
# now, {holder JSON, expiry, holder JSON, expiry, ...}} for the live permits, oldest first.
INSPECT_SEMAPHORE = Script("inspect_semaphore", _NOW_AND_PRUNE + """
local meta = redis.call('HMGET', KEYS[1], 'name', 'fence', 'limit')
if not meta[1] then return false end
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
local permits = {}
for i = 1, #live, 2 do
  permits[#permits + 1] = redis.call('HGET', KEYS[3], live[i]) or '[0,"?",0,"?",0]'
  permits[#permits + 1] = live[i + 1]
end
return {meta[1], meta[2], meta[3], now, permits}
""")

# KEYS: permits, holders, wake. Frees every permit; returns how many were live, and wakes as
# many waiters.
BREAK_SEMAPHORE = Script("break_semaphore", _NOW_AND_PRUNE + """
prune(KEYS[1], KEYS[2])
local live = redis.call('ZCARD', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
for _ = 1, math.min(live, 64) do redis.call('RPUSH', KEYS[3], '1') end
if live > 0 then redis.call('PEXPIRE', KEYS[3], 1000) end
return live
""")

ALL_SEMAPHORE_SCRIPTS = (
    ACQUIRE_PERMIT, RELEASE_PERMIT, EXTEND_PERMITS, PERMIT_OWNED, INSPECT_SEMAPHORE,
    BREAK_SEMAPHORE,
)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def decode_semaphore(reply: Any) -> LockInfo | None:
    if not reply:
        return None
    name, fence, limit, now, permits = reply
    leases = []
    for index in range(0, len(permits), 2):
        permit_fence, host, pid, thread, since = json.loads(_text(permits[index]))
        expiry = float(_text(permits[index + 1]))
        leases.append(LeaseInfo(
            Holder(str(host), int(pid), str(thread)),
            datetime.datetime.fromtimestamp(int(since) / 1000, datetime.UTC),
            (expiry - int(now)) / 1000,
            int(permit_fence),
        ))
    leases.sort(key=lambda lease: lease.fence or 0)
    return LockInfo(
        _text(name), int(fence or 0), None, None, None, kind="semaphore",
        limit=int(limit) if limit is not None else None, leases=tuple(leases),
    )
