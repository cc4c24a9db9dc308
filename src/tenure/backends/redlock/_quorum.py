"""Redlock's arithmetic, as pure functions: the majority, the lease each node is asked for,
the validity left after a round trip, and what a set of node answers adds up to.

The lease the lock logic believes in is ``started + ttl`` on the client's monotonic clock,
measured from before the request (``tenure._async.lock``). Redlock's validity is
``node_ttl - elapsed - drift``, counted from the end of the request, so its end is
``started + node_ttl - drift``. Asking every node for ``node_ttl`` such that
``node_ttl - drift(node_ttl) == ttl`` makes the two ends the same instant: the lock logic's
``check()`` and renewal deadlines are exactly Redlock's validity, never later, and a grant
(or a renewal) counts only while ``elapsed < ttl``, i.e. while the validity is positive.

    drift(t)     = t * drift_rate + drift_margin            (default 1 % + 2 ms)
    node_ttl     = (ttl + drift_margin) / (1 - drift_rate)  so that node_ttl - drift = ttl
    validity     = node_ttl - elapsed - drift(node_ttl) = ttl - elapsed
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

from tenure._types import Holder, LockInfo

__all__ = [
    "Verdict",
    "busy_ttl_left",
    "combine_infos",
    "drift",
    "kth_largest",
    "lease_left",
    "node_ttl",
    "quorum",
    "reachable_quorum",
    "validity",
    "verdict",
]

DRIFT_RATE = 0.01
"""How far node and client clocks may run apart, as a fraction of the lease (rate drift)."""
DRIFT_MARGIN = 0.002
"""Seconds added to the drift allowance: the resolution of Redis's expiry (1 ms) and more."""


def quorum(nodes: int) -> int:
    """The majority of ``nodes``: any two majorities share at least one node."""
    if nodes < 1:
        raise ValueError("a Redlock needs at least one node")
    return nodes // 2 + 1


def drift(ttl: float, rate: float = DRIFT_RATE, margin: float = DRIFT_MARGIN) -> float:
    """Redlock's clock drift allowance for a lease of ``ttl`` seconds."""
    return ttl * rate + margin


def node_ttl(ttl: float, rate: float = DRIFT_RATE, margin: float = DRIFT_MARGIN) -> float:
    """The lease to ask each node for, so that Redlock's validity equals ``ttl - elapsed``."""
    return (ttl + margin) / (1.0 - rate)


def validity(ttl: float, elapsed: float) -> float:
    """Seconds of the lease left, by Redlock's rule, ``elapsed`` seconds after the request
    began (the lock logic's ``ttl``; the nodes were asked for ``node_ttl(ttl)``)."""
    return ttl - elapsed


class Verdict(enum.Enum):
    YES = "a majority said yes"
    NO = "a majority can no longer say yes"
    UNKNOWN = "too many nodes failed to tell"


def verdict(yes: int, failed: int, nodes: int) -> Verdict:
    """What ``yes`` answers out of ``nodes`` mean when ``failed`` nodes did not answer."""
    needed = quorum(nodes)
    if yes >= needed:
        return Verdict.YES
    if yes + failed < needed:
        return Verdict.NO
    return Verdict.UNKNOWN


def reachable_quorum(failed: int, nodes: int) -> bool:
    """Whether the nodes that answered are a majority (else the lock can't be judged)."""
    return nodes - failed >= quorum(nodes)


def busy_ttl_left(granted: int, busy_ttls: Iterable[float | None], nodes: int) -> float | None:
    """Seconds until enough of the busy nodes free up for a majority, at the earliest: the
    lock logic's back-off never sleeps past it. None when it can't be told (a node without
    an expiry, or too few busy nodes answering)."""
    missing = quorum(nodes) - granted
    if missing <= 0:
        return 0.0
    known = [left for left in busy_ttls if left is not None]
    if len(known) < missing:
        return None
    return sorted(known)[missing - 1]


def kth_largest(values: Sequence[float], k: int) -> float:
    """The ``k``-th largest of ``values`` (1-based): how long ``k`` of them all last."""
    return sorted(values, reverse=True)[k - 1]


def lease_left(
    node_left: float, rate: float = DRIFT_RATE, margin: float = DRIFT_MARGIN
) -> float:
    """A node's remaining lease in the lock logic's terms: less the drift allowance, so a
    lease just granted for ``ttl`` shows ``ttl`` left (the inverse of ``node_ttl``)."""
    return max(0.0, node_left * (1.0 - rate) - margin)


def combine_infos(
    infos: Sequence[LockInfo | None],
    nodes: int,
    rate: float = DRIFT_RATE,
    margin: float = DRIFT_MARGIN,
) -> LockInfo | None:
    """One lock's state from what each answering node knows of it (None: never acquired
    there). It is held only by a holder that a majority of ``nodes`` name; its ``ttl_left``
    is how long a majority still has it (less the drift allowance, see ``lease_left``), its
    ``acquired_at`` when a majority first had it. The fence is the largest counter of any
    node: the last fence issued, or above it."""
    present = [info for info in infos if info is not None]
    if not present:
        return None
    fence = max(info.fence for info in present)
    needed = quorum(nodes)
    by_holder: dict[Holder, list[LockInfo]] = {}
    for info in present:
        if info.holder is not None:
            by_holder.setdefault(info.holder, []).append(info)
    for holder, held in by_holder.items():
        if len(held) < needed:
            continue
        ttls = [info.ttl_left for info in held if info.ttl_left is not None]
        since = sorted(info.acquired_at for info in held if info.acquired_at is not None)
        return LockInfo(
            present[0].name,
            fence,
            holder,
            since[needed - 1] if len(since) >= needed else None,
            lease_left(kth_largest(ttls, needed), rate, margin) if len(ttls) >= needed else None,
        )
    return LockInfo(present[0].name, fence, None, None, None)
