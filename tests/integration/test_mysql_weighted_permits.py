"""MySQL/MariaDB weighted permits against what the server stores: a permit's slot carries its
weight, a refused blocking permit's place is a slot below 0 (arrival order: slot
descending) with its weight and waiter, the head's grant removes its place, a lapsed place
goes at the next acquire, a non-blocking try keeps none, another limit writes nothing; and
a slots table made by a tenure from before the weight column is upgraded in place (its
permits read as one unit each), also when a long transaction first blocks the upgrade."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec
from tenure.backends.mysql._semaphore_sql import SemaphoreStatements
from tenure.backends.mysql._store import MySQLTable
from tests.integration.sql_support import mysql_connection, raw

pytestmark = pytest.mark.mysql

HOLDER = Holder("test", os.getpid(), "main")


def store_of(locks: tenure.Locks) -> MySQLTable:
    store: MySQLTable = locks.backend.store
    return store


def permit(limit: int, weight: int, queue_ttl: float | None = 30) -> LeaseSpec:
    return LeaseSpec(Kind.SEMAPHORE, limit=limit, weight=weight, queue_ttl=queue_ttl)


def stored(url: str, table: str, name: str) -> list[tuple[Any, ...]]:
    """(slot, token, weight) of each row of ``name`` holding a token, by slot."""
    return [
        (int(slot), None if token is None else str(token), weight)
        for slot, token, weight in raw(
            url,
            f"SELECT slot, CAST(token AS CHAR), weight FROM `{table}_slots` "
            "WHERE name = %s AND token IS NOT NULL ORDER BY slot",
            (name.encode(),),
        )
    ]


def slot_columns(url: str, table: str) -> list[str]:
    rows = raw(
        url,
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (f"{table}_slots",),
    )
    return [str(row[0]) for row in rows]


@pytest.fixture
def table() -> str:
    return f"w_{uuid.uuid4().hex[:12]}"


def test_places_are_slots_below_zero_in_arrival_order_and_the_head_is_served_first(
    mysql_url: str, table: str
) -> None:
    a, b, c, d = ("a" * 32, "b" * 32, "c" * 32, "d" * 32)
    with tenure.connect(mysql_url, table=table) as locks:
        store = store_of(locks)
        first = store.acquire("pool", permit(4, 3), a, 30, HOLDER)
        assert isinstance(first, Grant)
        # b (weight 2) does not fit beside 3 units; c (weight 1) would, but stands behind b.
        assert isinstance(store.acquire("pool", permit(4, 2), b, 30, HOLDER), Busy)
        assert isinstance(store.acquire("pool", permit(4, 1), c, 30, HOLDER), Busy)
        assert stored(mysql_url, table, "pool") == [(-2, c, 1), (-1, b, 2), (1, a, 3)]
        info = locks.inspect("pool", kind="semaphore")
        assert info is not None and info.units == 3 and info.queued == 2
        assert [(w.holder, w.weight, w.mode) for w in info.waiters] == [
            (HOLDER, 2, None), (HOLDER, 1, None)]
        assert all(w.since is not None for w in info.waiters)
        # A retry keeps its place (and its position) and refreshes it.
        assert isinstance(store.acquire("pool", permit(4, 1), c, 30, HOLDER), Busy)
        assert [slot for slot, _, _ in stored(mysql_url, table, "pool")] == [-2, -1, 1]
        # A non-blocking newcomer takes no place.
        assert isinstance(store.acquire("pool", permit(4, 1, None), d, 30, HOLDER), Busy)
        assert d not in {token for _, token, _ in stored(mysql_url, table, "pool")}
        assert store.release(Kind.SEMAPHORE, "pool", a)
        granted = store.acquire("pool", permit(4, 2), b, 30, HOLDER)
        assert isinstance(granted, Grant) and granted.fence > first.fence
        # b took a free slot; its place is gone; c is now the head and fits (2 + 1 <= 4).
        again = store.acquire("pool", permit(4, 1), c, 30, HOLDER)
        assert isinstance(again, Grant) and again.fence > granted.fence
        assert stored(mysql_url, table, "pool") == [(1, b, 2), (2, c, 1)]
        # A retried grant (a lost reply) keeps its fence and its slot.
        assert store.acquire("pool", permit(4, 1), c, 30, HOLDER) == again
        assert stored(mysql_url, table, "pool") == [(1, b, 2), (2, c, 1)]
        info = locks.inspect("pool", kind="semaphore")
        assert info is not None and info.queued == 0 and info.units == 3
        assert sorted(lease.weight for lease in info.leases) == [1, 2]
        assert store.release(Kind.SEMAPHORE, "pool", b)
        assert store.release(Kind.SEMAPHORE, "pool", c)


def test_a_lapsed_place_goes_at_the_next_acquire_and_no_longer_holds_anyone_back(
    mysql_url: str, table: str
) -> None:
    a, b, c = ("a" * 32, "b" * 32, "c" * 32)
    with tenure.connect(mysql_url, table=table) as locks:
        store = store_of(locks)
        assert isinstance(store.acquire("pool", permit(3, 2), a, 30, HOLDER), Grant)
        assert isinstance(store.acquire("pool", permit(3, 3), b, 30, HOLDER), Busy)
        # c fits beside a's units (2 + 1 <= 3) but stands behind b's place.
        assert isinstance(store.acquire("pool", permit(3, 1), c, 30, HOLDER), Busy)
        # b's waiter died: its place was never refreshed, and has lapsed.
        raw(mysql_url, f"UPDATE `{table}_slots` SET expires_at = UTC_TIMESTAMP(6) "
            "- INTERVAL 1 SECOND WHERE name = %s AND token = %s", (b"pool", b))
        assert isinstance(store.acquire("pool", permit(3, 1), c, 30, HOLDER), Grant)
        assert stored(mysql_url, table, "pool") == [(1, a, 2), (2, c, 1)]
        # A waiter that gives up leaves at once (its release is not a permit's).
        assert isinstance(store.acquire("pool", permit(3, 1), b, 30, HOLDER), Busy)
        assert store.release(Kind.SEMAPHORE, "pool", b) is False
        assert [slot for slot, _, _ in stored(mysql_url, table, "pool")] == [1, 2]
        assert store.release(Kind.SEMAPHORE, "pool", a)
        assert store.release(Kind.SEMAPHORE, "pool", c)


def test_another_limit_while_permits_live_writes_nothing(mysql_url: str, table: str) -> None:
    with tenure.connect(mysql_url, table=table) as locks:
        store = store_of(locks)
        assert isinstance(store.acquire("pool", permit(2, 2), "a" * 32, 30, HOLDER), Grant)
        with pytest.raises(tenure.ConfigurationError, match="limit"):
            store.acquire("pool", permit(3, 1), "b" * 32, 30, HOLDER)
        assert stored(mysql_url, table, "pool") == [(1, "a" * 32, 2)]
        assert store.release(Kind.SEMAPHORE, "pool", "a" * 32)
        # None live: the new limit is stored and rules.
        assert isinstance(store.acquire("pool", permit(3, 3), "b" * 32, 30, HOLDER), Grant)
        info = locks.inspect("pool", kind="semaphore")
        assert info is not None and info.limit == 3 and info.units == 3
        assert store.release(Kind.SEMAPHORE, "pool", "b" * 32)


def old_slots_table(url: str, table: str) -> None:
    """The slots table as a tenure from before the weight column made it (this tenure's,
    less that column), and the lock table beside it."""
    with tenure.connect(url, table=table) as locks, locks.lock("plain", ttl=10):
        pass
    raw(url, SemaphoreStatements(table).create.replace("    weight      INT NULL,\n", ""))


def test_slots_from_before_the_weight_column_are_upgraded_and_count_one_unit_each(
    mysql_url: str, table: str
) -> None:
    old_slots_table(mysql_url, table)
    assert "weight" not in slot_columns(mysql_url, table)
    # What an older tenure's first acquire of "old" (limit 3) wrote: the record, its three
    # slots, the first holding its live permit.
    raw(mysql_url, f"INSERT INTO `{table}_slots` VALUES "
        "(%s, 0, 7, 3, NULL, NULL, NULL, NULL, NULL, NULL), "
        "(%s, 1, 7, NULL, 'old-token', UTC_TIMESTAMP(6) + INTERVAL 60 SECOND, "
        "UTC_TIMESTAMP(6), 'old-host', 7, 'old-thread'), "
        "(%s, 2, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL), "
        "(%s, 3, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL)", (b"old",) * 4)
    with tenure.connect(mysql_url, table=table) as locks:
        info = locks.inspect("old", kind="semaphore")  # the first statement upgrades the table
        assert slot_columns(mysql_url, table)[-1] == "weight"
        assert info is not None and info.fence == 7 and info.limit == 3 and info.units == 1
        assert [(lease.holder.host, lease.weight) for lease in info.leases] == [("old-host", 1)]
        heavy = locks.semaphore("old", limit=3, weight=2, ttl=10)
        assert heavy.acquire(blocking=False) and (heavy.fence or 0) > 7  # 1 + 2 <= 3
        light = locks.semaphore("old", limit=3, ttl=10)
        assert not light.acquire(blocking=False)  # 1 + 2 + 1 > 3
        assert [(slot, weight) for slot, _, weight in stored(mysql_url, table, "old")] == [
            (1, None), (2, 2)]
        # The older tenure's release (the same statement as this one's) frees its unit.
        raw(mysql_url, SemaphoreStatements(table).release.replace("%(name)s", "%s")
            .replace("%(token)s", "%s"), (b"old".hex(), "old-token"))
        assert light.acquire(blocking=False)
        info = locks.inspect("old", kind="semaphore")
        assert info is not None and info.units == 3
        light.release()
        heavy.release()
    assert slot_columns(mysql_url, table).count("weight") == 1


def test_a_weight_column_upgrade_blocked_by_a_long_transaction_gives_up_and_is_tried_again(
    mysql_url: str, table: str
) -> None:
    old_slots_table(mysql_url, table)
    reader = mysql_connection(mysql_url, autocommit=False)
    try:
        with reader.cursor() as cursor:
            # An open transaction that read the table holds its metadata lock until it ends.
            cursor.execute(f"SELECT COUNT(*) FROM `{table}_slots`")
            cursor.fetchall()
        with tenure.connect(mysql_url, table=table, timeout=2) as locks:
            with pytest.raises(tenure.BackendError, match="ALTER"):
                locks.inspect("name", kind="semaphore")
            reader.commit()
            # The next operation upgrades the table and goes on.
            with locks.semaphore("name", limit=4, weight=3, ttl=10):
                info = locks.inspect("name", kind="semaphore")
                assert info is not None and info.units == 3
    finally:
        reader.close()
    assert slot_columns(mysql_url, table)[-1] == "weight"
