"""MySQL/MariaDB leader election values, against what the server stores: a lock table from
before the value columns is upgraded at connect (also by many clients at once), a tenure from
before them (its statements, which neither set nor clear the columns) never makes a stale
value look current, a retried campaign keeps a proclaimed value, and only the live lease that
wrote a value can replace it.

A client from before the columns is played by the statements it ran: the plain acquire (the
same statement today), and a release or break that frees the row without touching the value
columns (written out here with ``raw``)."""

from __future__ import annotations

import os
import threading
import time
import urllib.parse
import uuid

import pymysql  # type: ignore[import-untyped]
import pytest

import tenure
from tenure._types import Grant, Holder, Kind, LeaseSpec
from tenure.backends._sql_common import SCHEMA_VERSION, schema_mark
from tenure.backends.mysql._store import MySQLTable
from tests.integration.sql_support import raw

pytestmark = pytest.mark.mysql

HOLDER = Holder("test", os.getpid(), "main")


def store_of(locks: tenure.Locks) -> MySQLTable:
    store: MySQLTable = locks.backend.store
    return store


def old_table(url: str, table: str) -> None:
    """The lock table as a tenure from before elections created it."""
    raw(url, f"""
CREATE TABLE `{table}` (
    name        VARBINARY(1024) NOT NULL,
    fence       BIGINT NOT NULL,
    token       VARBINARY(255) NULL,
    expires_at  DATETIME(6) NULL,
    acquired_at DATETIME(6) NULL,
    host        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    pid         BIGINT NULL,
    thread      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB COMMENT = '{schema_mark(SCHEMA_VERSION)}'
""")


def columns(url: str, table: str) -> list[str]:
    found = raw(
        url,
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (table,),
    )
    return [str(row[0]) for row in found]


def old_free(url: str, table: str, name: str) -> None:
    """An old tenure's release or break: the lease ends, the value columns stay as they were."""
    raw(
        url,
        f"UPDATE `{table}` SET token = NULL, expires_at = UTC_TIMESTAMP(6), acquired_at = NULL, "
        "host = NULL, pid = NULL, thread = NULL WHERE name = %s",
        (name.encode(),),
    )


@pytest.fixture
def table() -> str:
    return f"el_{uuid.uuid4().hex[:12]}"


def test_an_old_table_gets_the_value_columns_and_its_leases_carry_on(
    mysql_url: str, table: str
) -> None:
    old_table(mysql_url, table)
    # A lease an old client holds, in the old table.
    raw(
        mysql_url,
        f"INSERT INTO `{table}` (name, fence, token, expires_at, acquired_at, host, pid, thread) "
        "VALUES (%s, 7, 'old-token', UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, UTC_TIMESTAMP(6), "
        "'old-host', 1, 'main')",
        (b"held",),
    )
    assert "value" not in columns(mysql_url, table)
    with tenure.connect(mysql_url, table=table) as locks:
        info = locks.inspect("held")
        assert info is not None and info.holder is not None and info.value is None
        assert info.holder.host == "old-host" and info.fence == 7
        assert columns(mysql_url, table)[-2:] == ["value", "value_token"]
        election = locks.election("leader", ttl=10)
        leadership = election.campaign(value="host-a:8080")
        leader = election.leader()
        assert leader is not None and leader.value == "host-a:8080"
        assert leader.term == leadership.term
        # The old lease is still the old client's: refused to us, kept for it.
        assert not locks.lock("held", ttl=5).acquire(blocking=False)
        leadership.resign()
    # Connecting again finds the columns there: nothing to add, nothing fails.
    with tenure.connect(mysql_url, table=table) as locks:
        assert locks.election("leader", ttl=10).leader() is None


def test_many_clients_upgrade_one_old_table_at_once(mysql_url: str, table: str) -> None:
    old_table(mysql_url, table)
    start = threading.Barrier(6)
    errors: list[BaseException] = []
    values: list[str | None] = []

    def client(index: int) -> None:
        try:
            with tenure.connect(mysql_url, table=table) as locks:
                start.wait(timeout=10)
                info = locks.inspect("nothing")  # the first statement upgrades the table
                assert info is None
                election = locks.election(f"leader-{index}", ttl=10)
                leadership = election.campaign(value=f"v{index}")
                leader = election.leader()
                values.append(None if leader is None else leader.value)
                leadership.resign()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(v or "" for v in values) == [f"v{i}" for i in range(6)]
    assert columns(mysql_url, table).count("value") == 1


def test_an_upgrade_blocked_by_a_long_transaction_gives_up_and_is_tried_again(
    mysql_url: str, table: str
) -> None:
    old_table(mysql_url, table)
    parts = urllib.parse.urlsplit(mysql_url)
    reader = pymysql.connect(
        host=parts.hostname, port=parts.port, user=urllib.parse.unquote(parts.username or ""),
        password=urllib.parse.unquote(parts.password or ""), database=parts.path.lstrip("/"),
        connect_timeout=5,
    )
    try:
        with reader.cursor() as cursor:
            # An open transaction that read the table holds its metadata lock until it ends.
            cursor.execute("START TRANSACTION")
            cursor.execute(f"SELECT COUNT(*) FROM `{table}`")
            cursor.fetchall()
        with tenure.connect(mysql_url, table=table, timeout=2) as locks:
            with pytest.raises(tenure.BackendError) as raised:
                locks.inspect("leader")
            # The one form: the backend, the action and the lock, then why.
            assert str(raised.value).startswith(
                f"{locks.store.describe()}: inspect of 'leader' failed: cannot add the "
                f"election value columns to table {table!r} (this needs the ALTER privilege "
                "once; see the docs on leader elections): "
            ), raised.value
            assert raised.value.__cause__ is not None
            reader.commit()
            # The next operation upgrades the table and goes on.
            leadership = locks.election("leader", ttl=10).campaign(value="v")
            leader = locks.election("leader").leader()
            assert leader is not None and leader.value == "v"
            leadership.resign()
    finally:
        reader.close()
    assert columns(mysql_url, table)[-2:] == ["value", "value_token"]


def test_an_old_client_never_makes_a_stale_value_look_current(
    mysql_url: str, table: str
) -> None:
    with tenure.connect(mysql_url, table=table) as locks:
        election = locks.election("leader", ttl=10)
        first = election.campaign(value="old-leader")
        # An old tenure breaks the lease (its break leaves the value columns alone) ...
        old_free(mysql_url, table, "leader")
        assert election.leader() is None
        # ... and an old client takes the name (today's plain acquire is the same statement).
        lock = locks.lock("leader", ttl=10)
        assert lock.acquire(blocking=False)
        info = locks.inspect("leader")
        assert info is not None and info.holder is not None and info.fence == lock.fence
        assert info.value is None
        [listed] = locks.list_locks("leader")
        assert listed.value is None
        stored = raw(
            mysql_url, f"SELECT value FROM `{table}` WHERE name = %s", (b"leader",)
        )
        assert stored == [("old-leader",)]  # still stored, never shown
        # The old leader's proclaim is refused: its lease is over.
        with pytest.raises(tenure.LockLost):
            first.proclaim("again")
        lock.release()
        second = election.campaign(value="new-leader")
        leader = election.leader()
        assert leader is not None and leader.value == "new-leader"
        assert leader.term == second.term
        second.resign()


def test_an_expired_leaders_value_is_hidden_and_replaced(mysql_url: str, table: str) -> None:
    with tenure.connect(mysql_url, table=table) as locks:
        store = store_of(locks)
        granted = store.acquire("leader", LeaseSpec(value="a"), "token-a", 0.2, HOLDER)
        assert isinstance(granted, Grant)
        time.sleep(0.3)
        info = locks.inspect("leader")
        assert info is not None and info.holder is None and info.value is None
        assert not store.set_value("leader", "token-a", "late")
        # A plain lock over the expired lease: no value shows with it.
        assert isinstance(store.acquire("leader", LeaseSpec(), "token-b", 10, HOLDER), Grant)
        info = locks.inspect("leader")
        assert info is not None and info.holder is not None and info.value is None
        # A plain lock's lease has no value to replace.
        assert not store.set_value("leader", "token-b", "sneaked")
        assert store.release(Kind.LOCK, "leader", "token-b")
        assert raw(
            mysql_url, f"SELECT value, value_token FROM `{table}` WHERE name = %s",
            (b"leader",),
        ) == [(None, None)]


def test_a_retried_campaign_keeps_the_proclaimed_value(mysql_url: str, table: str) -> None:
    with tenure.connect(mysql_url, table=table) as locks:
        store = store_of(locks)
        first = store.acquire("leader", LeaseSpec(value="one"), "token-a", 10, HOLDER)
        assert isinstance(first, Grant)
        assert store.set_value("leader", "token-a", "two")
        assert store.set_value("leader", "token-a", "two")  # the same value again counts
        assert not store.set_value("leader", "token-other", "three")
        # The same token again (a reply lost): the same term, the value it holds now.
        again = store.acquire("leader", LeaseSpec(value="one"), "token-a", 10, HOLDER)
        assert again == first
        info = locks.inspect("leader")
        assert info is not None and info.value == "two" and info.fence == first.fence
        # Another candidate is refused and changes nothing.
        refused = store.acquire("leader", LeaseSpec(value="b"), "token-b", 10, HOLDER)
        assert not isinstance(refused, Grant)
        info = locks.inspect("leader")
        assert info is not None and info.value == "two"
        assert store.release(Kind.LOCK, "leader", "token-a")
        assert locks.inspect("leader") is not None
        assert raw(
            mysql_url, f"SELECT value, value_token FROM `{table}` WHERE name = %s",
            (b"leader",),
        ) == [(None, None)]


def test_values_are_stored_as_given(mysql_url: str, table: str) -> None:
    with tenure.connect(mysql_url, table=table) as locks:
        election = locks.election("leader", ttl=10)
        value = "ünïcode 🚀 'quote' \\ back" + "x" * 3000 + "é" * 1000
        leadership = election.campaign(value=value[:4096])
        leader = election.leader()
        assert leader is not None and leader.value == value[:4096]
        leadership.proclaim("  trailing  ")
        leader = election.leader()
        assert leader is not None and leader.value == "  trailing  "
        leadership.resign()
