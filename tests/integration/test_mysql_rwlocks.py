"""MySQL/MariaDB read-write and fair locks against what the server stores: the tables made by
the first read-write acquire only, places in arrival order becoming leases, a renewal that
commits while an acquire waits for its row lock, lapsed places reclaimed, a retried acquire,
a user with rights on DBA-made tables only, and ``tenure ls / show / break`` on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

import tenure
from tenure._types import Busy, Grant, Holder, Kind, LeaseSpec, Mode, Renewal
from tenure.backends.mysql._rwlock_sql import RwlockStatements
from tenure.backends.mysql._store import MySQLTable
from tests.integration.processes import ROOT
from tests.integration.sql_support import mysql_connection, raw

pytestmark = pytest.mark.mysql

HOLDER = Holder("test", os.getpid(), "main")


def store_of(locks: tenure.Locks) -> MySQLTable:
    store: MySQLTable = locks.backend.store
    return store


def rw_spec(mode: str, queue_ttl: float) -> LeaseSpec:
    """A read-write lock's spec (``mode``: "read" or "write")."""
    return LeaseSpec(Kind.RWLOCK, mode=Mode(mode), queue_ttl=queue_ttl)


def tables(url: str, table: str) -> list[str]:
    rows = raw(
        url,
        "SELECT TABLE_NAME FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE %s ORDER BY TABLE_NAME",
        (table + "%",),
    )
    return [str(row[0]) for row in rows]


def entries(url: str, table: str, name: str) -> list[tuple[Any, ...]]:
    """(token, entry, mode, seq) of each stored entry of ``name`` not released, by seq (a
    released one stays, lapsed with seq 0, as the name's last use, until the next acquire)."""
    return raw(
        url,
        f"SELECT CAST(token AS CHAR), entry, mode, seq FROM `{table}_rwlock_entries` "
        f"WHERE name = %s AND seq > 0 ORDER BY entry, seq",
        (name.encode(),),
    )


def test_tables_are_made_by_the_first_rwlock_acquire_only(mysql_url: str) -> None:
    table = f"t_{uuid.uuid4().hex[:12]}"
    with tenure.connect(mysql_url, table=table) as locks:
        lock = locks.lock("plain", ttl=10)
        assert lock.acquire()
        lock.release()
        assert locks.inspect("plain", kind="rwlock") is None
        assert [info.kind for info in locks.list_locks("")] == ["lock"]
        assert locks.break_lock("plain", kind="rwlock") is False
        assert tables(mysql_url, table) == [table]  # reading made nothing
        writer = locks.rwlock("rw", ttl=10).write()
        assert writer.acquire()
        assert sorted(tables(mysql_url, table)) == sorted(
            [table, f"{table}_rwlock_entries", f"{table}_rwlocks"]
        )
        writer.release()


def test_places_in_arrival_order_become_leases(mysql_url: str) -> None:
    name = f"rw:{uuid.uuid4().hex}"
    with tenure.connect(mysql_url) as locks:
        store = store_of(locks)
        first = store.acquire(name, rw_spec("write", 3), "a" * 32, 10, HOLDER)
        assert isinstance(first, Grant)
        for token, mode in (("b" * 32, "read"), ("c" * 32, "write"), ("d" * 32, "read")):
            assert isinstance(
                store.acquire(name, rw_spec(mode, 3), token, 10, HOLDER), Busy
            )
        assert entries(mysql_url, "tenure_locks", name) == [
            ("a" * 32, "lease", "write", first.fence),
            ("b" * 32, "place", "read", 1),
            ("c" * 32, "place", "write", 2),
            ("d" * 32, "place", "read", 3),
        ]
        # A refreshed place keeps its position.
        assert isinstance(
            store.acquire(name, rw_spec("read", 3), "d" * 32, 10, HOLDER), Busy
        )
        assert store.release(Kind.RWLOCK, name, "a" * 32) is True
        # The reader ahead of the writer goes; the reader behind it waits for it.
        assert isinstance(
            store.acquire(name, rw_spec("read", 3), "d" * 32, 10, HOLDER), Busy
        )
        second = store.acquire(name, rw_spec("read", 3), "b" * 32, 10, HOLDER)
        assert isinstance(second, Grant) and second.fence > first.fence
        assert isinstance(
            store.acquire(name, rw_spec("write", 3), "c" * 32, 10, HOLDER), Busy
        )
        assert store.release(Kind.RWLOCK, name, "b" * 32) is True
        third = store.acquire(name, rw_spec("write", 3), "c" * 32, 10, HOLDER)
        assert isinstance(third, Grant) and third.fence > second.fence
        # A retried acquire (its reply lost) gets its own lease back, fence kept.
        assert store.acquire(name, rw_spec("write", 3), "c" * 32, 10, HOLDER) \
            == third
        assert entries(mysql_url, "tenure_locks", name) == [
            ("c" * 32, "lease", "write", third.fence),
            ("d" * 32, "place", "read", 3),
        ]
        assert store.release(Kind.RWLOCK, name, "d" * 32) is False  # a place, not a lease
        assert store.release(Kind.RWLOCK, name, "c" * 32) is True
        assert entries(mysql_url, "tenure_locks", name) == []
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and info.fence == third.fence and not info.held
        assert info.queued == 0


def test_lapsed_places_and_leases_are_dropped(mysql_url: str) -> None:
    name = f"rw:{uuid.uuid4().hex}"
    with tenure.connect(mysql_url) as locks:
        store = store_of(locks)
        first = store.acquire(name, rw_spec("read", 3), "a" * 32, 0.2, HOLDER)
        assert isinstance(first, Grant)
        assert isinstance(
            store.acquire(name, rw_spec("write", 0.2), "b" * 32, 10, HOLDER), Busy
        )
        time.sleep(0.5)
        assert len(entries(mysql_url, "tenure_locks", name)) == 2  # stored until an acquire
        granted = store.acquire(name, rw_spec("write", 3), "c" * 32, 10, HOLDER)
        assert isinstance(granted, Grant) and granted.fence > first.fence
        assert entries(mysql_url, "tenure_locks", name) == [
            ("c" * 32, "lease", "write", granted.fence)
        ]
        assert store.extend_many([]) == []
        store.release(Kind.RWLOCK, name, "c" * 32)


def test_a_renewal_committed_while_an_acquire_waits_is_seen(mysql_url: str) -> None:
    """An acquire that waits for a lease's row lock judges the renewed row, not the lapsed
    one it would have read without a locking read: no second writer."""
    name = f"rw:{uuid.uuid4().hex}"
    with tenure.connect(mysql_url) as locks:
        store = store_of(locks)
        assert isinstance(
            store.acquire(name, rw_spec("write", 3), "a" * 32, 0.3, HOLDER), Grant
        )
        renewer = mysql_connection(mysql_url, autocommit=False)
        try:
            with renewer.cursor() as cursor:
                cursor.execute(
                    "UPDATE tenure_locks_rwlock_entries "
                    "SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 60 SECOND "
                    "WHERE name = %s AND token = %s", (name.encode(), "a" * 32),
                )
            time.sleep(0.5)  # the stored lease has lapsed; its renewal is not committed yet
            outcome: list[Grant | Busy] = []
            contender = threading.Thread(target=lambda: outcome.append(
                store.acquire(name, rw_spec("write", 3), "b" * 32, 10, HOLDER)))
            contender.start()
            time.sleep(0.5)
            assert outcome == []  # it waits for the renewal's row lock
            renewer.commit()
            contender.join(10)
        finally:
            renewer.close()
        assert len(outcome) == 1 and isinstance(outcome[0], Busy), outcome
        assert locks.inspect(name, kind="rwlock") is not None
        assert store.owned(Kind.RWLOCK, name, "a" * 32)
        store.release(Kind.RWLOCK, name, "a" * 32)
        store.release(Kind.RWLOCK, name, "b" * 32)


def test_a_user_with_rights_on_dba_made_tables(mysql_server: Any) -> None:
    import pymysql

    table = f"dba_{uuid.uuid4().hex[:12]}"
    user = f"app_{uuid.uuid4().hex[:12]}"
    with tenure.connect(mysql_server.url, table=table) as admin:  # the DBA's set-up
        assert admin.rwlock("setup", ttl=1).write().acquire(blocking=False)
    root = pymysql.connect(unix_socket=str(mysql_server.socket), user="root", autocommit=True)
    try:
        with root.cursor() as cursor:
            cursor.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'")
            cursor.execute(f"GRANT SELECT, INSERT, UPDATE ON tenure_test.{table} "
                           f"TO '{user}'@'127.0.0.1'")
            for suffix in ("_rwlocks", "_rwlock_entries"):
                cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON "
                               f"tenure_test.{table}{suffix} TO '{user}'@'127.0.0.1'")
    finally:
        root.close()
    app_url = f"mysql://{user}:pw@127.0.0.1:{mysql_server.port}/tenure_test"
    with tenure.connect(app_url, table=table) as locks:
        rw = locks.rwlock("app", ttl=10, renew=True)
        readers = [rw.read(), rw.read()]
        for reader in readers:
            assert reader.acquire(timeout=5)
            reader.extend()
        assert rw.write().acquire(timeout=0.2) is False
        listed = [info for info in locks.list_locks("app") if info.kind == "rwlock"]
        assert [len(info.leases) for info in listed] == [2]
        for reader in readers:
            reader.release()
        assert locks.lock("app", fair=True, ttl=10).acquire(timeout=5)
        assert locks.break_lock("app", kind="rwlock") is True


def test_ls_show_break_from_the_command_line(mysql_url: str) -> None:
    prefix = f"cli:{uuid.uuid4().hex}:"
    name = prefix + "catalog"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tenure", *args, "--url", mysql_url], cwd=ROOT,
            capture_output=True, text=True, timeout=60, check=False,
        )

    with tenure.connect(mysql_url) as locks:
        rw = locks.rwlock(name, ttl=60)
        readers = [rw.read(), rw.read()]
        for reader in readers:
            assert reader.acquire()
        store = store_of(locks)
        assert isinstance(
            store.acquire(name, rw_spec("write", 60), "w" * 32, 60, HOLDER), Busy
        )
        listed = cli("ls", prefix)
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()[1:]]
        assert [row[:3] for row in rows] == [[name, "rwlock", "read"]] * 2, listed.stdout
        shown = cli("show", name, "--json")
        assert shown.returncode == 0, shown.stderr
        entry = json.loads(shown.stdout)
        assert entry["kind"] == "rwlock" and entry["queued"] == 1 and entry["held"]
        assert sorted(holder["fence"] for holder in entry["holders"]) == sorted(
            reader.fence for reader in readers
        )
        broken = cli("break", name, "--rwlock")
        assert broken.returncode == 0, broken.stderr
        assert not any(reader.owned() for reader in readers)
        assert cli("break", name, "--rwlock").returncode == 1
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and not info.held and info.queued == 1  # the queue stays
        store.release(Kind.RWLOCK, name, "w" * 32)


def test_a_renewal_that_waited_while_its_lease_ended_does_not_revive_it(mysql_url: str) -> None:
    """A statement reads NOW when it starts. A renewal that then waits for its lease's row
    while a release (here a raw one) ends it sees that end, later than its NOW, and must not
    take the lease for live and revive it: a conformance race of extend against release once
    left a read lease held this way."""
    name = f"rw:{uuid.uuid4().hex}"
    with tenure.connect(mysql_url) as locks:
        store = store_of(locks)
        assert isinstance(
            store.acquire(name, rw_spec("read", 3), "a" * 32, 30, HOLDER), Grant
        )
        ender = mysql_connection(mysql_url, autocommit=False)
        try:
            with ender.cursor() as cursor:
                cursor.execute(
                    "SELECT 1 FROM tenure_locks_rwlock_entries "
                    "WHERE name = %s AND token = %s FOR UPDATE", (name.encode(), "a" * 32),
                )
            outcome: list[list[bool]] = []
            renewal = threading.Thread(target=lambda: outcome.append(
                store.extend_many([Renewal(name, "a" * 32, 30, Kind.RWLOCK)])
            ))
            renewal.start()
            time.sleep(0.5)
            assert outcome == []  # it read NOW, and waits for the row
            with ender.cursor() as cursor:  # what a release does
                cursor.execute(
                    "UPDATE tenure_locks_rwlock_entries SET expires_at = UTC_TIMESTAMP(6), "
                    "seq = 0 WHERE name = %s AND token = %s", (name.encode(), "a" * 32),
                )
            ender.commit()
            renewal.join(10)
        finally:
            ender.close()
        assert outcome == [[False]]
        assert entries(mysql_url, "tenure_locks", name) == []
        writer = locks.rwlock(name, ttl=5).write()
        assert writer.acquire(blocking=False)
        writer.release()


def test_inspect_does_not_list_a_lease_ended_after_its_now(mysql_url: str) -> None:
    """inspect reads NOW when its statement starts and its snapshot later: a release that
    commits in between has ended the entry at a later NOW (seq 0), which inspect must not
    list as a live lease with fence 0 (``tenure verify --rwlock`` saw it)."""
    name = f"rw:{uuid.uuid4().hex}"
    with tenure.connect(mysql_url) as locks:
        writer = locks.rwlock(name, ttl=30).write()
        assert writer.acquire(blocking=False)
        fence = writer.fence
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and [lease.fence for lease in info.leases] == [fence]
        # What such an inspect's snapshot holds: the release's end, after its own NOW.
        raw(mysql_url, "UPDATE tenure_locks_rwlock_entries SET seq = 0, "
            "expires_at = UTC_TIMESTAMP(6) + INTERVAL 5 SECOND WHERE name = %s",
            (name.encode(),))
        info = locks.inspect(name, kind="rwlock")
        assert info is not None and info.leases == () and info.queued == 0


def test_a_place_lists_its_waiter_and_an_older_tenures_place_no_start(mysql_url: str) -> None:
    name = f"rw:{uuid.uuid4().hex}"
    with tenure.connect(mysql_url) as locks:
        store = store_of(locks)
        assert isinstance(store.acquire(name, rw_spec("write", 30), "a" * 32, 30, HOLDER), Grant)
        assert isinstance(store.acquire(name, rw_spec("read", 30), "b" * 32, 30, HOLDER), Busy)
        info = locks.inspect(name, kind="rwlock")
        assert info is not None
        (waiter,) = info.waiters
        assert (waiter.holder, waiter.mode) == (HOLDER, "read") and waiter.since is not None
        # An older tenure wrote its places without a start: listed, since unknown.
        raw(mysql_url, "UPDATE tenure_locks_rwlock_entries SET acquired_at = NULL "
            "WHERE name = %s AND entry = 'place'", (name.encode(),))
        info = locks.inspect(name, kind="rwlock")
        assert info is not None
        assert [(w.holder, w.since, w.mode) for w in info.waiters] == [(HOLDER, None, "read")]
        assert [lease.mode for lease in info.leases] == ["write"]
        store.release(Kind.RWLOCK, name, "b" * 32)
        store.release(Kind.RWLOCK, name, "a" * 32)


def old_rwlock_tables(url: str, table: str) -> None:
    """The read-write lock tables as a tenure from before the fair column made them (this
    tenure's, less that column), and the lock table beside them."""
    with tenure.connect(url, table=table) as locks, locks.lock("plain", ttl=10):
        pass
    for statement in RwlockStatements(table).create:
        raw(url, statement.replace("    fair        TINYINT NULL,\n", ""))


def entry_columns(url: str, table: str) -> list[str]:
    rows = raw(
        url,
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (f"{table}_rwlock_entries",),
    )
    return [str(row[0]) for row in rows]


def test_entries_from_before_the_fair_column_are_upgraded_and_read_as_rwlock(
    mysql_url: str,
) -> None:
    table = f"old_{uuid.uuid4().hex[:12]}"
    old_rwlock_tables(mysql_url, table)
    assert "fair" not in entry_columns(mysql_url, table)
    # An older tenure's fair lock: its record and its live write lease.
    raw(mysql_url, f"INSERT INTO `{table}_rwlocks` VALUES (%s, 7, 0)", (b"old",))
    raw(mysql_url,
        f"INSERT INTO `{table}_rwlock_entries` VALUES (%s, 'old-token', 'lease', 'write', 7, "
        "UTC_TIMESTAMP(6) + INTERVAL 60 SECOND, UTC_TIMESTAMP(6), 'old-host', 7, 'old-thread')",
        (b"old",))
    with tenure.connect(mysql_url, table=table) as locks:
        info = locks.inspect("old", kind="fair")  # the first statement upgrades the table
        assert entry_columns(mysql_url, table)[-1] == "fair"
        assert info is not None and info.kind == "rwlock" and info.fence == 7
        assert [(lease.holder.host, lease.fair) for lease in info.leases] == [("old-host", False)]
        with locks.lock("new", ttl=10, fair=True):
            shown = locks.inspect("new", kind="rwlock")
            assert shown is not None and shown.kind == "fair"
            assert [lease.fair for lease in shown.leases] == [True]
        assert locks.break_lock("old", kind="rwlock")
        fair = locks.lock("old", ttl=10, fair=True)
        assert fair.acquire(blocking=False) and (fair.fence or 0) > 7
        shown = locks.inspect("old", kind="rwlock")
        assert shown is not None and shown.kind == "fair"
        fair.release()
    assert entry_columns(mysql_url, table).count("fair") == 1


def test_a_fair_column_upgrade_blocked_by_a_long_transaction_gives_up_and_is_tried_again(
    mysql_url: str,
) -> None:
    table = f"old_{uuid.uuid4().hex[:12]}"
    old_rwlock_tables(mysql_url, table)
    reader = mysql_connection(mysql_url, autocommit=False)
    try:
        with reader.cursor() as cursor:
            # An open transaction that read the table holds its metadata lock until it ends.
            cursor.execute(f"SELECT COUNT(*) FROM `{table}_rwlock_entries`")
            cursor.fetchall()
        with tenure.connect(mysql_url, table=table, timeout=2) as locks:
            with pytest.raises(tenure.BackendError, match="ALTER"):
                locks.inspect("name", kind="rwlock")
            reader.commit()
            # The next operation upgrades the table and goes on.
            with locks.lock("name", ttl=10, fair=True):
                info = locks.inspect("name", kind="rwlock")
                assert info is not None and info.kind == "fair"
    finally:
        reader.close()
    assert entry_columns(mysql_url, table)[-1] == "fair"
