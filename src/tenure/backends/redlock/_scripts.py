"""The one Lua script Redlock adds to the single-node Redis backend's (``tenure.backends.redis.
_scripts``, whose key layout and ACQUIRE / RELEASE / EXTEND / INSPECT / BREAK every node runs
unchanged), and the fence design it serves.

Each node keeps its own fence counter (the ``fence`` field of the lock's meta hash, counted
by ACQUIRE). Counters of different nodes drift apart: a node that granted an attempt which
then failed to reach a majority counts one more than the others. A Redlock fence is built
from them in two steps:

1. ACQUIRE on every node; the fence is F = the largest counter among the nodes that granted.
2. FENCE_FLOOR raises the counter of every granting node below F to F, under our lease. The
   grant stands only if the nodes that hold our lease with a counter >= F are a majority
   (Q), and the validity is still positive after both steps.

Why: any later grant B needs a majority too, which shares a node n with Q. B's ACQUIRE on n
runs after our lease on n ended (released or expired), hence after the floor, so B's counter
on n is at least F + 1, and B's fence (a maximum that includes n's) is greater than F. What
this relies on, and what it does not give, is in docs/backends/redlock.md.

Step 2 is skipped when every granting node already answered F (the common, uncontended case:
counters stay equal once floored), so it usually costs no round trip.
"""

from __future__ import annotations

from tenure.backends.redis._scripts import Script

__all__ = ["FENCE_FLOOR"]

FENCE_FLOOR = Script(
    "redlock-fence-floor",
    """
-- KEYS[1] meta hash   KEYS[2] lease
-- ARGV[1] token   ARGV[2] the fence floor F
-- If ARGV[1] holds the live lease: raise the fence counter to F if it is lower; return 1.
-- Else change nothing; return 0. (The counter never goes down.)
if redis.call('HGET', KEYS[2], 'token') ~= ARGV[1] then
  return 0
end
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if fence < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'fence', ARGV[2])
end
return 1
""",
)
