"""Semaphores on a PostgreSQL permits table made before slot rows (each permit a row keyed by
its own token, no ``holder_token``): tenure adds the column at its first semaphore acquire
(once, with many clients at once), keeps the permits already there, and a tenure from before
slot rows keeps working beside it: each counts the other's live permits, so the limit holds
across both. The old tenure's steps are played here by the statements it ran (their
essentials), on the plain driver."""

from __future__ import annotations

import urllib.parse
import uuid

import pytest

import tenure
from tenure._errors import ConfigurationError
from tenure.backends.postgresql._semaphore_sql import HOLDER_TOKEN, SemaphoreStatements
from tests.integration.sql_support import all_at_once, raw

pytestmark = pytest.mark.postgresql

# The permits table as tenure created it before slot rows.
OLD_PERMITS = """
CREATE TABLE "{permits}" (
    name        text COLLATE "C" NOT NULL,
    token       text COLLATE "C" NOT NULL,
    fence       bigint NOT NULL,
    permits     integer,
    expires_at  timestamptz,
    acquired_at timestamptz,
    host        text,
    pid         bigint,
    thread      text,
    PRIMARY KEY (name, token)
)
"""

# What an old tenure's grant wrote: the record's fence bumped, a row keyed by its token.
OLD_GRANT = """
WITH bumped AS (
    INSERT INTO "{permits}" AS rec (name, token, fence, permits)
    VALUES (%(name)s, '', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, %(limit)s)
    ON CONFLICT (name, token) DO UPDATE SET
        fence = greatest(rec.fence + 1, excluded.fence), permits = excluded.permits
    RETURNING rec.fence
)
INSERT INTO "{permits}" (name, token, fence, expires_at, acquired_at, host, pid, thread)
SELECT %(name)s, %(token)s, bumped.fence, clock_timestamp() + interval '60 seconds',
       clock_timestamp(), 'old-host', 7, 'old-thread'
FROM bumped
RETURNING fence
"""

# What an old tenure counted before granting: every live row of the name but the record.
OLD_COUNT = """
SELECT count(*) FROM "{permits}"
WHERE name = %(name)s AND token <> '' AND expires_at > clock_timestamp()
"""

# An old tenure's release ended its own row; its acquire dropped every expired row.
OLD_RELEASE = """
UPDATE "{permits}" SET expires_at = clock_timestamp(), host = NULL, pid = NULL, thread = NULL
WHERE name = %(name)s AND token = %(token)s AND expires_at > clock_timestamp()
RETURNING 1
"""
OLD_DROP = """
DELETE FROM "{permits}"
WHERE name = %(name)s AND token <> '' AND expires_at <= clock_timestamp()
"""


@pytest.fixture
def table(postgresql_url: str) -> str:
    """A lock table name whose permits table has the old shape, with a live permit of an
    old client on "held" (limit 2)."""
    name = f"old_{uuid.uuid4().hex[:12]}"
    permits = SemaphoreStatements(name).permits
    raw(postgresql_url, OLD_PERMITS.format(permits=permits))
    old(postgresql_url, name, OLD_GRANT, token="old-token")
    return name


def old(url: str, table: str, statement: str, name: str = "held", token: str = "",
        limit: int = 2) -> list[tuple[object, ...]]:
    sql = statement.format(permits=SemaphoreStatements(table).permits)
    return raw(url, sql, {"name": name, "token": token, "limit": limit})


def has_column(url: str, table: str) -> bool:
    rows = raw(
        url,
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
        "AND NOT attisdropped",
        (SemaphoreStatements(table).quoted, HOLDER_TOKEN),
    )
    return bool(rows)


def test_the_first_acquire_adds_the_column_and_keeps_the_permits(
    postgresql_url: str, table: str
) -> None:
    with tenure.connect(postgresql_url, table=table) as locks:
        # Reading needs no column, and adds none.
        info = locks.inspect("held", kind="semaphore")
        assert info is not None and [lease.holder.host for lease in info.leases] == ["old-host"]
        assert not has_column(postgresql_url, table)
        first = locks.semaphore("held", limit=2, ttl=30)
        first.acquire()
        assert has_column(postgresql_url, table)
        # The old client's permit still counts: the limit (2) is reached.
        assert not locks.semaphore("held", limit=2, ttl=30).acquire(blocking=False)
        info = locks.inspect("held", kind="semaphore")
        assert info is not None and len(info.leases) == 2
        assert info.leases[1].fence == first.fence
        # The old client releases the old way, and its expired row is dropped by the grant.
        assert old(postgresql_url, table, OLD_RELEASE, token="old-token")
        second = locks.semaphore("held", limit=2, ttl=30)
        second.acquire()
        assert first.fence is not None and second.fence is not None
        assert second.fence > first.fence
        tokens = {row[0] for row in raw(
            postgresql_url,
            f"SELECT token FROM {SemaphoreStatements(table).quoted} WHERE name = 'held'")}
        assert tokens == {"", "#1", "#2"}
        first.release()
        second.release()


def test_an_old_client_counts_the_new_permits_and_the_new_its(
    postgresql_url: str, table: str
) -> None:
    with tenure.connect(postgresql_url, table=table) as locks:
        ours = locks.semaphore("held", limit=2, ttl=30)
        ours.acquire()
        # An old client sees both live permits: it would refuse a third.
        assert old(postgresql_url, table, OLD_COUNT) == [(2,)]
        old(postgresql_url, table, OLD_RELEASE, token="old-token")
        assert old(postgresql_url, table, OLD_COUNT) == [(1,)]
        # An old client takes the freed permit: this tenure counts it.
        old(postgresql_url, table, OLD_GRANT, token="old-again")
        assert not locks.semaphore("held", limit=2, ttl=30).acquire(blocking=False)
        ours.release()
        # An old acquire drops every ended row, slot rows too: they are made again.
        old(postgresql_url, table, OLD_DROP)
        again = locks.semaphore("held", limit=2, ttl=30)
        again.acquire()
        assert old(postgresql_url, table, OLD_COUNT) == [(2,)]
        again.release()
        assert old(postgresql_url, table, OLD_RELEASE, token="old-again")
        info = locks.inspect("held", kind="semaphore")
        assert info is not None and info.leases == ()


def test_many_clients_upgrading_at_once_all_succeed(postgresql_url: str, table: str) -> None:
    def connect(number: int) -> None:
        with tenure.connect(postgresql_url, table=table) as locks:
            permit = locks.semaphore(f"s{number}", limit=1, ttl=10)
            permit.acquire()
            permit.release()

    errors = all_at_once(6, connect)
    assert errors == []
    assert has_column(postgresql_url, table)


def test_a_user_who_may_not_alter_the_table_is_told_what_to_run(
    postgresql_url: str, table: str
) -> None:
    role = f"app_{uuid.uuid4().hex[:12]}"
    quoted = SemaphoreStatements(table).quoted
    raw(postgresql_url, f'CREATE ROLE "{role}" LOGIN')
    with tenure.connect(postgresql_url, table=table) as owner:
        owner.inspect("x")  # the lock table, made by its owner
    for granted in (f'"{table}"', quoted):
        raw(postgresql_url, f'GRANT SELECT, INSERT, UPDATE, DELETE ON {granted} TO "{role}"')
    parts = urllib.parse.urlsplit(postgresql_url)
    url = urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    with tenure.connect(url, table=table) as locks:
        # Reading works without the column; the first acquire says what to run.
        info = locks.inspect("held", kind="semaphore")
        assert info is not None and len(info.leases) == 1
        with pytest.raises(ConfigurationError) as error:
            locks.semaphore("held", limit=2, ttl=10).acquire()
        assert f"ADD COLUMN IF NOT EXISTS {HOLDER_TOKEN}" in str(error.value)
    assert not has_column(postgresql_url, table)
    with tenure.connect(postgresql_url, table=table) as owner:
        owner.semaphore("other", limit=1, ttl=10).acquire(blocking=False)
    with tenure.connect(url, table=table) as locks:
        permit = locks.semaphore("held", limit=2, ttl=10)
        permit.acquire()
        permit.release()
