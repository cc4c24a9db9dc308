"""ZooKeeper's lock record (``_records.lock_info``) and the test a waiter makes of the node
ahead of it (``_nodes.written_as_holder``), from nodes as read. A waiter's place written
``holds_at_head`` holds the lock once it is the first live node: its waiter takes the grant
without a write first, and ``inspect`` must name it the holder meanwhile."""

from __future__ import annotations

import types

from tenure._types import Holder, Kind
from tenure.backends.zookeeper._leases import QUEUE_TTL, holds_at_head
from tenure.backends.zookeeper._nodes import Record, node_prefix, written_as_holder
from tenure.backends.zookeeper._records import lock_info

NOW = 1_000_000


def node(sequence: int, *, queued: bool = False, at_head: bool = False,
         written_ms_ago: int = 0, version: int = 1) -> tuple[str, tuple[bytes, object]]:
    ttl = QUEUE_TTL if queued else 10.0
    record = Record.new(Holder("host", sequence, "main"), 1, ttl, queued=queued,
                        holds_at_head=at_head)
    stat = types.SimpleNamespace(
        mtime=NOW - written_ms_ago, ctime=NOW - written_ms_ago, czxid=sequence, version=version
    )
    return f"{node_prefix('token')}{sequence:010d}", (record.encode(), stat)


def holder(*nodes: tuple[str, tuple[bytes, object]]) -> tuple[int | None, int]:
    """The holder's pid (each node's holder has its sequence as pid) and the fence shown."""
    info = lock_info(Kind.LOCK, "n", fence=0, now=NOW, nodes=[name for name, _ in nodes],
                     answers=[answer for _, answer in nodes])
    return (None if info.holder is None else info.holder.pid), info.fence


def test_a_place_that_holds_at_the_head_is_the_holder_once_first() -> None:
    assert holder(node(1, queued=True, at_head=True)) == (1, 1)
    # Behind a live holder it waits; behind an expired one it is first.
    assert holder(node(1), node(2, queued=True, at_head=True)) == (1, 1)
    assert holder(node(1, written_ms_ago=20_000), node(2, queued=True, at_head=True)) == (2, 2)


def test_a_place_first_but_not_holding_at_the_head_holds_nothing() -> None:
    # An election's place (its value comes with the grant), or one from an older tenure.
    assert holder(node(1, queued=True), node(2)) == (None, 0)
    # Lapsed, a place that holds at the head holds nothing either.
    assert holder(node(1, queued=True, at_head=True, written_ms_ago=3_000)) == (None, 0)


def test_only_a_lock_without_a_value_and_with_a_ttl_at_least_the_places_holds_at_the_head(
) -> None:
    assert holds_at_head(Kind.LOCK, None, QUEUE_TTL)
    assert not holds_at_head(Kind.LOCK, None, QUEUE_TTL / 2)
    assert not holds_at_head(Kind.LOCK, "leader", 10.0)
    assert not holds_at_head(Kind.SEMAPHORE, None, 10.0)
    assert not holds_at_head(Kind.RWLOCK, None, 10.0)


def test_a_node_ahead_written_as_its_holders_was_granted() -> None:
    granted = node(1, version=1)[1]
    assert written_as_holder(*granted)
    # A first try's node, never written since it was made, may be one refused.
    assert not written_as_holder(*node(1, version=0)[1])
    # A waiter's place, rewritten.
    assert not written_as_holder(*node(1, queued=True, at_head=True, version=3)[1])
    # Not a record of ours.
    stat = types.SimpleNamespace(version=2)
    assert not written_as_holder(b"not json", stat)
    assert not written_as_holder(b"[1, 2]", stat)
    assert not written_as_holder(b'{"host": "h"}', stat)
