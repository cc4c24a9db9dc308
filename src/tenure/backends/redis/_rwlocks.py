"""The Redis key layout and Lua scripts of read-write locks and fair locks (queued leases with
modes, ``AsyncQueueSupport``), each with its contract; shared by both flavours.

Keys of the read-write lock named N, with D = the first 32 hex digits of SHA-256(N in UTF-8),
the same Cluster hash tag as the lock and the semaphore of that name (so every key of N
lives in one slot), under ``{ns}:rw:``, a prefix no lock or semaphore key has:

    {ns}:rw:{D}              hash  name, fence, arrivals               gc_after past the end
                                                                       of its last lease or
                                                                       place
    {ns}:rw:{D}:leases       hash  token -> JSON [mode, fence, host,   a second after its
                                   pid, thread, since (server ms),     last lease ends
                                   fair (1: a fair lock's)]
    {ns}:rw:{D}:expiries     zset  token -> lease expiry (server ms)
    {ns}:rw:{D}:queue        zset  token -> arrival position            a second after its
    {ns}:rw:{D}:writes       zset  token -> arrival position, for the   last place ends
                                   places of writers only
    {ns}:rw:{D}:places       zset  token -> place expiry (server ms)
    {ns}:rw:{D}:fair         zset  token -> place expiry, for the
                                   places of fair locks' waiters only
    {ns}:rw:{D}:waiters      hash  token -> JSON [mode, host, pid,
                                   thread, since (server ms)]: who
                                   waits in that place, since when
    {ns}:rw:{D}:wake:TOKEN   list  at most one item: "your turn may     5 s after its last
                                   have come", BLPOPed by that waiter   push

A lease is a member of ``expiries`` (its server-clock end) with its record in ``leases``; a
waiting place a member of ``queue`` (its arrival position, from the ``arrivals`` counter)
and ``places`` (its end), of ``writes`` too when it waits to write, and of ``fair`` too
when a fair lock waits there; its record in ``waiters`` says who waits there (``tenure show``
lists them; a place of an older tenure has none, and lists an unknown waiter). Which
primitive made a lease or a place (a fair lock, or a read-write lock's handle: the same lease
of the same queue) is kept only for ``inspect``: no grant reads it; a lease record without
the flag, or a name without the ``fair`` set (written by a tenure from before them), reads
as a read-write lock's. Every script reads the server's clock (``TIME``) and first drops the
lapsed leases and places, so a crashed holder's lease frees the name when it ends and a dead
waiter's place stops blocking the queue when its place ends; no client clock is used. Each
read is a sorted-set lookup: "a live holder" is ZCARD of ``expiries``; "a place ahead" is
ZCOUNT of ``queue`` (or ``writes``, for a reader) below this token's own arrival; a writer
holds the name only alone (a write is granted only when nobody holds it; a read only when no
writer does), so "a writer holds" is one lease whose mode is write.

Waking: a waiter BLPOPs a list of its own (``wake:TOKEN``). Whenever a lease or a place goes
(release, break, a place left, lapsed ones dropped by any script), the script walks the
queue from its head and pushes to exactly the waiters whose turn it now is: the readers up
to the first waiting writer (when no writer holds), or that writer alone (when it is first
and nobody holds). So a write release lets every reader queued behind it in at once, and a
fair lock's release wakes only the next in line, not every waiter. A push to a waiter that
is not blocked at that moment stays in its list for its next BLPOP (it is never lost); the
list keeps one item, so a waiter woken often wakes spuriously once at most. Waiters whose
turn came by an expiry nobody saw (a crashed holder) find it at their next attempt: the
wait is bounded by the holder's remaining lease and a third of the place's lease.

Fences, as on semaphores: a grant's fence is max(the stored fence + 1, the server's time in
microseconds), one counter for reads and writes, so fences strictly increase per name while
the first hash lives and never go back when ``gc_after`` removed an idle name's hash (or a
server restarted without its data): the next fence starts from the server's clock. The
first hash also refuses a name whose digest belongs to another name. Names reach Lua only
as KEYS/ARGV.
"""

from __future__ import annotations

import functools
import hashlib
from typing import NamedTuple

from tenure.backends.redis._scripts import Script

__all__ = [
    "ACQUIRE_QUEUED",
    "ALL_QUEUE_SCRIPTS",
    "BREAK_QUEUE",
    "EXTEND_QUEUED",
    "INSPECT_QUEUE",
    "QUEUED_OWNED",
    "RELEASE_QUEUED",
    "QueueKeys",
    "is_queue_meta",
    "keys_of_meta",
    "queue_keys",
    "queue_pattern",
]

WAKE_KEEP_MS = 5000
"""How long a waiter's wake-up stays in its list unclaimed: past its next BLPOP (a waiter
tries again at least every third of its place's lease, 1 s by default), short enough that a
waiter gone without a trace leaves nothing for long."""
WAKE_AT_MOST = 256
"""Waiters one event wakes at most (readers queued together). Those further back find their
turn at their next attempt, within a third of their place's lease."""


class QueueKeys(NamedTuple):
    meta: str
    leases: str
    expiries: str
    queue: str
    writes: str
    places: str
    wake_prefix: str
    """``wake_prefix + token`` is that waiter's wake list."""
    fair: str
    waiters: str

    @property
    def all(self) -> tuple[str, ...]:
        """The keys every script takes, in its KEYS order."""
        return tuple(self)

    def wake(self, token: str) -> str:
        return self.wake_prefix + token


@functools.lru_cache(maxsize=4096)
def queue_keys(namespace: str, name: str) -> QueueKeys:
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    return keys_of_meta(f"{namespace}:rw:{{{digest}}}")


def keys_of_meta(meta: str) -> QueueKeys:
    """The keys of the name whose first hash is ``meta`` (a SCAN finds hashes, not names)."""
    return QueueKeys(
        meta, f"{meta}:leases", f"{meta}:expiries", f"{meta}:queue", f"{meta}:writes",
        f"{meta}:places", f"{meta}:wake:", f"{meta}:fair", f"{meta}:waiters",
    )


def queue_pattern(namespace: str) -> str:
    """SCAN MATCH pattern of every read-write lock's first hash; it matches the ``leases``
    hash too, which ``is_queue_meta`` tells apart."""
    return namespace.replace("[", "\\[").replace("]", "\\]") + ":rw:{*}"


def is_queue_meta(key: str) -> bool:
    return key.endswith("}")


# Every script's prelude, over K: KEYS, or a batch's keys of one name. K[1..9]: meta, leases,
# expiries, queue, writes, places, the wake lists' prefix, fair, waiters (all of one name: one
# slot). The wake lists are named from that prefix inside the script: same hash tag, same
# slot, so a Cluster node serves them.
_PRELUDE = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function whole(number) return string.format('%d', number) end
local meta, leases, expiries, queue, writes, places, wake_prefix, fair, waiters =
  K[1], K[2], K[3], K[4], K[5], K[6], K[7], K[8], K[9]

local function remove_place(token)
  redis.call('ZREM', queue, token)
  redis.call('ZREM', writes, token)
  redis.call('ZREM', places, token)
  redis.call('ZREM', fair, token)
  redis.call('HDEL', waiters, token)
end

-- Drop lapsed leases and places; true if any was dropped (a waiter's turn may have come).
local function sweep()
  local dropped = false
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', expiries, '-inf', now)) do
    redis.call('HDEL', leases, token)
    redis.call('ZREM', expiries, token)
    dropped = true
  end
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', places, '-inf', now)) do
    remove_place(token)
    dropped = true
  end
  return dropped
end

local function write_held()
  if redis.call('ZCARD', expiries) ~= 1 then return false end
  local only = redis.call('ZRANGE', expiries, 0, 0)[1]
  return cjson.decode(redis.call('HGET', leases, only))[1] == 'write'
end

-- Push to the waiters whose turn it is now: readers from the head up to the first writer
-- when no writer holds; that writer too if it is first and nobody holds.
local function wake_turn()
  local held = redis.call('ZCARD', expiries)
  if held > 0 and write_held() then return end
  -- In batches of 16 from the head: a fair lock's release reads one batch, not the queue.
  local index = 0
  while index < {WAKE_AT_MOST} do
    local batch = redis.call('ZRANGE', queue, index, index + 15)
    if #batch == 0 then return end
    for _, token in ipairs(batch) do
      index = index + 1
      local writer = redis.call('ZSCORE', writes, token)
      if writer and (index > 1 or held > 0) then return end
      local list = wake_prefix .. token
      redis.call('RPUSH', list, '1')
      redis.call('LTRIM', list, -1, -1)
      redis.call('PEXPIRE', list, {WAKE_KEEP_MS})
      if writer then return end
    end
  end
end

-- Each key lives as long as what it holds, and a second more; the first hash gc_ms past the
-- end of the last lease or place (0: forever).
local function keep(gc_ms)
  local until_ms = now
  local last = redis.call('ZRANGE', expiries, -1, -1, 'WITHSCORES')
  if last[2] then
    until_ms = math.max(until_ms, tonumber(last[2]))
    redis.call('PEXPIREAT', expiries, whole(tonumber(last[2]) + 1000))
    redis.call('PEXPIREAT', leases, whole(tonumber(last[2]) + 1000))
  end
  last = redis.call('ZRANGE', places, -1, -1, 'WITHSCORES')
  if last[2] then
    until_ms = math.max(until_ms, tonumber(last[2]))
    for _, key in ipairs({{queue, writes, places, fair, waiters}}) do
      redis.call('PEXPIREAT', key, whole(tonumber(last[2]) + 1000))
    end
  end
  if gc_ms <= 0 then
    redis.call('PERSIST', meta)
    return
  end
  redis.call('PEXPIREAT', meta, whole(until_ms + gc_ms))
end

local function soonest_end()
  local first = redis.call('ZRANGE', expiries, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) - now end
  return -1
end
"""
_ONE_NAME = "local K = KEYS\n" + _PRELUDE

# KEYS: the nine of the prelude. ARGV: name, token, ttl ms, mode ('read'/'write'), queue_ttl
# ms, host, pid, thread, gc_after ms (0: keep the first hash forever), fair ('1': a fair
# lock's lease or place, '0': a read-write lock's).
# Atomic: the drop of lapsed leases and places, the retry check, the turn, and the grant or
# the place. Returns {1, fence}: granted (or our live lease restarted, a retry: its fence
# kept); {0, ms}: not its turn, its place added at the tail or refreshed (keeping its
# position), ms the soonest-ending live lease's time left (-1: no lease, only places ahead);
# {3, stored name}: the digest belongs to another name (nothing written).
ACQUIRE_QUEUED = Script("acquire_queued", _ONE_NAME + """
local name, token, ttl, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local stored = redis.call('HGET', meta, 'name')
if stored and stored ~= name then return {3, stored} end
local dropped = sweep()
local gc_ms = tonumber(ARGV[9])
if redis.call('ZSCORE', expiries, token) then
  redis.call('ZADD', expiries, whole(now + ttl), token)
  keep(gc_ms)
  return {1, tonumber(cjson.decode(redis.call('HGET', leases, token))[2])}
end
local mine = redis.call('ZSCORE', queue, token)
local function ahead(key)
  if mine then return redis.call('ZCOUNT', key, '-inf', '(' .. mine) end
  return redis.call('ZCARD', key)
end
local turn
if mode == 'write' then
  turn = redis.call('ZCARD', expiries) == 0 and ahead(queue) == 0
else
  turn = not write_held() and ahead(writes) == 0
end
if turn then
  if mine then remove_place(token) end
  local fence = math.max((tonumber(redis.call('HGET', meta, 'fence')) or 0) + 1, now_us)
  redis.call('HSET', meta, 'name', name, 'fence', whole(fence))
  redis.call('ZADD', expiries, whole(now + ttl), token)
  redis.call('HSET', leases, token, cjson.encode(
    {mode, whole(fence), ARGV[6], tonumber(ARGV[7]), ARGV[8], whole(now), tonumber(ARGV[10])}))
  if dropped then wake_turn() end
  keep(gc_ms)
  return {1, fence}
end
local place_end = whole(now + tonumber(ARGV[5]))
if ARGV[10] == '1' then redis.call('ZADD', fair, place_end, token) end
if mine then
  redis.call('ZADD', places, place_end, token)
else
  local arrival = redis.call('HINCRBY', meta, 'arrivals', 1)
  if not stored then redis.call('HSET', meta, 'name', name) end
  redis.call('ZADD', queue, arrival, token)
  if mode == 'write' then redis.call('ZADD', writes, arrival, token) end
  redis.call('ZADD', places, place_end, token)
  redis.call('HSET', waiters, token,
             cjson.encode({mode, ARGV[6], tonumber(ARGV[7]), ARGV[8], whole(now)}))
end
if dropped then wake_turn() end
keep(gc_ms)
return {0, soonest_end()}
""")

# KEYS: the nine of the prelude. ARGV: token, gc_after ms.
# Removes the token's lease (returns 1 if it was live) or its waiting place (returns 0; also
# 0 when it had neither), and wakes the waiters whose turn that made (see the module
# docstring). The fence is kept.
RELEASE_QUEUED = Script("release_queued", _ONE_NAME + """
local token = ARGV[1]
local changed = sweep()
local live = 0
if redis.call('ZREM', expiries, token) == 1 then
  redis.call('HDEL', leases, token)
  live = 1
  changed = true
end
if redis.call('ZSCORE', queue, token) then
  remove_place(token)
  changed = true
end
if changed then
  wake_turn()
  keep(tonumber(ARGV[2]))
end
return live
""")

# KEYS: meta 1, leases 1, expiries 1, queue 1, writes 1, places 1, wake prefix 1, fair 1,
# waiters 1, meta 2, ... (nine per lease, all in one slot). ARGV: gc_after ms, then token 1,
# ttl ms 1, token 2, ...
# Returns one 1/0 per lease: restarted (server now + its ttl) / no longer live (nothing
# written for it). A place is never extended here: its waiter refreshes it by acquiring.
EXTEND_QUEUED = Script("extend_queued", """
local function extend_one(K, token, ttl, gc_ms)
""" + _PRELUDE + """
  local score = redis.call('ZSCORE', expiries, token)
  if score and tonumber(score) > now then
    redis.call('ZADD', expiries, whole(now + ttl), token)
    keep(gc_ms)
    return 1
  end
  return 0
end
local results = {}
for i = 1, #KEYS / 9 do
  local base = 9 * (i - 1)
  local K = {KEYS[base + 1], KEYS[base + 2], KEYS[base + 3], KEYS[base + 4], KEYS[base + 5],
             KEYS[base + 6], KEYS[base + 7], KEYS[base + 8], KEYS[base + 9]}
  results[i] = extend_one(K, ARGV[2 * i], tonumber(ARGV[2 * i + 1]), tonumber(ARGV[1]))
end
return results
""")

# KEYS: the nine of the prelude. ARGV: token. Returns 1 if the token holds a live lease (read
# or write). Writes nothing.
QUEUED_OWNED = Script("queued_owned", _ONE_NAME + """
local score = redis.call('ZSCORE', expiries, ARGV[1])
if score and tonumber(score) > now then return 1 end
return 0
""")

# KEYS: the nine of the prelude. Returns false if never used (or collected), else
# {name, fence, now ms, queued, {lease JSON, expiry, lease JSON, expiry, ...}, {place JSON,
# ...}, fair queued}: the live leases, the count of live places, their waiters in arrival
# order ('' for a place without a record), and the count of live places a fair lock's.
# Writes nothing.
INSPECT_QUEUE = Script("inspect_queue", _ONE_NAME + """
local found = redis.call('HMGET', meta, 'name', 'fence')
if not found[1] then return false end
local live = redis.call('ZRANGEBYSCORE', expiries, '(' .. now, '+inf', 'WITHSCORES')
local records = {}
for i = 1, #live, 2 do
  records[#records + 1] = redis.call('HGET', leases, live[i]) or '["read","0","?",0,"?","0"]'
  records[#records + 1] = live[i + 1]
end
local queued = redis.call('ZCOUNT', places, '(' .. now, '+inf')
local waiting = {}
for _, token in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
  local ends = redis.call('ZSCORE', places, token)
  if ends and tonumber(ends) > now then
    waiting[#waiting + 1] = redis.call('HGET', waiters, token) or ''
  end
end
local fair_queued = redis.call('ZCOUNT', fair, '(' .. now, '+inf')
return {found[1], found[2] or '0', whole(now), queued, records, waiting, fair_queued}
""")

# KEYS: the nine of the prelude. ARGV: gc_after ms. Frees every lease (the queue and the
# fence stay); returns how many were live, and wakes the waiters whose turn that made.
BREAK_QUEUE = Script("break_queue", _ONE_NAME + """
sweep()
local live = redis.call('ZCARD', expiries)
redis.call('DEL', leases, expiries)
wake_turn()
keep(tonumber(ARGV[1]))
return live
""")

ALL_QUEUE_SCRIPTS = (
    ACQUIRE_QUEUED, RELEASE_QUEUED, EXTEND_QUEUED, QUEUED_OWNED, INSPECT_QUEUE, BREAK_QUEUE,
)

