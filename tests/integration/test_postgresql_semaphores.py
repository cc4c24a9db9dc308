"""PostgreSQL's semaphore permits on a real server, where the statements' own clock matters:
a renewal that waited for its permit's row while a release ended it does not revive it."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tenure._types import Grant, Holder, Kind, LeaseSpec, Renewal
from tenure.backends.postgresql._semaphore_sql import HOLDER_TOKEN, SemaphoreStatements
from tenure.backends.postgresql._sync.store import PostgreSQLStore

pytestmark = pytest.mark.postgresql

HOLDER = Holder("test-host", os.getpid(), "main")
PERMIT = LeaseSpec(Kind.SEMAPHORE, limit=1)


@pytest.fixture
def table() -> str:
    return f"sem_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def backend(postgresql_url: str, table: str) -> Iterator[PostgreSQLStore]:
    backend = PostgreSQLStore.from_url(postgresql_url, table=table)
    try:
        yield backend
    finally:
        backend.close()


def test_a_renewal_that_waited_while_its_permit_ended_does_not_revive_it(
    postgresql_url: str, table: str, backend: PostgreSQLStore, name: str
) -> None:
    """The renewal reads the clock, then waits for its permit's row while a release (here a
    raw one, as the release writes it) ends it: the end it then sees is later than its
    clock, and it must not take the permit for live and revive it (the limit would then
    count a permit nobody holds, for its whole new ttl)."""
    assert isinstance(backend.acquire(name, PERMIT, "holder", 30, HOLDER), Grant)
    permits = SemaphoreStatements(table).quoted
    mine = f"name = %s AND {HOLDER_TOKEN} = 'holder'"
    conninfo = postgresql_url.partition("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as ender:
        with ender.transaction():
            ender.execute(f"SELECT 1 FROM {permits} WHERE {mine} FOR UPDATE", (name,))
            outcome: list[list[bool]] = []
            renewal = threading.Thread(target=lambda: outcome.append(
                backend.extend_many([Renewal(name, "holder", 30, kind=Kind.SEMAPHORE)])
            ))
            renewal.start()
            renewal.join(0.5)
            assert renewal.is_alive(), "the renewal did not wait for the row"
            ender.execute(
                f"UPDATE {permits} SET expires_at = clock_timestamp(), host = NULL, "
                f"pid = NULL, thread = NULL WHERE {mine}", (name,)
            )
        renewal.join(10)
    assert outcome == [[False]]
    assert isinstance(backend.acquire(name, PERMIT, "next", 30, HOLDER), Grant)
    assert backend.release(Kind.SEMAPHORE, name, "next")
