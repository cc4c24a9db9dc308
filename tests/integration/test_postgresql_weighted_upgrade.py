"""Weighted permits on a PostgreSQL permits table made by a tenure from before weights (slot
rows with ``holder_token``, no ``weight`` or ``arrival``): reading needs no upgrade and
counts its permits as weight 1; the first acquire adds both columns in place (once, with
many clients at once), keeps the permits already there, and counts each old permit as one
unit beside the weighted ones; an old client's release still frees its unit. The old
tenure's steps are played by the statements it ran (their essentials), on the plain driver.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import tenure
from tenure.backends.postgresql._semaphore_sql import HOLDER_TOKEN, SemaphoreStatements
from tests.integration.sql_support import all_at_once, raw
from tests.timing import scaled

pytestmark = pytest.mark.postgresql

# The permits table as the tenure before weights created it.
OLD_PERMITS = f"""
CREATE TABLE "{{permits}}" (
    name         text COLLATE "C" NOT NULL,
    token        text COLLATE "C" NOT NULL,
    fence        bigint NOT NULL,
    permits      integer,
    expires_at   timestamptz,
    acquired_at  timestamptz,
    host         text,
    pid          bigint,
    thread       text,
    {HOLDER_TOKEN} text COLLATE "C",
    PRIMARY KEY (name, token)
) WITH (fillfactor = 70)
"""

# What its grant left: the record (limit 4) and a slot row held by "old-token", no weight.
OLD_GRANT = f"""
WITH bumped AS (
    INSERT INTO "{{permits}}" AS rec (name, token, fence, permits)
    VALUES (%(name)s, '', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, 4)
    ON CONFLICT (name, token) DO UPDATE SET fence = rec.fence + 1
    RETURNING rec.fence
)
INSERT INTO "{{permits}}"
    (name, token, fence, expires_at, acquired_at, host, pid, thread, {HOLDER_TOKEN})
SELECT %(name)s, '#1', bumped.fence, clock_timestamp() + interval '60 seconds',
       clock_timestamp(), 'old-host', 7, 'old-thread', 'old-token'
FROM bumped
"""

# Its release ended the slot row it held.
OLD_RELEASE = f"""
UPDATE "{{permits}}" SET expires_at = clock_timestamp(), host = NULL, pid = NULL, thread = NULL
WHERE name = %(name)s AND {HOLDER_TOKEN} = 'old-token' AND expires_at > clock_timestamp()
RETURNING 1
"""


@pytest.fixture
def table(postgresql_url: str) -> str:
    """A lock table name whose permits table has the shape from before weights, with one
    live permit of an old client on "held" (limit 4)."""
    name = f"unweighted_{uuid.uuid4().hex[:12]}"
    permits = SemaphoreStatements(name).permits
    raw(postgresql_url, OLD_PERMITS.format(permits=permits))
    raw(postgresql_url, OLD_GRANT.format(permits=permits), {"name": "held"})
    return name


def columns(url: str, table: str) -> set[str]:
    rows = raw(
        url,
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        "AND NOT attisdropped",
        (SemaphoreStatements(table).quoted,),
    )
    return {str(row[0]) for row in rows}


def test_the_first_acquire_adds_the_columns_and_old_permits_weigh_one(
    postgresql_url: str, table: str
) -> None:
    with tenure.connect(postgresql_url, table=table) as locks:
        # Reading needs neither column, and adds none: the old permit weighs 1.
        info = locks.inspect("held", kind="semaphore")
        assert info is not None and info.units == 1 and info.queued == 0
        assert [(lease.holder.host, lease.weight) for lease in info.leases] == [("old-host", 1)]
        assert {"weight", "arrival"}.isdisjoint(columns(postgresql_url, table))
        heavy = locks.semaphore("held", limit=4, weight=3, ttl=30)
        assert heavy.acquire(blocking=False)  # 1 old unit + 3 fit the limit of 4
        assert {"weight", "arrival"} <= columns(postgresql_url, table)
        assert locks.semaphore("held", limit=4, ttl=30).acquire(blocking=False) is False
        info = locks.inspect("held", kind="semaphore")
        assert info is not None and info.units == 4 and info.queued == 0
        assert [lease.weight for lease in info.leases] == [1, 3]
        # The old client releases the old way: its unit is free again.
        permits = SemaphoreStatements(table).permits
        assert raw(postgresql_url, OLD_RELEASE.format(permits=permits), {"name": "held"})
        light = locks.semaphore("held", limit=4, ttl=30)
        assert light.acquire(blocking=False)
        assert heavy.fence is not None and light.fence is not None
        assert light.fence > heavy.fence
        heavy.release()
        light.release()
        info = locks.inspect("held", kind="semaphore")
        assert info is not None and info.units == 0 and info.leases == ()


def test_a_waiter_queues_on_the_upgraded_table(postgresql_url: str, table: str) -> None:
    """The old permit holds 1 unit; a waiter of weight 4 keeps a place (listed with its
    weight) until the old client releases, and is then woken and granted."""
    with tenure.connect(postgresql_url, table=table) as locks:
        granted = threading.Event()

        def wait() -> None:
            with locks.semaphore("held", limit=4, weight=4, ttl=30, timeout=30):
                granted.set()

        waiter = threading.Thread(target=wait)
        waiter.start()
        try:
            deadline = time.monotonic() + scaled(10)
            info = locks.inspect("held", kind="semaphore")
            while info is None or not info.queued:
                assert time.monotonic() < deadline, "the waiter never queued"
                time.sleep(0.01)
                info = locks.inspect("held", kind="semaphore")
            assert info is not None and [w.weight for w in info.waiters] == [4]
            assert not granted.is_set()
            permits = SemaphoreStatements(table).permits
            assert raw(postgresql_url, OLD_RELEASE.format(permits=permits), {"name": "held"})
            assert granted.wait(30)
        finally:
            waiter.join(30)
        info = locks.inspect("held", kind="semaphore")
        assert info is not None and info.queued == 0 and info.units == 0


def test_many_clients_upgrading_at_once_all_succeed(postgresql_url: str, table: str) -> None:
    def connect(number: int) -> None:
        with tenure.connect(postgresql_url, table=table) as locks:
            permit = locks.semaphore(f"s{number}", limit=2, weight=2, ttl=10)
            permit.acquire()
            permit.release()

    assert all_at_once(6, connect) == []
    assert {"weight", "arrival"} <= columns(postgresql_url, table)
