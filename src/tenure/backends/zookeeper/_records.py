"""The one converter from a name's nodes, as read, to ``LockInfo`` (both flavours)."""

from __future__ import annotations

import datetime
from typing import Any

from tenure._types import Kind, LeaseInfo, LockInfo, Mode, WaiterInfo, queue_kind
from tenure.backends.zookeeper._nodes import Record, mode_of

__all__ = ["lock_info"]


def lock_info(
    kind: str, name: str, *, fence: int, now: int, nodes: list[str], answers: list[Any]
) -> LockInfo:
    """``name``'s record from its nodes (oldest first) and each one's ``get`` answer (or the
    node error it got: gone meanwhile), judged at ``now``, the server's milliseconds;
    ``fence``: the name's node's data, the last fence written there."""
    if kind == Kind.RWLOCK:
        return _in_turn(name, fence, now, nodes, answers)
    if kind == Kind.SEMAPHORE:
        return _within_limit(name, fence, now, answers)
    live: list[LeaseInfo] = []
    values = []
    for answer in answers:
        if isinstance(answer, Exception):
            continue
        record = Record.decode(answer[0])
        stat = answer[1]
        left = (stat.mtime + record.ttl_ms - now) / 1000
        if record.queued and not (record.holds_at_head and not live):
            # A live waiter ahead of the rest: nothing behind it holds, and it holds
            # nothing itself until the set that grants it (unless it holds at the head,
            # first of the live nodes: its waiter is granted without that set first).
            if left > 0:
                break
            continue
        if left > 0:
            live.append(LeaseInfo(record.holder, _utc(record.since), left, record.fence_of(stat)))
            values.append(record.value)
    if not live:
        return LockInfo(name, fence, None, None, None)
    first = live[0]
    # Holder, term (the node's czxid, or the fence its record stands for) and value come
    # from one getData of one node; the name's fence is written just after a grant, so it
    # may still show the previous term.
    return LockInfo(
        name, max(fence, first.fence or 0), first.holder, first.acquired_at, first.ttl_left,
        value=values[0],
    )


def _within_limit(name: str, fence: int, now: int, answers: list[Any]) -> LockInfo:
    """A semaphore: a live node not marked queued holds a permit, of its weight, if the
    weights of the live nodes ahead of it plus its own are within the limit (the grant rule,
    ``_async/ranking.py``); the other live nodes wait, listed in node (arrival) order with
    their weights, each since its node's creation by the server's clock (``ctime``). A first
    try's node is written unmarked and rewritten as queued (or deleted) when refused: until
    then, if its weight does not fit, it is counted as waiting. The limit is the oldest node's."""
    limit = None
    leases = []
    waiters = []
    units_ahead = 0
    for answer in answers:
        if isinstance(answer, Exception):
            continue  # gone meanwhile
        data, stat = answer
        record = Record.decode(data)
        if limit is None:
            limit = record.limit
        left = (stat.mtime + record.ttl_ms - now) / 1000
        if left <= 0:
            continue
        in_turn = units_ahead + record.weight <= limit
        units_ahead += record.weight
        if record.queued or not in_turn:
            waiters.append(WaiterInfo(record.holder, _utc(stat.ctime / 1000),
                                      weight=record.weight))
            continue
        leases.append(LeaseInfo(record.holder, _utc(record.since), left, record.fence_of(stat),
                                weight=record.weight))
    # The name's fence is written just after a grant: the newest permit may be ahead of it.
    fence = max([fence, *(lease.fence or 0 for lease in leases)])
    return LockInfo(name, fence, None, None, None, kind="semaphore", limit=limit,
                    leases=tuple(leases), queued=len(waiters), waiters=tuple(waiters))


def _in_turn(name: str, fence: int, now: int, nodes: list[str], answers: list[Any]) -> LockInfo:
    """A read-write lock: a live node not marked queued holds the name, oldest first, with
    the mode its name says, if it is in its turn (a writer with no live node ahead, a reader
    with no live write node ahead); the others wait. A first try's node is written unmarked
    and rewritten as queued once ranked behind a holder or a waiter: until then it is not in
    its turn, and is counted as waiting (``tenure verify --rwlock`` saw it listed beside the
    writer it waited for). The waiters are listed in node (arrival) order, each since its
    node's creation by the server's clock (``ctime``)."""
    leases = []
    waiters = []
    fair = 0
    ahead = writes_ahead = 0
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, Exception):
            continue  # gone meanwhile
        data, stat = answer
        record = Record.decode(data)
        left = (stat.mtime + record.ttl_ms - now) / 1000
        if left <= 0:
            continue
        mode = mode_of(node)
        in_turn = not (writes_ahead if mode == Mode.READ else ahead)
        ahead += 1
        writes_ahead += mode == Mode.WRITE
        fair += record.fair
        if record.queued or not in_turn:
            waiters.append(WaiterInfo(record.holder, _utc(stat.ctime / 1000), mode))
            continue
        leases.append(LeaseInfo(
            record.holder, _utc(record.since), left, record.fence_of(stat), mode=mode,
            fair=record.fair,
        ))
    # The name's fence is written just after a grant: the newest lease may be ahead of it.
    fence = max([fence, *(lease.fence or 0 for lease in leases)])
    return LockInfo(name, fence, None, None, None,
                    kind=queue_kind(len(leases) + len(waiters), fair), leases=tuple(leases),
                    queued=len(waiters), waiters=tuple(waiters))


def _utc(since: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(since, datetime.UTC)
