"""The Redis key layout and Lua scripts of semaphores (weighted FIFO permits), each with its
contract; shared by both flavours (the lock's are in ``_scripts``).

Keys of the semaphore named N, with D = the first 32 hex digits of SHA-256(N in UTF-8), the
same Cluster hash tag as the lock of that name (so every key of N lives in one slot), under
``{ns}:sem:``, a prefix no lock key has:

    {ns}:sem:{D}            hash  name, fence, limit, arrivals         gc_after past its last
                                                                       permit's or place's end
    {ns}:sem:{D}:permits    zset  token -> expiry (server ms)          expire a second after
    {ns}:sem:{D}:holders    hash  token -> JSON [fence, host, pid,     its last permit ends
                                  thread, since (server ms), weight]
    {ns}:sem:{D}:weights    hash  token -> weight, for the permits
                                  heavier than 1 only
    {ns}:sem:{D}:wake       list  one item per release: BLPOPed by a   expires after 1 s
                                  waiter without a place (an older
                                  tenure's, or a store-level try)
    {ns}:sem:{D}:queue      zset  token -> arrival position             a second after its
    {ns}:sem:{D}:places     zset  token -> place expiry (server ms)     last place ends
    {ns}:sem:{D}:waiters    hash  token -> JSON [weight, host, pid,
                                  thread, since (server ms)]
    {ns}:sem:{D}:wake:TOKEN list  at most one item: "your turn may      5 s after its last
                                  have come", BLPOPed by that waiter    push

A permit takes its weight of the limit's units: the units in use are ZCARD of ``permits``
plus, for the few heavier permits in ``weights``, their weight less one (so weight-1 permits
cost no read at all, and a permit written by an older tenure, without a weight, takes 1).

The grant rule, in ACQUIRE_PERMIT's one script: granted iff the units of the live permits,
plus the weights of the live places ahead of this attempt's (every live place, for an
attempt without one), plus its weight are at most the limit. The places ahead are read from
the head of ``queue`` and stop as soon as they are too heavy, so a try reads at most
``limit`` of them; with nobody waiting it reads none. A refused attempt given a place ttl
(every permit's on a store that offers "weighted") keeps a place at the tail of ``queue``
(its arrival from the first hash's ``arrivals`` counter), refreshed by each try (it keeps its
position); a waiter that gives up removes it (RELEASE_PERMIT), one that dies leaves it to
lapse. So waiters are served in arrival order, and a heavy waiter at the head holds back the
lighter ones behind it until its weight fits: it is never starved.

Every script reads the server's clock (``TIME``) and first drops the permits whose expiry
has passed and the places that lapsed, so a crashed holder's units are free once its lease
ends and a dead waiter stops blocking the queue when its place ends; no client clock is used.

Waking, as the read-write lock's: a waiter with a place BLPOPs a list of its own. Whenever
units come back or a place goes (release, break, a place left, lapsed ones dropped by any
script) the script walks the queue from its head and pushes to exactly the waiters whose
turn it now is: those whose weights, added from the head, fit beside the units in use
(stopping at the first that does not: it holds back those behind it). A push to a waiter not
blocked at that moment stays in its list for its next BLPOP. Each release also pushes one
item to the shared ``wake`` list, for waiters without a place.

Fences: a grant's fence is max(the stored fence + 1, the server's time in microseconds),
written on the first hash in the grant's script. So fences strictly increase per name while
the hash lives, and never go back when it is gone: when ``gc_after`` removed an idle
semaphore's hash, or a server restarted without its data, the next fence starts from the
server's clock, above every fence handed out before (it stays within one fence per
microsecond of the clock: a script takes longer than that). What this needs is a server clock
that does not step back across the gap (the lock's fences are made the same way).
``gc_after=None`` keeps the first hash forever.

The stored limit lives on the first hash, which outlives every live permit and place (its
expiry is pushed past the last one's end on every grant, renewal and release), so a limit is
never forgotten while permits hold it. Names reach Lua only as KEYS/ARGV.
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
    "keys_of_semaphore",
    "semaphore_keys",
    "semaphore_pattern",
]


WAKE_KEEP_MS = 5000
"""How long a waiter's wake-up stays in its list unclaimed: past its next BLPOP (a waiter
tries again at least every third of its place's lease, 1 s by default)."""
WAKE_AT_MOST = 256
"""Waiters one event wakes at most. Those further back find their turn at their next try,
within a third of their place's lease."""


class SemaphoreKeys(NamedTuple):
    meta: str
    permits: str
    holders: str
    wake: str
    weights: str
    queue: str
    places: str
    waiters: str
    wake_prefix: str
    """``wake_prefix + token`` is that waiter's wake list."""

    @property
    def all(self) -> tuple[str, ...]:
        """The keys every script but PERMIT_OWNED takes, in its KEYS order."""
        return tuple(self)

    def wake_of(self, token: str) -> str:
        return self.wake_prefix + token


@functools.lru_cache(maxsize=4096)
def semaphore_keys(namespace: str, name: str) -> SemaphoreKeys:
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    return keys_of_semaphore(f"{namespace}:sem:{{{digest}}}")


def keys_of_semaphore(meta: str) -> SemaphoreKeys:
    """The keys of the semaphore whose first hash is ``meta`` (a SCAN finds hashes)."""
    return SemaphoreKeys(
        meta, f"{meta}:permits", f"{meta}:holders", f"{meta}:wake", f"{meta}:weights",
        f"{meta}:queue", f"{meta}:places", f"{meta}:waiters", f"{meta}:wake:",
    )


def semaphore_pattern(namespace: str) -> str:
    """SCAN MATCH pattern of every semaphore's first hash (and of nothing else we write)."""
    return namespace.replace("[", "\\[").replace("]", "\\]") + ":sem:{*}"


# Every script's prelude, over K: KEYS, or a batch's keys of one name. K[1..9]: meta,
# permits, holders, wake, weights, queue, places, waiters, the wake lists' prefix (all of one
# name: one slot; the wake lists are named from that prefix inside the script, with the same
# hash tag, so a Cluster node serves them).
_PRELUDE = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function whole(number) return string.format('%d', number) end
local meta, permits, holders, shared_wake, weights, queue, places, waiters, wake_prefix =
  K[1], K[2], K[3], K[4], K[5], K[6], K[7], K[8], K[9]

local function remove_place(token)
  redis.call('ZREM', queue, token)
  redis.call('ZREM', places, token)
  redis.call('HDEL', waiters, token)
end

local function remove_permit(token)
  redis.call('ZREM', permits, token)
  redis.call('HDEL', holders, token)
  redis.call('HDEL', weights, token)
end

-- Drop expired permits and lapsed places; true if any was dropped.
local function sweep()
  local dropped = false
  local expired = redis.call('ZRANGEBYSCORE', permits, '-inf', now)
  for _, token in ipairs(expired) do
    redis.call('HDEL', holders, token)
    redis.call('HDEL', weights, token)
  end
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', permits, '-inf', now)
    dropped = true
  end
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', places, '-inf', now)) do
    remove_place(token)
    dropped = true
  end
  return dropped
end

-- The units the live permits take: one each, and the heavier ones' extra units.
local function units()
  local total = redis.call('ZCARD', permits)
  if total == 0 then return 0 end
  local heavy = redis.call('HVALS', weights)
  for _, weight in ipairs(heavy) do total = total + tonumber(weight) - 1 end
  return total
end

local function place_weight(token)
  local record = redis.call('HGET', waiters, token)
  if not record or record == '' then return 1 end
  return tonumber(cjson.decode(record)[1]) or 1
end

-- The weights of the places ahead of arrival ``mine`` (every place when nil), added from the
-- head, stopping once they pass ``room``.
local function ahead(mine, room)
  local total, index = 0, 0
  while true do
    local batch = redis.call('ZRANGE', queue, index, index + 15, 'WITHSCORES')
    if #batch == 0 then return total end
    for i = 1, #batch, 2 do
      if mine and tonumber(batch[i + 1]) >= mine then return total end
      total = total + place_weight(batch[i])
      if total > room then return total end
    end
    index = index + 16
  end
end

-- Push to the waiters whose turn it is now: from the head, while their weights fit beside
-- the units in use (the first that does not holds back those behind it).
local function wake_turn()
  if redis.call('ZCARD', queue) == 0 then return end
  local limit = tonumber(redis.call('HGET', meta, 'limit'))
  local room = 0
  if limit then room = limit - units() end
  local index = 0
  while index < {WAKE_AT_MOST} do
    local batch = redis.call('ZRANGE', queue, index, index + 15)
    if #batch == 0 then return end
    for _, token in ipairs(batch) do
      index = index + 1
      room = room - place_weight(token)
      if room < 0 and (limit or index > 1) then return end
      local list = wake_prefix .. token
      redis.call('RPUSH', list, '1')
      redis.call('LTRIM', list, -1, -1)
      redis.call('PEXPIRE', list, {WAKE_KEEP_MS})
    end
  end
end

-- Each key lives as long as what it holds, and a second more; the first hash gc_ms past the
-- end of the last permit or place (0: forever), so it outlives every permit its limit rules.
local function keep(gc_ms)
  local until_ms = now
  local last = redis.call('ZRANGE', permits, -1, -1, 'WITHSCORES')
  if last[2] then
    until_ms = math.max(until_ms, tonumber(last[2]))
    for _, key in ipairs({{permits, holders, weights}}) do
      redis.call('PEXPIREAT', key, whole(tonumber(last[2]) + 1000))
    end
  end
  last = redis.call('ZRANGE', places, -1, -1, 'WITHSCORES')
  if last[2] then
    until_ms = math.max(until_ms, tonumber(last[2]))
    for _, key in ipairs({{queue, places, waiters}}) do
      redis.call('PEXPIREAT', key, whole(tonumber(last[2]) + 1000))
    end
  end
  if gc_ms > 0 then
    redis.call('PEXPIREAT', meta, whole(until_ms + gc_ms))
  else
    redis.call('PERSIST', meta)
  end
end

-- One item on the shared list wakes one waiter without a place (capped, short-lived).
local function wake_shared(count)
  for _ = 1, math.min(count, 64) do redis.call('RPUSH', shared_wake, '1') end
  redis.call('LTRIM', shared_wake, -64, -1)
  redis.call('PEXPIRE', shared_wake, 1000)
end
"""
_ONE_NAME = "local K = KEYS\n" + _PRELUDE

# KEYS: the nine of the prelude. ARGV: name, token, ttl ms, limit, host, pid, thread,
# gc_after ms (0: keep the first hash forever), weight (absent: 1), place ttl ms (absent or
# 0: a refusal takes no place).
# Atomic: the drop of expired permits and lapsed places, the retry check, the limit check,
# the rule (units of the live permits + weights of the live places ahead + weight <= limit)
# and the grant or the place. Returns {1, fence}: granted (or our live permit restarted, a
# retry: its fence kept; a place it held is gone); {0, ms left of the soonest permit, -1:
# none}: busy, its place added at the tail or refreshed (keeping its position) when it takes
# one; {2, stored limit}: live permits were taken with another limit; {3, stored name}: the
# digest belongs to another name. 2 and 3 add nothing and change no limit (expired permits
# and lapsed places are still dropped).
ACQUIRE_PERMIT = Script("acquire_permit", _ONE_NAME + """
local name, token = ARGV[1], ARGV[2]
local stored_name = redis.call('HGET', meta, 'name')
if stored_name and stored_name ~= name then return {3, stored_name} end
local dropped = sweep()
local ttl = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local gc_ms = tonumber(ARGV[8])
local weight = tonumber(ARGV[9] or '1')
local place_ms = tonumber(ARGV[10] or '0')
if redis.call('ZSCORE', permits, token) then
  redis.call('ZADD', permits, whole(now + ttl), token)
  remove_place(token)
  keep(gc_ms)
  return {1, tonumber(cjson.decode(redis.call('HGET', holders, token))[1])}
end
local live = redis.call('ZCARD', permits)
local stored = tonumber(redis.call('HGET', meta, 'limit'))
if live > 0 and stored and stored ~= limit then return {2, stored} end
local mine = redis.call('ZSCORE', queue, token)
if mine then mine = tonumber(mine) end
local room = limit - units() - weight
local fits = room >= 0
if fits and redis.call('ZCARD', queue) > 0 then fits = ahead(mine, room) <= room end
if fits then
  if mine then remove_place(token) end
  local fence = math.max((tonumber(redis.call('HGET', meta, 'fence')) or 0) + 1, now_us)
  redis.call('HSET', meta, 'name', name, 'limit', limit, 'fence', whole(fence))
  redis.call('ZADD', permits, whole(now + ttl), token)
  redis.call('HSET', holders, token, cjson.encode(
    {whole(fence), ARGV[5], tonumber(ARGV[6]), ARGV[7], whole(now), weight}))
  if weight ~= 1 then redis.call('HSET', weights, token, weight) end
  if dropped then wake_turn() end
  keep(gc_ms)
  return {1, fence}
end
if place_ms > 0 then
  local place_end = whole(now + place_ms)
  if mine then
    redis.call('ZADD', places, place_end, token)
  else
    local arrival = redis.call('HINCRBY', meta, 'arrivals', 1)
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    if last[2] and arrival <= tonumber(last[2]) then
      -- The counter was lost (an idle record collected while a place lived): past the tail.
      arrival = tonumber(last[2]) + 1
      redis.call('HSET', meta, 'arrivals', whole(arrival))
    end
    if not stored_name then redis.call('HSET', meta, 'name', name) end
    redis.call('ZADD', queue, whole(arrival), token)
    redis.call('ZADD', places, place_end, token)
    redis.call('HSET', waiters, token,
               cjson.encode({weight, ARGV[5], tonumber(ARGV[6]), ARGV[7], whole(now)}))
  end
end
if dropped then wake_turn() end
if dropped or place_ms > 0 then keep(gc_ms) end
local soonest = redis.call('ZRANGE', permits, 0, 0, 'WITHSCORES')
if soonest[2] then return {0, tonumber(soonest[2]) - now} end
return {0, -1}
""")

# KEYS: the nine of the prelude. ARGV: token, gc_after ms.
# Removes the token's permit (returns 1 if it was live) or its waiting place (returns 0;
# also 0 when it had neither, or its permit had expired), and wakes the waiters whose turn
# that made (see the module docstring), and one waiter without a place per permit found.
# The fence is kept.
RELEASE_PERMIT = Script("release_permit", _ONE_NAME + """
local token = ARGV[1]
local score = redis.call('ZSCORE', permits, token)
local changed = sweep()
local live = 0
if score then
  if tonumber(score) > now then live = 1 end
  remove_permit(token)
  wake_shared(1)
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

# KEYS: the nine of the prelude for permit 1, for permit 2, ... (all in one slot). ARGV:
# gc_after ms, then token 1, ttl ms 1, token 2, ttl ms 2, ... Returns one 1/0 per permit:
# restarted (server now + its ttl) / no longer live (nothing written for it). A place is
# never extended here: its waiter refreshes it by trying again.
EXTEND_PERMITS = Script("extend_permits", """
local function extend_one(K, token, ttl, gc_ms)
""" + _PRELUDE + """
  local score = redis.call('ZSCORE', permits, token)
  if score and tonumber(score) > now then
    redis.call('ZADD', permits, whole(now + ttl), token)
    keep(gc_ms)
    return 1
  end
  return 0
end
local results = {}
for i = 1, #KEYS / 9 do
  local base = 9 * (i - 1)
  local K = {}
  for j = 1, 9 do K[j] = KEYS[base + j] end
  results[i] = extend_one(K, ARGV[2 * i], tonumber(ARGV[2 * i + 1]), tonumber(ARGV[1]))
end
return results
""")

# KEYS: permits. ARGV: token. Returns 1 if the token holds a live permit. Writes nothing.
PERMIT_OWNED = Script("permit_owned", """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now then return 1 end
return 0
""")

# KEYS: the nine of the prelude. Returns false if never acquired (or collected), else
# {name, fence, limit, now ms, {holder JSON, expiry, holder JSON, expiry, ...}, {place JSON,
# ...}} for the live permits, soonest-ending first, and the live places' waiters in arrival
# order ('' for a place without a record). Writes nothing.
INSPECT_SEMAPHORE = Script("inspect_semaphore", _ONE_NAME + """
local found = redis.call('HMGET', meta, 'name', 'fence', 'limit')
if not found[1] then return false end
local live = redis.call('ZRANGEBYSCORE', permits, '(' .. now, '+inf', 'WITHSCORES')
local records = {}
for i = 1, #live, 2 do
  records[#records + 1] = redis.call('HGET', holders, live[i]) or '[0,"?",0,"?",0]'
  records[#records + 1] = live[i + 1]
end
local waiting = {}
for _, token in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
  local ends = redis.call('ZSCORE', places, token)
  if ends and tonumber(ends) > now then
    waiting[#waiting + 1] = redis.call('HGET', waiters, token) or ''
  end
end
return {found[1], found[2], found[3], whole(now), records, waiting}
""")

# KEYS: the nine of the prelude. ARGV: gc_after ms. Frees every permit (the fence, the limit
# and the queue stay); returns how many were live, and wakes the waiters whose turn that
# made (and as many waiters without a place, up to 64).
BREAK_SEMAPHORE = Script("break_semaphore", _ONE_NAME + """
sweep()
local live = redis.call('ZCARD', permits)
redis.call('DEL', permits, holders, weights)
if live > 0 then wake_shared(live) end
wake_turn()
keep(tonumber(ARGV[1]))
return live
""")

ALL_SEMAPHORE_SCRIPTS = (
    ACQUIRE_PERMIT, RELEASE_PERMIT, EXTEND_PERMITS, PERMIT_OWNED, INSPECT_SEMAPHORE,
    BREAK_SEMAPHORE,
)
