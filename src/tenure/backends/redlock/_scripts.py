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

Clean-up (``gc_after``, DESIGN rule 10): each node's record of a name (its meta hash, the
counter) expires ``gc_after`` (10 minutes by default) past the end of the name's last lease
there, as on the single-node backend. A node's ACQUIRE of a name without a record starts
its counter at the node's clock in microseconds (ARGV[11] = '2'), not at 1; a node with a
record counts on from it (so counters stay equal once floored, and step 2 stays rare). Why
fences still rise after a removal: every counter started at some node's clock when the
name's record was made and grew by one per grant since, so it stays below the clock of
every node (grants come less often than one a microsecond) unless node clocks disagree by
more than the time since then; a record goes only ``gc_after`` past its last lease, so a
node that made it again reads a clock above every fence the name had, provided the nodes'
clocks agree within ``gc_after`` (minutes; NTP keeps them within milliseconds).
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
