"""MySQL/MariaDB clean-up of idle records (``gc_after``) and fences that never go back (DESIGN
rule 10), against what the server stores: an idle name's rows go after gc_after, a live lease,
permit or waiting place keeps them whatever gc_after says, the next fence is greater after a
clean-up and after rows lost behind tenure's back, ``gc_after=none`` keeps everything, and a
pass reads a bounded slice of the table, resuming where the last one ended.

Clean-up runs after a grant or a release, at most once per ``min(gc_after, 60 s)`` per client:
``tick`` sleeps past that interval and takes and releases another name of the same table,
which runs one pass."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode
from tenure.backends.mysql import _store
from tenure.backends.mysql._store import MySQLTable
from tests.integration.sql_support import raw

pytestmark = pytest.mark.mysql

GC_AFTER = 0.3
HOLDER = Holder("test", os.getpid(), "main")


def store_of(locks: tenure.Locks) -> MySQLTable:
    store: MySQLTable = locks.backend.store
    return store


def rw_spec(mode: str, queue_ttl: float) -> LeaseSpec:
    """A read-write lock's spec (``mode``: "read" or "write")."""
    return LeaseSpec(Kind.RWLOCK, mode=Mode(mode), queue_ttl=queue_ttl)


def tick(locks: tenure.Locks, *, pause: float = GC_AFTER + 0.1) -> None:
    """Let gc_after (and the pass interval) pass, then grant and release another name: its
    release runs one clean-up pass."""
    time.sleep(pause)
    other = locks.lock("tick", ttl=5)
    assert other.acquire(blocking=False)
    other.release()


def rows(url: str, table: str, name: str) -> int:
    found = raw(url, f"SELECT COUNT(*) FROM `{table}` WHERE name = %s", (name.encode(),))
    return int(found[0][0])


@pytest.fixture
def table() -> str:
    return f"gc_{uuid.uuid4().hex[:12]}"


def test_idle_lock_records_are_collected_and_fences_never_go_back(
    mysql_url: str, table: str
) -> None:
    with tenure.connect(mysql_url, table=table, gc_after=GC_AFTER) as locks:
        lock = locks.lock("name", ttl=5)
        assert lock.acquire(blocking=False)
        first = lock.fence
        assert first is not None
        lock.release()
        assert rows(mysql_url, table, "name") == 1  # released, not yet idle for gc_after
        tick(locks)
        assert rows(mysql_url, table, "name") == 0
        assert locks.inspect("name") is None and locks.list_locks("name") == []
        again = locks.lock("name", ttl=0.1)
        assert again.acquire(blocking=False)
        second = again.fence
        assert second is not None and second > first
        # A lease that lapsed unreleased: idle from its end on.
        time.sleep(0.2)
        tick(locks)
        assert rows(mysql_url, table, "name") == 0
        third = locks.lock("name", ttl=5)
        assert third.acquire(blocking=False)
        last = third.fence
        assert last is not None and last > second
        third.release()
        # Lost data (rows deleted behind tenure's back): the next fence is still greater.
        raw(mysql_url, f"DELETE FROM `{table}`")
        fourth = locks.lock("name", ttl=5)
        assert fourth.acquire(blocking=False)
        assert fourth.fence is not None and fourth.fence > last
        fourth.release()
    with tenure.connect(mysql_url, table=table, gc_after="none") as locks:
        assert store_of(locks).gc_after is None
        tick(locks)
        assert rows(mysql_url, table, "name") == 1  # kept forever


def test_a_live_lease_is_never_collected(mysql_url: str, table: str) -> None:
    with tenure.connect(mysql_url, table=table, gc_after=0.001) as locks:
        lock = locks.lock("held", ttl=10)
        assert lock.acquire(blocking=False)
        for _ in range(3):
            tick(locks, pause=0.05)
        assert rows(mysql_url, table, "held") == 1
        assert lock.owned()
        info = locks.inspect("held")
        assert info is not None and info.held and info.fence == lock.fence
        lock.release()


def test_idle_semaphore_records_are_collected_and_fences_never_go_back(
    mysql_url: str, table: str
) -> None:
    slots = f"{table}_slots"
    with tenure.connect(mysql_url, table=table, gc_after=GC_AFTER) as locks:
        permit = locks.semaphore("pool", limit=2, ttl=5)
        assert permit.acquire(blocking=False)
        first = permit.fence
        assert first is not None
        other = locks.semaphore("pool", limit=2, ttl=5)
        assert other.acquire(blocking=False)
        latest = other.fence
        assert latest is not None and latest > first
        permit.release()
        # One permit still live: the name's rows stay, however long its other slot is idle.
        tick(locks)
        tick(locks)
        assert rows(mysql_url, slots, "pool") == 3  # the record and its two slots
        assert other.owned()
        other.release()
        tick(locks)
        assert rows(mysql_url, slots, "pool") == 0
        assert locks.inspect("pool", kind="semaphore") is None
        again = locks.semaphore("pool", limit=2, ttl=5)
        assert again.acquire(blocking=False)
        assert again.fence is not None and again.fence > latest
        second = again.fence
        again.release()
        raw(mysql_url, f"DELETE FROM `{slots}`")  # lost data
        third = locks.semaphore("pool", limit=2, ttl=5)
        assert third.acquire(blocking=False)
        assert third.fence is not None and third.fence > second
        third.release()
    with tenure.connect(mysql_url, table=table, gc_after="none") as locks:
        kept = locks.semaphore("pool", limit=2, ttl=5)
        assert kept.acquire(blocking=False)
        kept.release()
        tick(locks)
        assert rows(mysql_url, slots, "pool") == 3


def test_a_semaphore_place_keeps_its_name_and_goes_once_lapsed(
    mysql_url: str, table: str
) -> None:
    slots = f"{table}_slots"
    spec = LeaseSpec(Kind.SEMAPHORE, limit=2, weight=2, queue_ttl=30)
    with tenure.connect(mysql_url, table=table, gc_after=GC_AFTER) as locks:
        store = store_of(locks)
        held = store.acquire("pool", spec, "a" * 32, 0.2, HOLDER)
        assert isinstance(held, Grant)
        assert isinstance(store.acquire("pool", spec, "b" * 32, 30, HOLDER), Busy)
        time.sleep(0.3)  # the permit has expired; the place (30 s) lives on
        tick(locks)
        tick(locks)
        # The record, the slot and the place: the place keeps the name, idle or not.
        assert rows(mysql_url, slots, "pool") == 3
        info = locks.inspect("pool", kind="semaphore")
        assert info is not None and info.units == 0 and info.queued == 1
        assert store.release(Kind.SEMAPHORE, "pool", "b" * 32) is False  # gives the place up
        tick(locks)
        assert rows(mysql_url, slots, "pool") == 0
        again = store.acquire("pool", spec, "c" * 32, 5, HOLDER)
        assert isinstance(again, Grant) and again.fence > held.fence
        assert store.release(Kind.SEMAPHORE, "pool", "c" * 32)


def test_idle_rwlock_records_are_collected_but_never_a_lease_or_a_place(
    mysql_url: str, table: str
) -> None:
    records, entries = f"{table}_rwlocks", f"{table}_rwlock_entries"
    with tenure.connect(mysql_url, table=table, gc_after=0.001) as locks:
        store = store_of(locks)
        writer = store.acquire("rw", rw_spec("write", 10), "a" * 32, 10, HOLDER)
        assert isinstance(writer, Grant)
        waiting = store.acquire("rw", rw_spec("read", 10), "b" * 32, 10, HOLDER)
        assert isinstance(waiting, Busy)
        tick(locks, pause=0.05)
        assert rows(mysql_url, records, "rw") == 1  # a live lease and a place
        assert store.release(Kind.RWLOCK, "rw", "a" * 32)
        tick(locks, pause=0.05)
        tick(locks, pause=0.05)
        assert rows(mysql_url, records, "rw") == 1  # the place alone keeps it
        info = locks.inspect("rw", kind="rwlock")
        assert info is not None and info.queued == 1 and info.fence == writer.fence
        reader = store.acquire("rw", rw_spec("read", 10), "b" * 32, 10, HOLDER)
        assert isinstance(reader, Grant) and reader.fence > writer.fence
        assert store.release(Kind.RWLOCK, "rw", "b" * 32)
    with tenure.connect(mysql_url, table=table, gc_after=GC_AFTER) as locks:
        tick(locks)
        assert rows(mysql_url, records, "rw") == 0
        assert rows(mysql_url, entries, "rw") == 0
        assert locks.inspect("rw", kind="rwlock") is None
        again = locks.rwlock("rw", ttl=5).write()
        assert again.acquire(blocking=False)
        last = again.fence
        assert last is not None and last > reader.fence
        again.release()
        raw(mysql_url, f"DELETE FROM `{records}`")  # lost data
        fair = locks.lock("rw", fair=True, ttl=5)
        assert fair.acquire(blocking=False)
        assert fair.fence is not None and fair.fence > last
        fair.release()
    with tenure.connect(mysql_url, table=table, gc_after="none") as locks:
        tick(locks)
        assert rows(mysql_url, records, "rw") == 1


def test_a_pass_reads_a_bounded_slice_and_resumes(
    mysql_url: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "SWEEP_BATCH", 2)
    names = [f"idle:{index}" for index in range(5)]
    with tenure.connect(mysql_url, table=table, gc_after=GC_AFTER) as locks:
        for name in names:
            lock = locks.lock(name, ttl=5)
            assert lock.acquire(blocking=False)
            lock.release()
        left = []
        for _ in range(4):
            tick(locks)
            left.append(sum(rows(mysql_url, table, name) for name in names))
        # Two rows of the key a pass ("idle:0", "idle:1"; "idle:2", "idle:3"; "idle:4",
        # "tick" - which is not idle yet), then the end of the table, then from the start.
        assert left == [3, 1, 0, 0]


@pytest.mark.parametrize("value", [0, -1, "soon", "nan", float("inf"), True, [1]])
def test_bad_gc_after_is_refused(mysql_url: str, value: Any) -> None:
    with pytest.raises(tenure.ConfigurationError, match="gc_after"):
        tenure.connect(mysql_url, gc_after=value)
    if isinstance(value, str):
        separator = "&" if "?" in mysql_url else "?"
        with pytest.raises(tenure.ConfigurationError, match="gc_after"):
            tenure.connect(f"{mysql_url}{separator}gc_after={value}")


@pytest.mark.parametrize("text", ["none", "off", "never", "NONE"])
def test_gc_after_none_in_the_url_keeps_records(mysql_url: str, text: str) -> None:
    separator = "&" if "?" in mysql_url else "?"
    with tenure.connect(f"{mysql_url}{separator}gc_after={text}") as locks:
        assert store_of(locks).gc_after is None
    with tenure.connect(f"{mysql_url}{separator}gc_after=2.5") as locks:
        assert store_of(locks).gc_after == 2.5
    with tenure.connect(mysql_url) as locks:
        assert store_of(locks).gc_after == tenure._options.DEFAULT_GC_AFTER
