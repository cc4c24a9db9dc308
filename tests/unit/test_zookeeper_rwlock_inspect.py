"""ZooKeeper's read-write lock record (``_records.lock_info``), from nodes as read: a node not
marked queued is a lease only in its turn. A first try's node is written unmarked and
rewritten as queued once ranked; ``tenure verify --rwlock`` saw inspect list it beside the
writer it was about to queue behind."""

from __future__ import annotations

import types

from tenure._types import Holder, Kind
from tenure.backends.zookeeper._nodes import Record, node_prefix
from tenure.backends.zookeeper._records import lock_info

NOW = 1_000_000


def node(mode: str, sequence: int, *, queued: bool = False,
         written_ms_ago: int = 0) -> tuple[str, tuple[bytes, object]]:
    record = Record.new(Holder("host", 1, "main"), 1, 10.0, queued=queued)
    # As kazoo's ZnodeStat: a waiter is listed since its node's creation (ctime).
    stat = types.SimpleNamespace(
        mtime=NOW - written_ms_ago, ctime=NOW - written_ms_ago, czxid=sequence
    )
    return f"{node_prefix('token', mode)}{sequence:010d}", (record.encode(), stat)


def listed(*nodes: tuple[str, tuple[bytes, object]]) -> tuple[list[tuple[str, int]], int]:
    info = lock_info(Kind.RWLOCK, "n", fence=0, now=NOW, nodes=[name for name, _ in nodes],
                     answers=[answer for _, answer in nodes])
    return [(str(lease.mode), lease.fence or 0) for lease in info.leases], info.queued


def test_readers_share_and_a_writer_is_alone() -> None:
    assert listed(node("read", 1), node("read", 2)) == ([("read", 1), ("read", 2)], 0)
    assert listed(node("write", 1)) == ([("write", 1)], 0)


def test_a_first_try_behind_a_holder_is_waiting_not_a_lease() -> None:
    # Not yet rewritten as queued: a writer behind a reader, a reader behind a writer.
    assert listed(node("read", 1), node("write", 2)) == ([("read", 1)], 1)
    assert listed(node("write", 1), node("read", 2)) == ([("write", 1)], 1)
    # A reader behind a queued writer waits too (the writer goes first).
    assert listed(node("read", 1), node("write", 2, queued=True), node("read", 3)) == (
        [("read", 1)], 2)


def test_an_expired_node_ahead_holds_nothing_back() -> None:
    assert listed(node("write", 1, written_ms_ago=20_000), node("read", 2)) == ([("read", 2)], 0)
