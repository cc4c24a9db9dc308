"""Elections on a PostgreSQL lock table made before the election value's columns: tenure adds
them at connect (once, with many clients connecting at once), keeps the rows and leases
already there, and a tenure from before them, which neither sets nor clears the value, never
makes a stale value look current. The old tenure's steps are played here by the statements it
ran, on the plain driver."""

from __future__ import annotations

import urllib.parse
import uuid

import pytest

import tenure
from tenure._errors import ConfigurationError
from tenure.backends._sql_common import schema_mark
from tenure.backends.postgresql._sql import VALUE_COLUMNS
from tests.integration.sql_support import all_at_once, raw

pytestmark = pytest.mark.postgresql

# The lock table as tenure created it before elections.
OLD_TABLE = """
CREATE TABLE "{table}" (
    name        text COLLATE "C" PRIMARY KEY,
    fence       bigint NOT NULL,
    token       text,
    expires_at  timestamptz,
    acquired_at timestamptz,
    host        text,
    pid         bigint,
    thread      text
) WITH (fillfactor = 70)
"""

# What an old tenure's acquire does to a free or expired row (its columns only).
OLD_TAKE = """
UPDATE "{table}" SET token = %(token)s, fence = fence + 1,
    expires_at = clock_timestamp() + interval '10 seconds', acquired_at = clock_timestamp(),
    host = 'old', pid = 1, thread = 'old'
WHERE name = %(name)s AND (token IS NULL OR expires_at <= clock_timestamp())
RETURNING fence
"""

# An old tenure's release: it frees the lease and leaves the value's columns as they were.
OLD_RELEASE = """
UPDATE "{table}" SET token = NULL, expires_at = clock_timestamp(), acquired_at = NULL,
    host = NULL, pid = NULL, thread = NULL
WHERE name = %(name)s AND token = %(token)s
RETURNING 1
"""


@pytest.fixture
def table(postgresql_url: str) -> str:
    """A lock table of the old shape, with a live lease of an old client on "held"."""
    name = f"old_{uuid.uuid4().hex[:12]}"
    raw(postgresql_url, OLD_TABLE.format(table=name))
    raw(postgresql_url, f"COMMENT ON TABLE \"{name}\" IS '{schema_mark()}'")
    raw(
        postgresql_url,
        f'INSERT INTO "{name}" VALUES (%s, 41, %s, clock_timestamp() + interval \'60 s\', '
        "clock_timestamp(), 'old-host', 7, 'old-thread')",
        ("held", "old-token"),
    )
    return name


def columns(url: str, table: str) -> set[str]:
    rows = raw(
        url,
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
        "AND attnum > 0 AND NOT attisdropped",
        (f'"{table}"',),
    )
    return {row[0] for row in rows}


def test_connecting_adds_the_columns_and_keeps_the_leases(
    postgresql_url: str, table: str
) -> None:
    assert not set(VALUE_COLUMNS) & columns(postgresql_url, table)
    with tenure.connect(postgresql_url, table=table) as locks:
        info = locks.inspect("held")
        assert set(VALUE_COLUMNS) <= columns(postgresql_url, table)
        # The old client's lease is untouched, and has no value.
        assert info is not None and info.holder is not None
        assert (info.fence, info.holder.host, info.value) == (41, "old-host", None)
        assert locks.election("held", ttl=5).leader() is not None
        election = locks.election("fresh", ttl=10)
        leadership = election.campaign(value="here:1")
        leader = election.leader()
        assert leader is not None and (leader.value, leader.term) == ("here:1", leadership.term)
        leadership.resign()
    # Still a tenure table of the same schema version: an older tenure keeps working on it.
    comment = raw(postgresql_url, "SELECT obj_description(to_regclass(%s), 'pg_class')",
                  (f'"{table}"',))
    assert comment == [(schema_mark(),)]


def test_many_clients_upgrading_at_once_all_succeed(postgresql_url: str, table: str) -> None:
    def connect(number: int) -> None:
        with tenure.connect(postgresql_url, table=table) as locks:
            election = locks.election(f"e{number}", ttl=10)
            election.campaign(value=str(number)).resign()

    errors = all_at_once(6, connect)
    assert errors == []
    assert set(VALUE_COLUMNS) <= columns(postgresql_url, table)


def test_an_old_client_never_makes_a_stale_value_look_current(
    postgresql_url: str, table: str
) -> None:
    sql = {"table": table}
    with tenure.connect(postgresql_url, table=table) as locks:
        election = locks.election("e", ttl=10)
        leadership = election.campaign(value="stale")
        term = leadership.term
        assert term is not None
        # The leader's lease runs out (as the server sees it: its process paused, say)...
        raw(
            postgresql_url,
            f'UPDATE "{table}" SET expires_at = clock_timestamp() - interval \'1 second\' '
            "WHERE name = 'e'",
        )
        # ...and an old client takes the name over...
        assert raw(postgresql_url, OLD_TAKE.format(**sql), {"name": "e", "token": "old"})
        # ...holds it, with the old value still in the row: it is not shown.
        info = locks.inspect("e")
        assert info is not None and info.holder is not None and info.holder.host == "old"
        assert info.value is None and info.fence > term
        leader = election.leader()
        assert leader is not None and leader.value is None
        # ...and releases it the old way: a free lock, no value.
        assert raw(postgresql_url, OLD_RELEASE.format(**sql), {"name": "e", "token": "old"})
        info = locks.inspect("e")
        assert info is not None and info.holder is None and info.value is None
        assert election.leader() is None
        # The former leader is no longer one: its value can't be replaced.
        with pytest.raises(tenure.LockLost):
            leadership.proclaim("late")
        info = locks.inspect("e")
        assert info is not None and info.value is None
        # A new campaign stores its own value, not the stale one.
        fresh = election.campaign(value="fresh")
        leader = election.leader()
        assert leader is not None and (leader.value, leader.term) == ("fresh", fresh.term)
        fresh.resign()


def test_a_table_that_is_not_tenure_s_is_not_altered(postgresql_url: str) -> None:
    name = f"other_{uuid.uuid4().hex[:12]}"
    raw(postgresql_url, OLD_TABLE.format(table=name))
    with tenure.connect(postgresql_url, table=name) as locks, pytest.raises(ConfigurationError):
        locks.inspect("x")
    assert not set(VALUE_COLUMNS) & columns(postgresql_url, name)


def test_a_user_who_may_not_alter_the_table_is_told_what_to_run(
    postgresql_url: str, table: str
) -> None:
    role = f"app_{uuid.uuid4().hex[:12]}"
    raw(postgresql_url, f'CREATE ROLE "{role}" LOGIN')
    raw(postgresql_url, f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO "{role}"')
    parts = urllib.parse.urlsplit(postgresql_url)
    url = urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    with tenure.connect(url, table=table) as locks, pytest.raises(ConfigurationError) as error:
        locks.inspect("held")
    assert "ADD COLUMN IF NOT EXISTS value text" in str(error.value)
    assert not set(VALUE_COLUMNS) & columns(postgresql_url, table)
    # Once the owner ran it, the same user works, elections included.
    with tenure.connect(postgresql_url, table=table) as owner:
        owner.inspect("held")
    with tenure.connect(url, table=table) as locks:
        leadership = locks.election("e", ttl=10).campaign(value="v")
        leader = locks.election("e", ttl=10).leader()
        assert leader is not None and leader.value == "v"
        leadership.resign()
