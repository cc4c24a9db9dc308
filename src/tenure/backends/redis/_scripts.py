"""The Redis key layout and every Lua script, each with its contract; shared by both flavours.

Keys of the lock named N, with D = the first 32 hex digits of SHA-256(N in UTF-8):

    {ns}:{D}              hash   name, fence                        gc_after past the end of
                                                                 its last lease
    {ns}:{D}:lease        hash   token, host, pid, thread, since     PEXPIRE = the lease
    {ns}:{D}:wake         list   one item per release, BLPOPed by    expires 1 s after its
                                 the longest-blocked waiter          last push
    {ns}:{D}:left:TOKEN   string a waiter that gave up mid-wait      PX = its wait + 5 s

``{ns}`` is the namespace option (default ``tenure``). ``{D}`` is the Redis Cluster hash tag:
the first ``{...}`` of every key of one lock is the same hex digest, so all of them live in
one slot whatever the name contains (``{``, ``}``, spaces, newlines, 1 KB of text). The raw
name is kept in the first hash, for listing, and the acquire script refuses a name whose
digest matches a different stored name (a SHA-256 collision: in practice never, but if it
happens it is an error, not two names sharing one lock). Names reach Lua only as KEYS/ARGV.

The fence is the ``fence`` field of the first hash: a grant writes max(the stored fence + 1,
the server's clock in microseconds) there, in the acquire script. So fences strictly increase
per name while the hash lives, and never go back when it is gone: when ``gc_after`` removed the
hash of a name idle that long, when a server restarted without its data, or when a Sentinel
failover promoted a replica that had not yet received the last grants, the next fence starts
from the server's clock, above every fence handed out before (provided the new server's clock
is not behind the old one's by more than the time the failover took, which on one host or
under NTP it is not). The first hash expires ``gc_after`` (a ``connect`` option, 10 minutes by
default; ``none``: never) past the end of its lease as last granted or renewed.

Waiting (rule 6): a waiter BLPOPs the lock's wake list with its next ACQUIRE pipelined behind
the BLPOP. Every release (and break) pushes one item: the server hands it to the client that
has been blocked the longest (Redis serves a list's blocked clients first come, first served),
unblocks it and runs its queued ACQUIRE in the same turn, before the releasing process can
even read its reply, so the releaser coming straight back finds the lock taken and queues up
behind. The queue is the server's own list of blocked clients: a contended acquisition costs
the same few commands whatever the number of waiters, and a waiter that dies or is cancelled
leaves nothing behind (its blocked connection is dropped). An item nobody was blocked for (a
waiter between two waits) waits for the next BLPOP, for a second at most; a grant to a
process that did not wait deletes any left, as the lock is no longer free. A waiter cancelled
mid-wait LEAVEs: it gives back a lease its pipelined ACQUIRE may have taken, passes a
wake-up it may have taken on, and marks its token as gone, so that an ACQUIRE still pipelined
on its dropped connection (a server that has not yet noticed the close, a BLPOP still
blocked) grants nothing.

Times: ``since`` and the reply times are server microseconds (``TIME``); ttl arguments are
milliseconds. Scripts use no client clock.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import NamedTuple

from tenure.backends.redis._records import decode_info  # Redlock imports it from here

__all__ = [
    "ACQUIRE",
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
    wake: str
    left_prefix: str
    own_prefix: str

    def left(self, token: str) -> str:
        return self.left_prefix + token

    def own(self, token: str) -> str:
        """An attempt's own wake list (ACQUIRE's ARGV[12])."""
        return self.own_prefix + token


@functools.lru_cache(maxsize=4096)
def lock_keys(namespace: str, name: str) -> LockKeys:
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
    meta = f"{namespace}:{{{digest}}}"
    return LockKeys(meta, f"{meta}:lease", f"{meta}:wake", f"{meta}:left:", f"{meta}:own:")


def meta_pattern(namespace: str) -> str:
    """SCAN MATCH pattern of every lock's first hash (and of nothing else we write)."""
    return namespace.replace("[", "\\[").replace("]", "\\]") + ":{*}"


def milliseconds(seconds: float) -> int:
    return max(1, round(seconds * 1000))


# ---- the scripts ----------------------------------------------------------------------------

WAKE_KEEP_MS = 1000
"""How long a wake-up item nobody has BLPOPed yet stays: long enough for a waiter between two
waits to block again, short enough that releases nobody waited for cost little."""

# Shared by RELEASE, BREAK and LEAVE: one item on the wake list wakes the longest-blocked
# waiter (or the next one to block, within WAKE_KEEP_MS).
_WAKE = f"""
local function wake(key)
  redis.call('RPUSH', key, '1')
  redis.call('PEXPIRE', key, {WAKE_KEEP_MS})
end
"""

ACQUIRE = Script(
    "acquire",
    """
-- KEYS[1] meta hash   KEYS[2] lease   KEYS[3] wake list   KEYS[4] this token's left mark
-- ARGV[1] token   ARGV[2] ttl ms   ARGV[3] name   ARGV[4] host   ARGV[5] pid   ARGV[6] thread
-- ARGV[7] '1' if this attempt follows a wait (pipelined behind its BLPOP), else '0'
-- ARGV[8] '1' to store ARGV[9] as the lease's value (an election leader's), else '0'
-- ARGV[10] gc_after ms: the first hash expires that long past the lease's end (0: never)
-- ARGV[11] '1' to floor the fence at the server's clock in microseconds; '2' to floor it
--   only when the name has no record (Redlock, whose fence design floors the nodes'
--   counters itself: they stay equal while the records live, and a record gc_after
--   removed starts again from the clock, above every counter)
-- ARGV[12] (optional) '1' to push an item to KEYS[5], this attempt's own wake list, when it
--   grants a new lease: the BLPOP pipelined behind it (see RedisAttempt.try_or_wait) then
--   returns at once instead of waiting for a release
-- Returns {1, fence}: granted (free, expired, or already ours: then the expiry is reset and
--   the fence kept); {0, ms}: held by another token for about ms more (-1: unknown; also
--   after a wait its waiter gave up, which LEAVE marked); {-1, stored name}: the name's
--   digest belongs to another name.
-- A grant after no wait deletes the wake-ups left on the list: they said the lock was free,
-- which it no longer is (a waiter's grant took its item with its BLPOP).
local token = ARGV[1]
local function keep_meta()
  local gc_ms = tonumber(ARGV[10])
  if gc_ms > 0 then
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + gc_ms)
  else
    redis.call('PERSIST', KEYS[1])
  end
end
local holder = redis.call('HGET', KEYS[2], 'token')
if holder == token then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  keep_meta()
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
end
if holder then
  return {0, redis.call('PTTL', KEYS[2])}
end
if ARGV[7] == '1' and redis.call('EXISTS', KEYS[4]) == 1 then
  return {0, -1}
end
local now = redis.call('TIME')
local now_us = now[1] .. string.format('%06d', tonumber(now[2]))
local meta = redis.call('HMGET', KEYS[1], 'name', 'fence')
local stored = meta[1]
if stored and stored ~= ARGV[3] then
  return {-1, stored}
end
-- Counter and clock: strictly increasing while the hash lives, never back when it is gone.
local fence = (tonumber(meta[2]) or 0) + 1
if ARGV[11] == '1' or (ARGV[11] == '2' and not meta[2]) then
  fence = math.max(fence, tonumber(now[1]) * 1000000 + tonumber(now[2]))
end
redis.call('HSET', KEYS[1], 'name', ARGV[3], 'fence', string.format('%d', fence))
keep_meta()
if ARGV[8] == '1' then
  redis.call('HSET', KEYS[2], 'token', token, 'host', ARGV[4], 'pid', ARGV[5],
             'thread', ARGV[6], 'since', now_us, 'value', ARGV[9])
else
  redis.call('HSET', KEYS[2], 'token', token, 'host', ARGV[4], 'pid', ARGV[5],
             'thread', ARGV[6], 'since', now_us)
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if ARGV[7] ~= '1' then
  redis.call('DEL', KEYS[3])
end
if ARGV[12] == '1' then
  redis.call('RPUSH', KEYS[5], '1')
  redis.call('PEXPIRE', KEYS[5], """ + str(WAKE_KEEP_MS) + """)
end
return {1, fence}
""",
)

RELEASE = Script(
    "release",
    """
-- KEYS[1] lease   KEYS[2] wake list
-- ARGV[1] token
-- Returns 1 if this token's live lease was deleted (and the longest waiter woken), else 0
-- (expired, or another token's: nothing is changed).
"""
    + _WAKE
    + """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
wake(KEYS[2])
return 1
""",
)

EXTEND = Script(
    "extend",
    """
-- KEYS[2i-1] the first hash of lock i   KEYS[2i] its lease (any number of locks, all in one
--   slot on a Cluster)
-- ARGV[1] gc_after ms (0: never)   ARGV[2i] lock i's token   ARGV[2i+1] its new ttl ms
-- Returns one 1/0 per lock: 1 if the token held a live lease, now reset to ttl from now (and
-- the first hash kept gc_after past that).
local gc_ms = tonumber(ARGV[1])
local results = {}
for i = 1, #KEYS / 2 do
  local meta, lease = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('HGET', lease, 'token') == ARGV[2 * i] then
    local ttl = tonumber(ARGV[2 * i + 1])
    redis.call('PEXPIRE', lease, ttl)
    if gc_ms > 0 then
      redis.call('PEXPIRE', meta, ttl + gc_ms)
    end
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
-- KEYS[1] lease   KEYS[2] wake list
-- Returns 1 if a live lease (anybody's) was deleted and the longest waiter woken, else 0.
-- The fence is untouched.
"""
    + _WAKE
    + """
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
wake(KEYS[2])
return 1
""",
)

LEAVE = Script(
    "leave",
    """
-- KEYS[1] lease   KEYS[2] wake list   KEYS[3] this token's left mark
-- ARGV[1] token   ARGV[2] how long the mark stays, ms (the wait's longest, and a margin)
-- A waiter gives up mid-wait (cancelled, or its connection failed): its BLPOP may have taken
-- a wake-up, and its pipelined acquire the lock; or both may still come, on a connection the
-- server has not yet seen closed. Marks the token as gone (its acquires after a wait then
-- grant nothing), gives the lease back if it holds it, and wakes the next waiter if the lock
-- is free (a wake-up it took is passed on; a spare one is a spurious wake-up at worst).
-- Returns 1.
"""
    + _WAKE
    + """
redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
local holder = redis.call('HGET', KEYS[1], 'token')
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  holder = false
end
if not holder then
  wake(KEYS[2])
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

ALL_SCRIPTS = (ACQUIRE, RELEASE, EXTEND, INSPECT, BREAK, LEAVE, SET_VALUE)

